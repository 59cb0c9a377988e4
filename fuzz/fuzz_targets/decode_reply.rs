//! Fuzzes the client-side reply decoder (transport → secure reply → reply, hash check).
#![no_main]

use choria_provisioner::choria::protocol::decode_reply;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = decode_reply(data) {
        let _ = (e.to_string(), e.layer);
    }
});
