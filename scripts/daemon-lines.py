#!/usr/bin/env python3
"""Counts the daemon's lines: what `cargo build --release` compiles from `src/`.

Left out: the simulator (`src/sim`, `src/bin`), unit tests (files declared by a
`#[cfg(test)] mod`, `tests` folders, `tests.rs` and `*_tests.rs`, and the trailing
`#[cfg(test)] mod … {` block of a file), and the node's half of the wire (files
declared by a `mod` gated on the `node-side` feature). Prints the total lines and the
code lines (neither blank nor a `//` comment), then the largest files:

    scripts/daemon-lines.py [N]
"""

import os
import re
import sys

ROOT = "src"
GATED = re.compile(
    r'#\[cfg\((test|any\(test, feature = "node-side"\))\)\]\s*'
    r'(?:#\[path = "([^"]+)"\]\s*)?(?:pub(?:\([a-z]+\))? )?mod (\w+);'
)


def left_out():
    """Files whose `mod` declaration is gated on tests or on the node side."""
    files = set()
    for folder, _, names in os.walk(ROOT):
        for name in names:
            if not name.endswith(".rs"):
                continue
            text = open(os.path.join(folder, name), encoding="utf-8").read()
            own = folder if name in ("mod.rs", "lib.rs", "main.rs") else os.path.join(folder, name[:-3])
            for m in GATED.finditer(text):
                if m.group(2):
                    files.add(os.path.normpath(os.path.join(folder, m.group(2))))
                files.add(os.path.normpath(os.path.join(own, m.group(3) + ".rs")))
                files.add(os.path.normpath(os.path.join(own, m.group(3), "mod.rs")))
    return files


def counted(path):
    """The file's lines up to a trailing `#[cfg(test)]` module block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines[:-1]):
        if line == "#[cfg(test)]" and re.match(r"mod \w+ \{$", lines[i + 1]):
            return lines[:i]
    return lines


def main():
    most = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    skip = left_out()
    per_file = {}
    for folder, _, names in os.walk(ROOT):
        if folder.startswith(("src/sim", "src/bin")) or "/tests" in folder:
            continue
        for name in names:
            path = os.path.normpath(os.path.join(folder, name))
            if not name.endswith(".rs") or path in skip:
                continue
            if name in ("tests.rs", "fuzzing.rs") or name.endswith("_tests.rs"):
                continue
            lines = counted(path)
            code = sum(1 for l in lines if l.strip() and not l.strip().startswith("//"))
            per_file[path] = (len(lines), code)
    total = sum(a for a, _ in per_file.values())
    code = sum(c for _, c in per_file.values())
    print(f"daemon: {total} lines, {code} of code, in {len(per_file)} files")
    for path, (a, c) in sorted(per_file.items(), key=lambda x: -x[1][0])[:most]:
        print(f"{a:6} {c:6}  {path}")


if __name__ == "__main__":
    main()
