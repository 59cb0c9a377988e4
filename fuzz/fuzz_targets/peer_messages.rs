//! Fuzzes another provisioner's heartbeats and node handoffs: `choria_provisioner::fuzzing::peer_messages`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::peer_messages(data));
