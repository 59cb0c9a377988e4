#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ one after the other and prints, per target,
# the seconds run, libFuzzer's executions, the corpus size and the crash files.
#
#   fuzz/run.sh campaign   `make fuzz`: FUZZ_SECONDS_NET (600) for the network-facing
#                          targets, FUZZ_SECONDS (120) for the others; release build
#                          with AddressSanitizer; corpus kept in fuzz/corpus/<target>;
#                          installs cargo-fuzz into target/tools when it is missing.
#   fuzz/run.sh smoke      `make test`: 1 to 3 s per target so that build and runs fit
#                          in FUZZ_SMOKE_BUDGET (110 s; FUZZ_SMOKE_SECONDS forces a
#                          value), unoptimised build without sanitizer (quick to
#                          build), throw-away corpus; skipped with one line when
#                          nightly Rust or cargo-fuzz is missing.
#
# FUZZ_TARGETS="csr pem_decrypt" limits the run to those targets; FUZZ_NICE (15) is
# the nice level. The target lists come from fuzz/entries.rs (NETWORK_TARGETS,
# OTHER_TARGETS). A summary is also written to target/fuzz-<mode>.tsv. Exits 1 when
# any target found a crash (kept in fuzz/artifacts/<target>/).
set -uo pipefail
cd "$(dirname "$0")"
root="$(cd .. && pwd)"
mode="${1:-campaign}"
tools="$root/target/tools"
mkdir -p "$root/target"
nice_level="${FUZZ_NICE:-15}"

targets_of() {
  sed -n "/pub const $1: &\[&str\] = &\[/,/\];/p" "$root/fuzz/entries.rs" | grep -o '"[a-z0-9_]*"' | tr -d '"'
}
network="$(targets_of NETWORK_TARGETS)"
others="$(targets_of OTHER_TARGETS)"

cargo_fuzz() {
  if command -v cargo-fuzz >/dev/null 2>&1; then return 0; fi
  if [ -x "$tools/bin/cargo-fuzz" ]; then export PATH="$tools/bin:$PATH"; return 0; fi
  return 1
}

if ! cargo +nightly --version >/dev/null 2>&1; then
  if [ "$mode" = smoke ]; then
    echo "fuzz smoke: SKIPPED, no nightly toolchain (rustup toolchain install nightly); the seeds and regressions were replayed on stable by tests/fuzz_smoke.rs"
    exit 0
  fi
  echo "fuzz: cargo-fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
if ! cargo_fuzz; then
  if [ "$mode" = smoke ]; then
    echo "fuzz smoke: SKIPPED, cargo-fuzz is not installed (make fuzz installs it); the seeds and regressions were replayed on stable by tests/fuzz_smoke.rs"
    exit 0
  fi
  echo "fuzz: installing cargo-fuzz into $tools" >&2
  cargo install cargo-fuzz --locked --root "$tools" >&2 || exit 1
  export PATH="$tools/bin:$PATH"
fi

triple="$(rustc +nightly -vV | sed -n 's/^host: //p')"
case "$mode" in
  campaign)
    build_flags=(-O -a)
    bin_dir="$PWD/target/$triple/release"
    corpus_root="$PWD/corpus"
    ;;
  smoke)
    build_flags=(--dev -s none --target-dir "$root/target/fuzz-smoke")
    bin_dir="$root/target/fuzz-smoke/$triple/debug"
    corpus_root="$root/target/fuzz-smoke/corpus"
    rm -rf "$corpus_root"
    export CARGO_PROFILE_DEV_DEBUG=0
    ;;
  *)
    echo "usage: fuzz/run.sh campaign|smoke" >&2
    exit 2
    ;;
esac

selected="${FUZZ_TARGETS:-$network $others}"
count=$(wc -w <<<"$selected")
start=$(date +%s)
echo "fuzz $mode: building $count targets"
if ! nice -n "$nice_level" cargo +nightly fuzz build "${build_flags[@]}" >"$root/target/fuzz-build.log" 2>&1; then
  tail -n 30 "$root/target/fuzz-build.log" >&2
  echo "fuzz $mode: build failed (full log: target/fuzz-build.log)" >&2
  exit 1
fi
built=$(( $(date +%s) - start ))
echo "fuzz $mode: built in $built s"

# The smoke run shares FUZZ_SMOKE_BUDGET seconds (110) with the build: 1 to 3 s per
# target, whatever the build left (about 1 s of each run is start-up).
smoke_seconds=$(( (${FUZZ_SMOKE_BUDGET:-110} - built) / count - 1 ))
[ "$smoke_seconds" -lt 1 ] && smoke_seconds=1
[ "$smoke_seconds" -gt 3 ] && smoke_seconds=3
seconds_for() {
  if [ "$mode" = smoke ]; then echo "${FUZZ_SMOKE_SECONDS:-$smoke_seconds}"
  elif grep -qx "$1" <<<"$network"; then echo "${FUZZ_SECONDS_NET:-600}"
  else echo "${FUZZ_SECONDS:-120}"; fi
}

report="$root/target/fuzz-$mode.tsv"
printf 'target\tseconds\texecutions\tcorpus\tcrashes\n' >"$report"
printf '%-18s %8s %14s %8s %8s\n' target seconds executions corpus crashes
failed=0
for t in $selected; do
  secs=$(seconds_for "$t")
  corpus="$corpus_root/$t"
  artifacts="$PWD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  inputs=("$corpus" "seeds/$t")
  [ -d "regressions/$t" ] && inputs+=("regressions/$t")
  before=$(find "$artifacts" -type f | wc -l)
  log="$root/target/fuzz-$mode-$t.log"
  t0=$(date +%s)
  nice -n "$nice_level" "$bin_dir/$t" -artifact_prefix="$artifacts/" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "${inputs[@]}" >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - t0 ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  size=$(find "$corpus" -type f | wc -l)
  crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes="?"; fi
  printf '%-18s %8s %14s %8s %8s\n' "$t" "$elapsed" "${execs:-?}" "$size" "$crashes"
  printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$elapsed" "${execs:-?}" "$size" "$crashes" >>"$report"
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "  $t failed (exit $rc): log target/fuzz-$mode-$t.log, inputs in fuzz/artifacts/$t/" >&2
    grep -m 5 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" | sed 's/^/  /' >&2
  fi
done
echo "fuzz $mode: $(( $(date +%s) - start )) s in all; summary in target/fuzz-$mode.tsv"
exit "$failed"
