//! The layering ARCHITECTURE.md states, checked on the source: each layer names only
//! the layers below it, and only `choria` (and the simulator, a NATS client of its
//! own) names the `nats` crate.

use std::path::{Path, PathBuf};

#[path = "layering/function_length.rs"]
mod function_length;

/// The crate's layers, top first, and the bottom modules every layer may use.
const LAYERS: [&str; 6] = ["cli", "fleet", "node", "choria", "crypto", "config"];
const BOTTOM: [&str; 14] = [
    "config",
    "metrics",
    "backoff",
    "budget",
    "throttle",
    "json_text",
    "untrusted",
    "clock",
    // The bottom modules above name only these two (the system interface) and
    // `untrusted` (how a value is shown in a message), which names nothing.
    "logging",
    "proc_self",
    "sys",
    // The unit tests' nats-server (`tests/support/nats_server.rs`), seeded
    // generator and small shared helpers, compiled for tests only.
    "test_nats_server",
    "test_rng",
    "test_support",
];

/// The first [`BOTTOM`] modules, which name only the system interface.
const ABOVE_SYSTEM: usize = 8;

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
fn the_bottom_modules_import_only_the_system_interface() {
    for module in &BOTTOM[..ABOVE_SYSTEM] {
        assert_names_only(module, &["sys", "proc_self", "untrusted"]);
    }
    for module in ["sys", "proc_self", "untrusted"] {
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
    for module in ["node", "fleet", "cli", "crypto", "config", "metrics"] {
        for (path, text) in src(module) {
            assert!(
                !text.contains("nats::"),
                "{} names the nats crate: only choria may",
                path.display()
            );
        }
    }
}

/// `text` without its `#[cfg(test)] mod` (the unit tests, always last in a file).
fn without_test_module(text: &str) -> &str {
    let mut offset = 0;
    while let Some(at) = text[offset..].find("#[cfg(test)]") {
        let at = offset + at;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        // Other attributes (`#[path = ...]`) may stand between it and the `mod`.
        let item = rest
            .lines()
            .map(str::trim_start)
            .find(|line| !line.starts_with("#["))
            .unwrap_or_default();
        if item.starts_with("mod ") {
            return &text[..at];
        }
        offset = at + 1;
    }
    text
}

/// The signatures of the `fn`s in `text`: from `fn ` to the body's `{` (or the `;`
/// of a trait method without a default).
fn fn_signatures(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (at, _) in text.match_indices("fn ") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let mut depth = 0i32;
        let end = text[at..]
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' | '[' => depth += 1,
                    ')' | ']' => depth -= 1,
                    _ => {}
                }
                c == '{' || (c == ';' && depth == 0)
            })
            .map_or(text.len(), |(i, _)| at + i);
        out.push(&text[at..end]);
    }
    out
}

/// The error types of the `Result<T, E>`s in `signature` (`E`, trimmed; a trailing
/// comma, as rustfmt writes a long one over several lines, is allowed).
fn result_errors(signature: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in signature.match_indices("Result<") {
        let inner = &signature[at + "Result<".len()..];
        let (mut depth, mut start, mut prev) = (0i32, 0, ' ');
        let mut args = Vec::new();
        for (i, c) in inner.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' if prev == '-' => {}
                ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(inner[start..i].trim());
                    start = i + 1;
                }
                '>' if depth == 0 => {
                    args.push(inner[start..i].trim());
                    break;
                }
                '>' => depth -= 1,
                _ => {}
            }
            prev = c;
        }
        args.retain(|a| !a.is_empty());
        if args.len() == 2 {
            out.push(args[1].to_string());
        }
    }
    out
}

#[test]
fn the_middle_layers_return_typed_errors_not_strings() {
    for module in ["node", "fleet", "choria", "crypto"] {
        for (path, text) in src(module) {
            let name = path.file_name().unwrap().to_string_lossy();
            if name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            for signature in fn_signatures(without_test_module(&text)) {
                assert!(
                    !result_errors(signature)
                        .iter()
                        .any(|e| e == "String" || e == "std::string::String"),
                    "{} has a fn returning a String error, not a typed one: {signature}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn the_string_error_check_reads_signatures_as_meant() {
    let text = "pub fn a(x: [u8; 32]) -> Result<HashMap<String, String>, E> {\n}\n\
                fn b(&self) -> Result<Vec<(String, u8)>,\n    String,\n>;\n\
                fn c(f: impl Fn() -> u8) -> Result<(), Box<dyn Fn(u8) -> String>> { x }\n\
                #[cfg(test)]\n#[path = \"t.rs\"]\nmod tests;\nfn d() -> Result<(), String> {}";
    let errors: Vec<Vec<String>> = fn_signatures(without_test_module(text))
        .into_iter()
        .map(result_errors)
        .collect();
    assert_eq!(
        errors,
        [
            vec!["E".to_string()],
            vec!["String".to_string()],
            vec!["Box<dyn Fn(u8) -> String>".to_string()],
        ]
    );
}

/// The only per-thread memory (`thread_local!`) ARCHITECTURE.md allows: scratch or a
/// cache that no caller can observe, each named here with what it is.
const THREAD_SCRATCH: [(&str, &str); 4] = [
    ("crypto/ids.rs", "pooled randomness for ids"),
    (
        "choria/protocol/v1.rs",
        "a request's layers while it is encoded, a reply's data while it is read",
    ),
    (
        "choria/rpc.rs",
        "a request's body and payload while it is sent",
    ),
    (
        "choria/protocol/scratch.rs",
        "the test of the kept buffers' helper",
    ),
];

#[test]
fn per_thread_memory_is_only_the_scratch_architecture_md_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found: Vec<String> = rust_files(&root)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains(concat!("thread_local", "!"))
        })
        .map(|p| {
            p.strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    found.sort();
    let mut allowed: Vec<String> = THREAD_SCRATCH.iter().map(|(f, _)| f.to_string()).collect();
    allowed.sort();
    assert_eq!(
        found, allowed,
        "a new thread_local! is global state unless it is scratch: name it in ARCHITECTURE.md and here"
    );
}

/// ARCHITECTURE.md: the crate denies `unsafe` except in `src/sys.rs`, which holds at
/// most eight blocks, each with a `SAFETY:` comment (the compiler enforces the denial;
/// this checks nobody lifted it elsewhere).
#[test]
fn unsafe_code_lives_in_sys_alone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    assert!(lib.contains("#![deny(unsafe_code)]"));
    for path in rust_files(&root) {
        let text = std::fs::read_to_string(&path).unwrap();
        let lifted = text.contains("allow(unsafe_code)");
        assert_eq!(
            lifted,
            path.ends_with("sys.rs"),
            "{}: only src/sys.rs may allow unsafe code",
            path.display()
        );
    }
    let sys = std::fs::read_to_string(root.join("sys.rs")).unwrap();
    let code = without_test_module(&sys);
    let blocks = code.matches("unsafe {").count();
    assert!(blocks <= 8, "src/sys.rs has {blocks} unsafe blocks");
    assert!(code.matches("// SAFETY:").count() >= blocks);
}

/// ARCHITECTURE.md, "The library's face": the daemon's binary calls one item of the
/// library, and the simulator and the fuzz targets' entry points are compiled only
/// with their features, never into the packaged daemon.
#[test]
fn the_daemon_calls_one_item_and_the_test_parts_need_their_features() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let main = std::fs::read_to_string(root.join("main.rs")).unwrap();
    let called: Vec<&str> = main
        .match_indices("choria_provisioner::")
        .map(|(i, _)| main[i..].split('(').next().unwrap_or_default())
        .collect();
    assert_eq!(called, ["choria_provisioner::cli::main"]);
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    for (feature, module) in [("sim", "pub mod sim;"), ("fuzzing", "pub mod fuzzing;")] {
        let at = lib
            .find(module)
            .unwrap_or_else(|| panic!("{module} in lib.rs"));
        // The attributes right above the module: a gate, a hidden doc, a path.
        let attributes: Vec<&str> = lib[..at]
            .lines()
            .rev()
            .take_while(|l| l.trim_start().starts_with("#["))
            .collect();
        assert!(
            attributes.contains(&format!("#[cfg(feature = \"{feature}\")]").as_str()),
            "{module} is not gated by the {feature} feature: {attributes:?}"
        );
    }
    // The node's half of the wire: every `node_side` module is compiled only for the
    // unit tests and the features that play a node, never by default.
    let gate = "#[cfg(any(test, feature = \"node-side\"))]";
    let mut declared = 0;
    for (path, text) in src("") {
        for (at, _) in text.match_indices("mod node_side;") {
            declared += 1;
            let line_start = text[..at].rfind('\n').unwrap_or(0);
            let above = text[..line_start]
                .lines()
                .next_back()
                .unwrap_or_default()
                .trim();
            assert_eq!(above, gate, "{}: node_side is not gated", path.display());
        }
    }
    assert_eq!(declared, 5, "protocol, v1, v2, mcorpc and key_transport");
    let manifest = std::fs::read_to_string(root.join("../Cargo.toml")).unwrap();
    assert!(manifest.contains("default = []\n"), "no default feature");
    for feature in ["sim", "fuzzing"] {
        let line = manifest
            .lines()
            .find(|l| l.starts_with(&format!("{feature} = [")))
            .unwrap_or_else(|| panic!("feature {feature}"));
        assert!(
            line.contains("\"node-side\""),
            "{feature} plays a node: {line}"
        );
    }
}

/// A file a reader can hold: none in `src/` is over 800 lines (split where the
/// seams are, the module doc moving with its code).
#[test]
fn no_file_in_src_is_over_800_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long: Vec<String> = rust_files(&src)
        .into_iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            (lines > 800).then(|| format!("{}: {lines} lines", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these: {long:?}");
}
