//! Fuzzes lifecycle events in both formats, re-encode round trip: `choria_provisioner::fuzzing::lifecycle_event`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::lifecycle_event(data));
