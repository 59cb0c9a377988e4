//! Fuzzes provisioning JWT verification: `choria_provisioner::fuzzing::provisioning_jwt`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::provisioning_jwt(data));
