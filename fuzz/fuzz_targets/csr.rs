//! Fuzzes CSR parsing and validation against the deny list: `choria_provisioner::fuzzing::csr`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::csr(data));
