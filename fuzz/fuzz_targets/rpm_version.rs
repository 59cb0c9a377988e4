//! Fuzzes RPM version comparison as a total order: `choria_provisioner::fuzzing::rpm_version`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::rpm_version(data));
