//! Fuzzes the transport reader discovery uses (the sender header only).
#![no_main]

use choria_provisioner::choria::protocol::{transport_sender, transport_version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = transport_version(data);
    let _ = transport_sender(data);
});
