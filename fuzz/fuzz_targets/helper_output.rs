//! Fuzzes helper output and the server JWT claims built from it: `choria_provisioner::fuzzing::helper_output`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::helper_output(data));
