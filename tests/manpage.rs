//! The man page `choria-provisioner(8)` has one source per part, so it cannot drift
//! from the command line: SYNOPSIS, OPTIONS and COMMANDS are generated here from
//! the binary's own `--help`, `run --help` and `check --help` (argh, from the doc
//! comments in `src/cli/args.rs`); everything else is hand-written in
//! `packaging/choria-provisioner.8.in`. The committed `packaging/choria-provisioner.8`
//! must equal what this generates; `make man` (`UPDATE_MAN=1`) rewrites it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::on_path;

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");
const PROGRAM: &str = "choria-provisioner";
const TEMPLATE: &str = "packaging/choria-provisioner.8.in";
const PAGE: &str = "packaging/choria-provisioner.8";

fn path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// One `--help` output, as argh lays it out.
#[derive(Debug, Default, PartialEq)]
struct Help {
    /// The line after `Usage: `.
    usage: String,
    /// The description's paragraphs, each joined into one line.
    description: Vec<String>,
    /// `Options:` entries: the name column and the text.
    options: Vec<(String, String)>,
    /// `Commands:` entries.
    commands: Vec<(String, String)>,
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    let mut paragraph: Vec<&str> = Vec::new();
    let flush = |paragraph: &mut Vec<&str>, help: &mut Help| {
        if !paragraph.is_empty() {
            help.description.push(paragraph.join(" "));
            paragraph.clear();
        }
    };
    for line in text.lines() {
        if let Some(usage) = line.strip_prefix("Usage: ") {
            help.usage = usage.trim().to_string();
            section = "description";
        } else if line == "Options:" || line == "Commands:" {
            flush(&mut paragraph, &mut help);
            section = line;
        } else if line.trim().is_empty() {
            if section == "description" {
                flush(&mut paragraph, &mut help);
            }
        } else if section == "description" {
            paragraph.push(line.trim());
        } else {
            let entries = if section == "Options:" {
                &mut help.options
            } else {
                assert_eq!(section, "Commands:", "unexpected help line {line:?}");
                &mut help.commands
            };
            let starts_entry = line.starts_with("  ") && !line.starts_with("   ");
            if starts_entry {
                let body = &line[2..];
                let (name, text) = match body.find("  ") {
                    Some(at) => (&body[..at], body[at..].trim()),
                    None => (body, ""),
                };
                entries.push((name.to_string(), text.to_string()));
            } else {
                let last = entries.last_mut().expect("a continuation follows an entry");
                if !last.1.is_empty() {
                    last.1.push(' ');
                }
                last.1.push_str(line.trim());
            }
        }
    }
    flush(&mut paragraph, &mut help);
    help
}

fn help(args: &[&str]) -> Help {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run the binary");
    assert!(out.status.success(), "{args:?} exited {}", out.status);
    let text = String::from_utf8(out.stdout).expect("help is UTF-8");
    let help = parse_help(&text);
    assert!(!help.usage.is_empty(), "no usage line in {text}");
    help
}

/// Escapes plain text for roff: backslashes, dashes of flags, and a leading `.` or
/// `'`; `` `x` `` becomes bold.
fn roff_text(text: &str) -> String {
    let mut out = String::new();
    let mut bold = false;
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            '`' => {
                out.push_str(if bold { "\\fR" } else { "\\fB" });
                bold = !bold;
            }
            c => out.push(c),
        }
    }
    assert!(!bold, "unbalanced backticks in {text:?}");
    if out.starts_with('.') || out.starts_with('\'') {
        out.insert_str(0, "\\&");
    }
    out
}

/// `--config` → `config`, the value name the usage line gives each option.
fn value_names(usage: &str) -> Vec<(String, String)> {
    let tokens: Vec<&str> = usage
        .split_whitespace()
        .map(|t| t.trim_matches(['[', ']']))
        .collect();
    tokens
        .windows(2)
        .filter(|w| w[0].starts_with("--") && w[1].starts_with('<'))
        .map(|w| (w[0].to_string(), w[1].trim_matches(['<', '>']).to_string()))
        .collect()
}

/// A `.SY` … `.YS` block from a usage line.
fn synopsis(usage: &str) -> String {
    let names = value_names(usage);
    let mut words = usage.split_whitespace().peekable();
    let mut command = Vec::new();
    while let Some(w) = words.next_if(|w| !w.starts_with('[') && !w.starts_with('-')) {
        command.push(roff_text(w));
    }
    let mut out = format!(".SY \"{}\"\n", command.join(" "));
    while let Some(word) = words.next() {
        let inner = word.trim_matches(['[', ']']);
        if let Some(flag) = inner.strip_prefix("--") {
            let value = names.iter().find(|(f, _)| f == inner).map(|(_, v)| v);
            match value {
                Some(v) => {
                    words.next(); // the <value> token
                    out.push_str(&format!(".OP \\-\\-{} {}\n", roff_text(flag), roff_text(v)));
                }
                None => out.push_str(&format!(".OP \\-\\-{}\n", roff_text(flag))),
            }
        } else {
            let arg = inner.trim_matches(['<', '>']);
            out.push_str(&format!("[\\fI{}\\fR]\n", roff_text(arg)));
        }
    }
    out.push_str(".YS\n");
    out
}

/// `.TP` items for an `Options:` list; `--config` gets its value name.
fn option_items(h: &Help) -> String {
    let names = value_names(&h.usage);
    let mut out = String::new();
    for (name, text) in &h.options {
        let column: Vec<String> = name
            .split(", ")
            .map(|n| {
                let value = names.iter().find(|(f, _)| f == n).map(|(_, v)| v);
                match value {
                    Some(v) => format!("\\fB{}\\fR \\fI{}\\fR", roff_text(n), roff_text(v)),
                    None => format!("\\fB{}\\fR", roff_text(n)),
                }
            })
            .collect();
        out.push_str(&format!(
            ".TP\n{}\n{}\n",
            column.join(", "),
            roff_text(text)
        ));
    }
    out
}

/// The man page: the template with its `@SYNOPSIS@`, `@OPTIONS@` and `@COMMANDS@`
/// lines replaced by sections made from the help of the program and of each command.
fn generate(template: &str, top: &Help, commands: &[(String, Help)]) -> String {
    let mut synopsis_section = String::from(".SH SYNOPSIS\n");
    synopsis_section.push_str(&synopsis(&top.usage));
    for (_, h) in commands {
        synopsis_section.push_str(&synopsis(&h.usage));
    }
    // The program's own description (a title) is NAME's job in a man page.
    let mut options = String::from(".SH OPTIONS\n");
    options.push_str(&option_items(top));
    let mut commands_section = String::from(".SH COMMANDS\n");
    for (name, h) in commands {
        commands_section.push_str(&format!(".SS {}\n", roff_text(name)));
        for paragraph in &h.description {
            commands_section.push_str(&format!(".PP\n{}\n", roff_text(paragraph)));
        }
        commands_section.push_str(&option_items(h));
    }
    let mut out = String::new();
    let mut replaced = 0;
    for line in template.lines() {
        let generated = match line {
            "@SYNOPSIS@" => &synopsis_section,
            "@OPTIONS@" => &options,
            "@COMMANDS@" => &commands_section,
            _ => {
                out.push_str(line);
                out.push('\n');
                continue;
            }
        };
        replaced += 1;
        out.push_str(generated);
    }
    assert_eq!(
        replaced, 3,
        "the template needs @SYNOPSIS@, @OPTIONS@ and @COMMANDS@"
    );
    out
}

/// The help of the program and of each command it lists.
fn all_help() -> (Help, Vec<(String, Help)>) {
    let top = help(&["--help"]);
    let commands = top
        .commands
        .iter()
        .map(|(name, _)| (name.clone(), help(&[name, "--help"])))
        .collect();
    (top, commands)
}

fn generated_page() -> String {
    let (top, commands) = all_help();
    generate(&read(TEMPLATE), &top, &commands)
}

#[test]
fn the_committed_man_page_is_generated_from_the_cli_help() {
    let generated = generated_page();
    if std::env::var_os("UPDATE_MAN").is_some() {
        std::fs::write(path(PAGE), &generated).expect("write the man page");
        println!("wrote {PAGE}");
        return;
    }
    let committed = read(PAGE);
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "{PAGE} differs from what {TEMPLATE} and the CLI's --help make (first at line {}): \
             run `make man` and commit the result",
            first + 1
        );
    }
}

#[test]
fn the_man_page_names_every_option_and_command_of_the_help() {
    let (top, commands) = all_help();
    let page = generate(&read(TEMPLATE), &top, &commands);
    assert!(
        !top.commands.is_empty() && top.options.len() >= 5,
        "{top:?}"
    );
    for (name, h) in
        std::iter::once((&PROGRAM.to_string(), &top)).chain(commands.iter().map(|(n, h)| (n, h)))
    {
        for (option, text) in &h.options {
            for flag in option.split(", ") {
                assert!(page.contains(&roff_text(flag)), "{name}: {flag} missing");
            }
            assert!(page.contains(&roff_text(text)), "{name}: {text:?} missing");
        }
    }
    for (command, _) in &top.commands {
        assert!(
            page.contains(&format!(".SS {command}\n")),
            "{command} missing"
        );
    }
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "COMMANDS",
        "FILES",
    ] {
        assert!(
            page.contains(&format!(".SH {section}\n")),
            "{section} missing"
        );
    }
    assert!(page.contains(".SH \"EXIT STATUS\"\n") || page.contains(".SH EXIT STATUS\n"));
    assert!(page.contains(".SH \"SEE ALSO\"\n") || page.contains(".SH SEE ALSO\n"));
}

#[test]
fn argh_help_is_parsed_with_wrapped_entries() {
    let text = "Usage: p [--a] [--bee <bee>] [<command>] [<args>]\n\nTop text.\nMore.\n\n\
                Options:\n  --a               first\n  --bee             second\n\
                \x20                   wrapped\n  --help, help      display usage\n\n\
                Commands:\n  run               Runs it.\n";
    let h = parse_help(text);
    assert_eq!(
        h,
        Help {
            usage: "p [--a] [--bee <bee>] [<command>] [<args>]".into(),
            description: vec!["Top text. More.".into()],
            options: vec![
                ("--a".into(), "first".into()),
                ("--bee".into(), "second wrapped".into()),
                ("--help, help".into(), "display usage".into()),
            ],
            commands: vec![("run".into(), "Runs it.".into())],
        }
    );
    assert_eq!(
        synopsis(&h.usage),
        ".SY \"p\"\n.OP \\-\\-a\n.OP \\-\\-bee bee\n[\\fIcommand\\fR]\n[\\fIargs\\fR]\n.YS\n"
    );
    assert_eq!(
        option_items(&h),
        ".TP\n\\fB\\-\\-a\\fR\nfirst\n.TP\n\\fB\\-\\-bee\\fR \\fIbee\\fR\nsecond wrapped\n\
         .TP\n\\fB\\-\\-help\\fR, \\fBhelp\\fR\ndisplay usage\n"
    );
    assert_eq!(roff_text(".x `y` a\\b"), "\\&.x \\fBy\\fR a\\eb");
}

#[test]
fn the_man_page_formats_without_warnings() {
    // rpmlint 1.x (EL) runs exactly this and reports any output as manual-page-warning.
    if !on_path("man") {
        println!("SKIP the_man_page_formats_without_warnings: man not installed");
        return;
    }
    let out = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"])
        .arg(path(PAGE))
        .env("LC_ALL", "C.UTF-8")
        .env("MANWIDTH", "80")
        .output()
        .expect("man runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "man --warnings: {}\n{stderr}",
        out.status
    );
    // And as text, it reads: each command and option is there.
    let text = Command::new("man")
        .args(["-l", "-Tascii", "-P", "cat"])
        .arg(path(PAGE))
        .env("LC_ALL", "C")
        .env("MANWIDTH", "80")
        .output()
        .expect("man runs");
    // Overstrike bold (c BS c) and underline (_ BS c) to plain characters.
    let mut plain = String::new();
    for c in String::from_utf8_lossy(&text.stdout).chars() {
        if c == '\u{8}' {
            plain.pop();
        } else {
            plain.push(c);
        }
    }
    let text = plain;
    for needle in ["--choria-config", "check", "/readyz", "EXIT STATUS"] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
}
