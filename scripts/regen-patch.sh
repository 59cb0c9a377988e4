#!/usr/bin/env bash
# Regenerates patches/<crate>/choria.patch: the difference between the crate as
# crates.io ships it and our copy in patches/<crate>/src, so a reviewer reads the
# patch, not the copy. With --check, fails when the committed patch is not that
# difference. Without a crate, every patched crate in turn.
#   scripts/regen-patch.sh [nats|tiny_http] [--check]
# Needs the crate from the registry (cargo fetches it into its cache).
set -euo pipefail
cd "$(dirname "$0")/.."

# The crates we carry, and the upstream release each copy is based on.
declare -A versions=([nats]=0.26.0 [tiny_http]=0.12.0)

regen() {
    local name=$1 mode=${2:-} version=${versions[$1]}
    local work crate repo
    work=$(mktemp -d)
    # shellcheck disable=SC2064 # expand now: each call has its own directory
    trap "rm -rf '$work'" RETURN
    crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name-$version.crate" 2>/dev/null | head -n 1 || true)
    if [ -z "$crate" ]; then
        # A throw-away project that depends on the unpatched crate, to have cargo fetch it.
        mkdir -p "$work/fetch/src"
        printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n%s = "=%s"\n' \
            "$name" "$version" > "$work/fetch/Cargo.toml"
        : > "$work/fetch/src/lib.rs"
        cargo fetch --manifest-path "$work/fetch/Cargo.toml" >/dev/null
        crate=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name-$version.crate" | head -n 1)
    fi
    tar -xzf "$crate" -C "$work"
    repo=$work/$name-$version
    git -C "$repo" init -q
    git -C "$repo" add src Cargo.toml
    git -C "$repo" -c user.name=regen -c user.email=regen@localhost commit -q -m upstream
    rm -rf "$repo/src"
    cp -r "patches/$name/src" "$repo/src"
    cp "patches/$name/Cargo.toml" "$repo/Cargo.toml"
    git -C "$repo" add -A src Cargo.toml
    # Whole modules we removed are listed, not shown line by line.
    {
        echo "Modules of $name $version removed from this copy (unused by the daemon):"
        git -C "$repo" diff --cached --name-only --diff-filter=D | sed 's/^/  /'
        echo
        git -C "$repo" diff --cached --diff-filter=d
    } > "$work/choria.patch"
    if [ "$mode" = "--check" ]; then
        if diff -q <(grep -v '^index ' "$work/choria.patch") <(grep -v '^index ' "patches/$name/choria.patch") >/dev/null; then
            echo "patches/$name/choria.patch is current"
        else
            echo "patches/$name/choria.patch differs from patches/$name/src: run scripts/regen-patch.sh $name" >&2
            return 1
        fi
    else
        cp "$work/choria.patch" "patches/$name/choria.patch"
        echo "wrote patches/$name/choria.patch ($(grep -c '^+[^+]' "patches/$name/choria.patch") lines added)"
    fi
}

case "${1:-}" in
    nats|tiny_http) regen "$1" "${2:-}" ;;
    --check|"") for name in nats tiny_http; do regen "$name" "${1:-}"; done ;;
    *) echo "usage: scripts/regen-patch.sh [nats|tiny_http] [--check]" >&2; exit 2 ;;
esac
