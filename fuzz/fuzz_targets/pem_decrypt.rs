//! Fuzzes PEM decoding and Go's legacy PEM encryption: `choria_provisioner::fuzzing::pem_decrypt`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::pem_decrypt(data));
