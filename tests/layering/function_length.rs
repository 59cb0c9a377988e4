//! ARCHITECTURE.md: no production function in `src/node`, `src/choria/protocol` or
//! `src/fleet` is longer than 80 lines, so that a reader can hold each one. Checked
//! on the source: comments, strings and character literals are blanked, braces are
//! counted from each `fn`, and what only tests compile (`#[cfg(test)]` items, and
//! files their parent declares under `#[cfg(test)]`) is left out.

use std::path::Path;

use super::rust_files;

/// The folders the rule covers, under `src/`.
const FOLDERS: [&str; 3] = ["node", "choria/protocol", "fleet"];

/// The most lines a production function may take, its signature and braces included.
const MAX_LINES: usize = 80;

/// `text` with every comment, string and character literal replaced by spaces (line
/// breaks kept), so that what is left is code whose braces can be counted.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && !ident_before && matches!(next, Some('"') | Some('#')) {
            // A raw string: r"…", r#"…"#, with any number of hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(_) => j += 1,
                }
            }
            out.extend(chars[i..j.min(chars.len())].iter().map(|&c| blank(c)));
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{1F600}'); a lifetime is left alone.
            let mut j = i + 1;
            if chars.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            out.extend(chars[i..=j.min(chars.len() - 1)].iter().map(|&c| blank(c)));
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The line after `from` at which the item starting there ends: its braces closed,
/// or a `;` before any brace (a declaration).
fn item_end(lines: &[&str], from: usize) -> usize {
    let mut depth = 0usize;
    let mut opened = false;
    for (n, line) in lines.iter().enumerate().skip(from) {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth = depth.saturating_sub(1),
                ';' if !opened => return n,
                _ => {}
            }
            if opened && depth == 0 {
                return n;
            }
        }
    }
    lines.len().saturating_sub(1)
}

/// Line ranges (first, last) of the items under `#[cfg(test)]` in `lines`.
fn test_items(lines: &[&str]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            let mut start = n + 1;
            while lines
                .get(start)
                .is_some_and(|l| l.trim_start().starts_with("#["))
            {
                start += 1;
            }
            out.push((n, item_end(lines, start)));
        }
    }
    out
}

/// Whether the file at `path` is compiled for tests alone: its parent module
/// declares it under `#[cfg(test)]` (or a folder it is in is declared so).
fn test_only(path: &Path, src: &Path) -> bool {
    let mut module = path.with_extension("");
    if module.file_name().is_some_and(|n| n == "mod") {
        module.pop();
    }
    while let (Some(parent), Some(stem)) = (module.parent(), module.file_name()) {
        if parent == src || !parent.starts_with(src) {
            return false;
        }
        let stem = stem.to_string_lossy().to_string();
        let declaring = [parent.join("mod.rs"), parent.with_extension("rs")]
            .into_iter()
            .find(|p| p.exists());
        if let Some(text) = declaring.map(|p| std::fs::read_to_string(p).unwrap()) {
            let lines: Vec<&str> = text.lines().collect();
            let declared_for_tests = lines.iter().enumerate().any(|(n, l)| {
                l.trim() == format!("mod {stem};")
                    && lines[..n]
                        .iter()
                        .rev()
                        .take_while(|l| l.trim_start().starts_with("#["))
                        .any(|l| l.trim() == "#[cfg(test)]")
            });
            if declared_for_tests {
                return true;
            }
        }
        module = parent.to_path_buf();
    }
    false
}

/// Each production function of `text` longer than [`MAX_LINES`]: (name, first line,
/// lines).
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let tests = test_items(&lines);
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if tests.iter().any(|&(a, b)| (a..=b).contains(&n)) {
            continue;
        }
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let Some(name) = words.get(at + 1) else {
            continue;
        };
        // `fn(` in a type has no name after it on the line: not an item.
        if !line.contains(&format!("fn {name}")) {
            continue;
        }
        let length = item_end(&lines, n) - n + 1;
        if length > MAX_LINES {
            out.push((name.to_string(), n + 1, length));
        }
    }
    out
}

#[test]
fn no_production_function_in_the_three_folders_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    for folder in FOLDERS {
        for path in rust_files(&src.join(folder)) {
            if test_only(&path, &src) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (name, line, length) in long_functions(&text) {
                long.push(format!(
                    "{}:{line} fn {name}: {length} lines",
                    path.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these, or name a flat table in ARCHITECTURE.md and here: {long:#?}"
    );
}

#[test]
fn the_length_check_counts_what_it_means_to() {
    let body: String = (0..79)
        .map(|n| format!("    let x{n} = \"}}\";\n"))
        .collect();
    let long = format!("fn long() {{\n{body}    // }} in a comment\n}}\n");
    let found = long_functions(&long);
    assert_eq!(
        found,
        [("long".to_string(), 1, 82)],
        "braces in strings and comments are not counted"
    );
    let short = "fn short(f: fn(u8) -> u8) -> char {\n    let _ = r#\"}\"#;\n    '}'\n}\n";
    assert!(long_functions(short).is_empty());
    let in_tests = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n");
    assert!(
        long_functions(&in_tests).is_empty(),
        "test code is left out"
    );
    let lifetimes = "fn f<'a>(x: &'a str) -> &'a str {\n    x\n}\n";
    assert!(long_functions(lifetimes).is_empty());
    assert_eq!(item_end(&lifetimes.lines().collect::<Vec<_>>(), 0), 2);
}
