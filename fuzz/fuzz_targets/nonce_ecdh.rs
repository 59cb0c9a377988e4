//! Fuzzes the gen25519 nonce signature check and the X25519 key transport: `choria_provisioner::fuzzing::nonce_ecdh`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::nonce_ecdh(data));
