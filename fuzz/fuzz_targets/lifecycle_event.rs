//! Fuzzes the lifecycle event decoder; what decodes must survive both encodings.
#![no_main]

use choria_provisioner::choria::lifecycle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = lifecycle::decode(data) {
        let choria = lifecycle::decode(&event.to_choria_json()).expect("Choria format decodes");
        assert_eq!(choria.identity, event.identity);
        lifecycle::decode(&event.to_cloudevent_json()).expect("CloudEvent decodes");
    }
});
