//! Fuzzes MCollective-RPC request and reply bodies, re-encode round trip: `choria_provisioner::fuzzing::rpc_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::rpc_body(data));
