//! Fuzzes the election's JetStream PubAck and stream-info replies: `choria_provisioner::fuzzing::election_replies`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| choria_provisioner::fuzzing::election_replies(data));
