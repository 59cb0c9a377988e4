//! Fuzzes the transport reader discovery uses (version and sender): `choria_provisioner::fuzzing::decode_transport`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::decode_transport(data));
