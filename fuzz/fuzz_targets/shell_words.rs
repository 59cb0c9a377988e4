//! Fuzzes shell-word splitting of the helper command line: `choria_provisioner::fuzzing::shell_words`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::shell_words(data));
