//! Fuzzes the provisioner YAML and its effective-YAML round trip: `choria_provisioner::fuzzing::config_yaml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::config_yaml(data));
