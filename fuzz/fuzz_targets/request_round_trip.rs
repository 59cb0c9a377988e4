//! Fuzzes requests we encode from fuzzed fields, decoded and checked by the server side: `choria_provisioner::fuzzing::request_round_trip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::request_round_trip(data));
