//! Fuzzes jwt_signing_token, jwt_signing_key and jwt_verify_cert contents: `choria_provisioner::fuzzing::key_files`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::key_files(data));
