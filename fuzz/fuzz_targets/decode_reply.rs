//! Fuzzes the client-side reply decoder (transport → secure reply → reply, hash check): `choria_provisioner::fuzzing::decode_reply`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::decode_reply(data));
