#!/usr/bin/env bash
# Regenerates patches/nats/choria.patch: the difference between nats 0.26.0 as
# crates.io ships it and our copy in patches/nats/src, so a reviewer reads the patch,
# not the copy. With --check, fails when the committed patch is not that difference.
#   scripts/regen-nats-patch.sh [--check]
# Needs the crate from the registry (cargo fetches it into its cache).
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.26.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/nats-$version.crate 2>/dev/null | head -n 1 || true)
if [ -z "$crate" ]; then
    # A throw-away project that depends on the unpatched crate, to have cargo fetch it.
    mkdir -p "$work/fetch/src"
    printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nnats = "=%s"\n' \
        "$version" > "$work/fetch/Cargo.toml"
    : > "$work/fetch/src/lib.rs"
    cargo fetch --manifest-path "$work/fetch/Cargo.toml" >/dev/null
    crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/nats-$version.crate | head -n 1)
fi
tar -xzf "$crate" -C "$work"
repo=$work/nats-$version
git -C "$repo" init -q
git -C "$repo" add src Cargo.toml
git -C "$repo" -c user.name=regen -c user.email=regen@localhost commit -q -m upstream
rm -rf "$repo/src"
cp -r patches/nats/src "$repo/src"
cp patches/nats/Cargo.toml "$repo/Cargo.toml"
git -C "$repo" add -A src Cargo.toml
# Whole modules we removed are listed, not shown line by line.
{
    echo "Modules of nats $version removed from this copy (unused by the daemon):"
    git -C "$repo" diff --cached --name-only --diff-filter=D | sed 's/^/  /'
    echo
    git -C "$repo" diff --cached --diff-filter=d
} > "$work/choria.patch"
if [ "${1:-}" = "--check" ]; then
    if diff -q <(grep -v '^index ' "$work/choria.patch") <(grep -v '^index ' patches/nats/choria.patch) >/dev/null; then
        echo "patches/nats/choria.patch is current"
    else
        echo "patches/nats/choria.patch differs from patches/nats/src: run scripts/regen-nats-patch.sh" >&2
        exit 1
    fi
else
    cp "$work/choria.patch" patches/nats/choria.patch
    echo "wrote patches/nats/choria.patch ($(grep -c '^+[^+]' patches/nats/choria.patch) lines added)"
fi
