//! Fuzzes the server-side request decoder and the provisioning-mode checks; a reply
//! to any request that decodes must itself decode.
#![no_main]

use choria_provisioner::choria::protocol::{decode_reply, decode_request, encode_reply, Protocol};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_request(data) {
        Ok(request) => {
            let _ = request.validate_for_provisioning(Protocol::V1, 1_767_225_600);
            let _ = request.validate_for_provisioning(Protocol::V2, 0);
            let reply = encode_reply(&request, "fuzz.example.net", &request.body, 0, None);
            decode_reply(&reply).expect("our own reply decodes");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
