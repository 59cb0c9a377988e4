//! Fuzzes Choria durations, parse and print round trip: `choria_provisioner::fuzzing::duration`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::duration(data));
