//! Fuzzes the server-side request decoder and provisioning checks; replies to it decode: `choria_provisioner::fuzzing::decode_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::decode_request(data));
