//! Fuzzes the identity a startup event announces: `choria_provisioner::fuzzing::startup_identity`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::startup_identity(data));
