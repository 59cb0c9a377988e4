//! The fuzzers' smoke run on stable (`make test`): every generated seed, every file
//! of `fuzz/seeds/<target>/` and every crash input kept in `fuzz/regressions/<target>/`
//! goes through the same entry point the cargo-fuzz target calls
//! (`choria_provisioner::fuzzing`), which asserts the target's invariants.
//!
//! `cargo test --features fuzzing --test fuzz_smoke -- --ignored write_seeds` rewrites
//! the seed files from the crate's encoders.
#![cfg(feature = "fuzzing")]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use choria_provisioner::fuzzing;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn targets() -> Vec<&'static str> {
    fuzzing::NETWORK_TARGETS
        .iter()
        .chain(fuzzing::OTHER_TARGETS)
        .copied()
        .collect()
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// Runs every file of `fuzz/<kind>/<target>/`; returns how many ran and the failures
/// (file and panic message).
fn replay(kind: &str) -> (usize, Vec<String>) {
    let mut ran = 0;
    let mut failures = Vec::new();
    for target in targets() {
        for file in files(&fuzz_dir().join(kind).join(target)) {
            let data = std::fs::read(&file).expect("readable input");
            ran += 1;
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| fuzzing::run(target, &data))) {
                failures.push(format!("{}: {}", file.display(), panic_text(&panic)));
            }
        }
    }
    (ran, failures)
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

#[test]
fn every_entry_point_has_a_fuzz_target_and_seed_files() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    for target in targets() {
        let source = fuzz_dir().join("fuzz_targets").join(format!("{target}.rs"));
        let body = std::fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        assert!(
            body.contains(&format!("fuzzing::{target}(data)")),
            "{} calls another entry point",
            source.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target} missing from fuzz/Cargo.toml"
        );
        assert!(
            !files(&fuzz_dir().join("seeds").join(target)).is_empty(),
            "no seed files for {target}"
        );
        assert!(fuzzing::run(target, b""), "run() does not know {target}");
    }
    assert!(!fuzzing::run("no_such_target", b""));
    // No stray directory: every seed and regression directory belongs to a target.
    for kind in ["seeds", "regressions", "fuzz_targets"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            assert!(
                targets().contains(&name.as_str()),
                "{} belongs to no target",
                path.display()
            );
        }
    }
}

#[test]
fn generated_seeds_hold_every_invariant() {
    let seeds = fuzzing::seeds();
    for target in targets() {
        assert!(
            seeds.iter().any(|s| s.target == target),
            "no generated seed for {target}"
        );
    }
    for seed in &seeds {
        assert!(
            fuzzing::run(seed.target, &seed.data),
            "unknown target {}",
            seed.target
        );
    }
    // The v2 wire seeds are really v2 messages.
    let v2 = seeds
        .iter()
        .filter(|s| s.target.starts_with("decode_") && s.name.starts_with("v2_"))
        .collect::<Vec<_>>();
    assert!(v2.len() >= 9, "{} v2 seeds", v2.len());
    for seed in v2 {
        assert_eq!(
            choria_provisioner::choria::protocol::transport_version(&seed.data),
            Ok(choria_provisioner::choria::protocol::Protocol::V2),
            "{}",
            seed.name
        );
    }
}

#[test]
fn seed_files_hold_every_invariant() {
    let (ran, failures) = replay("seeds");
    assert!(ran >= targets().len(), "only {ran} seed files");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn regression_inputs_hold_every_invariant() {
    let (_, failures) = replay("regressions");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rewrites `fuzz/seeds/<target>/<name>` from [`fuzzing::seeds`].
#[test]
#[ignore = "writes files: run by hand after changing an encoder"]
fn write_seeds() {
    for seed in fuzzing::seeds() {
        let dir = fuzz_dir().join("seeds").join(seed.target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&seed.name), &seed.data).unwrap();
    }
}
