//! The layering ARCHITECTURE.md states, checked on the source: each layer names only
//! the layers below it, and only `choria` (and the simulator, a NATS client of its
//! own) names the `nats` crate.

use std::path::{Path, PathBuf};

/// The crate's layers, top first, and the bottom modules every layer may use.
const LAYERS: [&str; 6] = ["cli", "hosts", "host", "choria", "crypto", "config"];
const BOTTOM: [&str; 8] = [
    "config",
    "metrics",
    "backoff",
    "throttle",
    "json_text",
    "untrusted",
    "clock",
    "logging",
];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

fn src(module: &str) -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = root.join(module);
    let files = if dir.is_dir() {
        rust_files(&dir)
    } else {
        vec![root.join(format!("{module}.rs"))]
    };
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// The crate modules a file names through `crate::`.
fn named(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(i, _)| {
            text[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

fn assert_names_only(module: &str, allowed: &[&str]) {
    for (path, text) in src(module) {
        for name in named(&text) {
            assert!(
                name == module || allowed.contains(&name.as_str()) || name == "VERSION",
                "{} names crate::{name}, which {module} may not import",
                path.display()
            );
        }
    }
}

#[test]
fn the_bottom_modules_import_nothing_of_the_crate() {
    for module in [
        "config",
        "metrics",
        "backoff",
        "throttle",
        "json_text",
        "untrusted",
        "clock",
    ] {
        assert_names_only(module, &[]);
    }
}

#[test]
fn each_layer_imports_only_the_layers_below_it() {
    for (n, module) in LAYERS.iter().enumerate().take(LAYERS.len() - 1) {
        let mut allowed: Vec<&str> = LAYERS[n + 1..].to_vec();
        allowed.extend(BOTTOM);
        assert_names_only(module, &allowed);
    }
}

#[test]
fn the_simulator_uses_the_wire_and_crypto_but_not_the_provisioner() {
    let mut allowed = vec!["choria", "crypto"];
    allowed.extend(BOTTOM);
    assert_names_only("sim", &allowed);
}

#[test]
fn the_provisioner_layers_never_name_nats() {
    for module in ["host", "hosts", "cli", "crypto", "config", "metrics"] {
        for (path, text) in src(module) {
            assert!(
                !text.contains("nats::"),
                "{} names the nats crate: only choria may",
                path.display()
            );
        }
    }
}
