//! The documentation a user gets holds together: every link between the pages
//! resolves, every `docs/PAGE.md, "Section"` pointer in the code and packaging names
//! a section that exists, and nothing points outside the repository.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file below `dir` (relative to the repository), recursively.
fn files(dir: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root().join(dir)];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The user's pages: the README and `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut out = files("docs");
    out.push(root().join("README.md"));
    out.push(root().join("ARCHITECTURE.md"));
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn every_link_between_the_pages_resolves() {
    let link = regex::Regex::new(r"\]\(([^)#\s]+)(#[^)]*)?\)").unwrap();
    for page in pages() {
        let text = read(&page);
        for m in link.captures_iter(&text) {
            let target = &m[1];
            if target.starts_with("http") {
                continue;
            }
            let resolved = page.parent().unwrap().join(target);
            assert!(
                resolved.exists(),
                "{} links to {target}, which does not exist",
                page.display()
            );
        }
    }
}

#[test]
fn every_pointer_to_a_section_names_one_that_exists() {
    let pointer = regex::Regex::new(r#"docs/([a-z]+\.md)`?,\s*"([^"]+)""#).unwrap();
    let mut checked = 0;
    for dir in ["src", "packaging", "tests", "docs", "scripts"] {
        for file in files(dir) {
            let text = read(&file).replace("\n//! ", " ").replace("\n# ", " ");
            for m in pointer.captures_iter(&text) {
                let page = read(&root().join("docs").join(&m[1]));
                let section = &m[2];
                assert!(
                    page.lines()
                        .any(|l| l.starts_with('#') && l.contains(section)),
                    "{} points to docs/{}, \"{section}\", which has no such section",
                    file.display(),
                    &m[1]
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "the pointers were found");
}

#[test]
fn nothing_points_outside_the_repository() {
    let mut places = pages();
    for dir in ["src", "packaging", "docs"] {
        places.extend(files(dir));
    }
    for file in places {
        let text = read(&file);
        for outside in ["spec/", "shared/", "DESIGN.md"] {
            assert!(
                !text.contains(outside),
                "{} names {outside}, which users of the repository do not have",
                file.display()
            );
        }
    }
}

#[test]
fn the_readme_is_short_and_the_documentation_pages_exist() {
    let readme = read(&root().join("README.md"));
    assert!(
        readme.lines().count() <= 300,
        "README.md has {} lines",
        readme.lines().count()
    );
    for page in [
        "configuration",
        "helper",
        "operations",
        "security",
        "performance",
    ] {
        let path = root().join("docs").join(format!("{page}.md"));
        assert!(path.exists(), "{} is missing", path.display());
        assert!(
            readme.contains(&format!("docs/{page}.md")),
            "the README links to docs/{page}.md"
        );
    }
}

#[test]
fn every_helper_field_is_described_in_the_helper_contract() {
    let page = read(&root().join("docs/helper.md"));
    for field in [
        "identity",
        "inventory",
        "jwt",
        "ed25519_pubkey",
        "csr",
        "defer",
        "shutdown",
        "msg",
        "configuration",
        "certificate",
        "ca",
        "key",
        "ssldir",
        "server_claims",
        "action_policies",
        "opa_policies",
        "upgrade",
    ] {
        assert!(
            page.contains(&format!("| `{field}` |")),
            "docs/helper.md has no row for `{field}`"
        );
    }
}
