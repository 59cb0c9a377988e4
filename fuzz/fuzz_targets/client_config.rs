//! Fuzzes choria.cfg lines and the client configuration built from them: `choria_provisioner::fuzzing::client_config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::client_config(data));
