//! Fuzzes hex and KSUID ids: `choria_provisioner::fuzzing::ids`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::ids(data));
