#!/usr/bin/env bash
# make bench: the demo rig scripted for a large fleet (default 10,000 nodes) with a
# trivial compiled helper. Prints nodes/minute, per-node time from the first RPC to
# the restart (p50/p99), provisioner and simulator CPU per node (from /proc, the
# helper excluded), peak RSS of both, every discovery window, idle CPU, and the RSS of
# 50,000 queued nodes while paused. The provisioner runs with the `Environment=`
# lines of packaging/choria-provisioner.service (glibc malloc settings), as installed.
#
#   NODES=100000 make bench          fleet size (default 10,000)
#   WORKERS=8                        provisioner workers (helpers at once; a worker never
#                                    waits on a node, and on two cores 64 of them ran the
#                                    trivial helper no faster, at a fifth more CPU)
#   MAX_WAITING=N                    max_waiting_attempts (default: the daemon's, 5,000)
#   FEATURES=ed25519                 the jwt + gen25519 + signed server JWT sequence
#   PROFILE=callgrind                the provisioner under valgrind's callgrind: prints
#                                    instructions per node and the top functions
#                                    (wall-clock figures are then meaningless)
#   PROFILE=callgrind-sim            the same for choria-fleet-sim
#   PROFILE=dhat-sim                 choria-fleet-sim under valgrind's dhat: its heap
#                                    at its peak per node, and where it was allocated
#   PROFILE=strace                   the provisioner's system calls per node, by name
#                                    (its helpers' own calls left out)
#   PROFILE=perf                     the provisioner under `perf record` with DWARF call
#                                    graphs (user and kernel time by function; the
#                                    helpers are in it too: tell them apart by pid)
#   PROFILE=sleeps                   where the provisioner's threads go to sleep: every
#                                    context switch away from them (perf's
#                                    sched:sched_switch, root) per node, by thread and
#                                    by the call site that slept
#   PROFILE=allocs                   the provisioner's malloc/realloc/calloc/free calls
#                                    per node, counted by uprobes on libc (root)
#   PROFILE=dhat                     the provisioner under valgrind's dhat: heap blocks
#                                    and bytes allocated per node, and where (the
#                                    start amortised over the run; needs valgrind)
#   PROFILE=heaptrack                the provisioner under heaptrack (near full speed):
#                                    its peak heap and what held it at that moment, for
#                                    the RSS target (the rest of RSS is malloc's own)
#   BUILD=0                          use the binaries built last time
#   INSTANCES=2                      N provisioners with active_active: true on this
#                                    machine: CPU and RSS summed over them, each one's
#                                    share of the fleet and the nodes two of them touched
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/rig.sh
. scripts/rig.sh
NODES="${NODES:-10000}"
WORKERS="${WORKERS:-8}"
INSTANCES="${INSTANCES:-1}"
case "$INSTANCES" in ''|*[!0-9]*|0) echo "INSTANCES must be a positive number" >&2; exit 1;; esac
FEATURES="${FEATURES:-}"
PROFILE="${PROFILE:-}"
if [ -n "$PROFILE" ] && [ "$INSTANCES" != 1 ]; then
  echo "bench: PROFILE profiles one provisioner: run it with INSTANCES=1" >&2
  exit 2
fi
out="$PWD/target/bench"
rm -rf "$out" && mkdir -p "$out"
case "$PROFILE" in
  "") cargo_profile=release ;;
  callgrind | callgrind-sim | strace | perf | sleeps | allocs | dhat | dhat-sim | heaptrack) cargo_profile=profiling ;; # release with symbols (Cargo.toml)
  *) echo "bench: PROFILE must be callgrind, callgrind-sim, strace, perf, sleeps, allocs, dhat, dhat-sim or heaptrack" >&2; exit 2 ;;
esac
if [ "${BUILD:-1}" != 0 ]; then
  cargo build --profile "$cargo_profile" --features sim --bins --example queue_rss >"$out/build.log" 2>&1
  # The helper without libc (examples/bench_helper.rs): no dynamic loader, no
  # glibc or Rust start-up in every run, 0.07 ms of CPU where the static std build
  # took 0.66 (`perf stat -r 500`), so more of the machine is left to what is
  # measured (the helper is printed apart, never in the provisioner's figure).
  # Where that build fails (not x86-64 or aarch64), the std build statically linked.
  # Cargo's own build of the example is elsewhere (target/<profile>/examples).
  mkdir -p "$PWD/target/$cargo_profile"
  if ! rustc --edition 2021 --cfg nolibc -C opt-level=2 -C panic=abort -C strip=symbols \
    -C relocation-model=static -C target-feature=+crt-static -C link-arg=-nostartfiles \
    -C link-arg=-nostdlib -C link-arg=-static -C link-arg=-Wl,--build-id=none \
    -o "$PWD/target/$cargo_profile/bench_helper" examples/bench_helper.rs >>"$out/build.log" 2>&1; then
    echo "bench: the helper without libc did not build (see $out/build.log): using the std one" >&2
    cargo rustc --profile "$cargo_profile" --features sim --example bench_helper -- -C target-feature=+crt-static >>"$out/build.log" 2>&1
    cp "$PWD/target/$cargo_profile/examples/bench_helper" "$PWD/target/$cargo_profile/bench_helper"
  fi
fi
bin="$PWD/target/$cargo_profile"
nats_server="$(scripts/ensure-nats-server.sh)"
nats_port=$(free_port)
prov_cmd=("$bin/choria-provisioner")
sim_cmd=("$bin/choria-fleet-sim")
callgrind=(valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out")
case "$PROFILE" in
  callgrind) prov_cmd=("${callgrind[@]}" "${prov_cmd[@]}") ;;
  callgrind-sim) sim_cmd=("${callgrind[@]}" "${sim_cmd[@]}") ;;
  dhat-sim) sim_cmd=(valgrind --tool=dhat --dhat-out-file="$out/dhat-sim.out" "${sim_cmd[@]}") ;;
  dhat) prov_cmd=(valgrind --tool=dhat --dhat-out-file="$out/dhat.out" "${prov_cmd[@]}") ;;
  heaptrack) prov_cmd=(heaptrack -o "$out/heaptrack" "${prov_cmd[@]}") ;;
  strace) prov_cmd=(strace -f -qq ${STRACE_SUMMARY:+-c} -o "$out/strace.out" "${prov_cmd[@]}") ;;
  perf) prov_cmd=(perf record -q -F 1999 --call-graph dwarf,32768 -o "$out/perf.data" "${prov_cmd[@]}") ;;
  sleeps) prov_cmd=(perf record -q -e sched:sched_switch --call-graph dwarf,16384 -o "$out/sleeps.data" "${prov_cmd[@]}") ;;
  allocs)
    # The helpers are static binaries: libc.so's probes count the daemon alone.
    libc_so=$(ldd "$bin/choria-provisioner" | awk '/libc\.so/ {print $3}')
    for fn in malloc realloc calloc free; do
      perf probe -l 2>/dev/null | grep -q "probe_libc:$fn " || perf probe -q -x "$libc_so" -a "$fn" >/dev/null
    done
    prov_cmd=(perf stat -x, -o "$out/allocs.csv" -e probe_libc:malloc,probe_libc:realloc,probe_libc:calloc,probe_libc:free "${prov_cmd[@]}") ;;
esac

"$nats_server" -a 127.0.0.1 -p "$nats_port" >"$out/nats-server.log" 2>&1 &
nats=$!
pids+=($nats)
cat >"$out/provisioner.yaml" <<YAML
workers: $WORKERS
${MAX_WAITING:+max_waiting_attempts: $MAX_WAITING}
interval: 1m
loglevel: warn
helper: $bin/bench_helper
choria_insecure: true
site: bench
YAML
sim_extra=()
if [ "$FEATURES" = ed25519 ]; then
  issuer_seed=0707070707070707070707070707070707070707070707070707070707070707
  # Without a jwt_signing_token the issuer signs server JWTs itself; the simulated
  # nodes check them against the issuer after their restart.
  printf '%s' "$issuer_seed" >"$out/signer.seed"
  # The issuer's public key: openssl derives it from the seed wrapped as PKCS#8 DER.
  issuer_public=$(python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex("302e020100300506032b657004220420" + sys.argv[1]))' "$issuer_seed" \
    | openssl pkey -inform DER -pubout -outform DER | python3 -c 'import sys; print(sys.stdin.buffer.read()[-32:].hex())')
  cat >>"$out/provisioner.yaml" <<YAML
features: {ed25519: true}
jwt_verify_cert: $issuer_public
jwt_signing_key: $out/signer.seed
YAML
  sim_extra=(--issuer-seed "$issuer_seed")
fi
if [ "$INSTANCES" -gt 1 ]; then
  echo "active_active: true" >>"$out/provisioner.yaml"
fi
monitor_port=$(free_port)
for i in $(seq 1 "$INSTANCES"); do
  # One file pair per instance: its own identity and log.
  sed "1i logfile: $out/provisioner-$i.log" "$out/provisioner.yaml" >"$out/provisioner-$i.yaml"
  # The first instance's metrics, for the most attempts it had under way at once.
  if [ "$i" = 1 ]; then
    printf 'monitor_host: 127.0.0.1\nmonitor_port: %s\n' "$monitor_port" >>"$out/provisioner-$i.yaml"
  fi
  printf 'identity = provisioner-%s.bench.local\nplugin.choria.middleware_hosts = nats://127.0.0.1:%s\n' "$i" "$nats_port" >"$out/choria-$i.cfg"
done

sleep 0.5
"${sim_cmd[@]}" --nats "nats://127.0.0.1:$nats_port" --nodes "$NODES" --workers 2 --quiet \
  --summary "$out/summary.json" "${sim_extra[@]}" 2>"$out/fleet-sim.log" &
sim=$!
pids+=($sim)
# Every node booted before the provisioner starts: the first discovery finds them all.
case "$PROFILE" in callgrind-sim | dhat-sim) sleep 20 ;; *) sleep 2 ;; esac

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The sum of a value over every provisioner: ticks, or a /proc/<pid>/status field.
sum_ticks() { local t=0 p; for p in "${provs[@]}"; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
sum_stat() { local t=0 p; for p in "${provs[@]}"; do t=$((t + $(awk "{print \$$1}" "/proc/$p/stat"))); done; echo "$t"; }
sum_status() { local k=0 p; for p in "${provs[@]}"; do k=$((k + $(awk "/$1/ {print \$2}" "/proc/$p/status"))); done; echo "$k"; }
hz=$(getconf CLK_TCK)
start_ns=$(date +%s%N)
provs=()
# The daemon runs with the environment its systemd unit gives it (glibc malloc
# settings), as installed.
unit_env=()
while IFS= read -r setting; do unit_env+=("$setting"); done \
  < <(sed -n 's/^Environment=//p' packaging/choria-provisioner.service)
for i in $(seq 1 "$INSTANCES"); do
  env "${unit_env[@]}" "${prov_cmd[@]}" run --config "$out/provisioner-$i.yaml" --choria-config "$out/choria-$i.cfg" 2>"$out/provisioner-$i.stderr" &
  provs+=($!)
  pids+=($!)
done
# A Prometheus-like scrape of the first instance's /metrics every second while the
# fleet boots (its cost is in the provisioner's figures): how many answered 200,
# how many did not, and the slowest, in $out/scrapes.txt.
scraper() {
  local ok=0 failed=0 slowest=0 t0 t1 status
  sleep 1
  while kill -0 "$sim" 2>/dev/null; do
    t0=$(date +%s%N)
    status=$(python3 - "$monitor_port" <<'PY' 2>/dev/null || echo 0
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5) as r:
    r.read()
    print(r.status)
PY
)
    t1=$(date +%s%N)
    if [ "$status" = 200 ]; then ok=$((ok + 1)); else failed=$((failed + 1)); fi
    [ $(( (t1 - t0) / 1000000 )) -gt "$slowest" ] && slowest=$(( (t1 - t0) / 1000000 ))
    echo "$ok $failed $slowest" >"$out/scrapes.txt"
    sleep 1
  done
}
echo "0 0 0" >"$out/scrapes.txt"
scraper &
pids+=($!)
sim_ticks=0; sim_peak_kb=0
while kill -0 "$sim" 2>/dev/null; do
  # The simulator's own cost, read while it runs (it exits when every node is done).
  t=$(ticks "$sim" 2>/dev/null || echo "$sim_ticks"); sim_ticks=${t:-$sim_ticks}
  k=$(awk '/VmHWM/ {print $2}' "/proc/$sim/status" 2>/dev/null || echo "$sim_peak_kb"); sim_peak_kb=${k:-$sim_peak_kb}
  sleep 0.2
done
end_ns=$(date +%s%N)
busy_ticks=$(sum_ticks)
python3 - "$monitor_port" >"$out/waiting_max.txt" <<'PY' || echo "?" >"$out/waiting_max.txt"
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
print(next((l.split()[-1] for l in text.splitlines() if l.startswith("choria_provisioner_waiting_attempts_max")), "?"))
PY
sys_ticks=$(sum_stat 15)
helper_ticks=$(( $(sum_stat 16) + $(sum_stat 17) )) # the helpers they reaped
nats_ticks=$(ticks "$nats")
nats_peak_kb=$(awk '/VmHWM/ {print $2}' "/proc/$nats/status")
peak_kb=$(sum_status VmHWM)
# Context switches of every provisioner thread (each is a sleep and a wake-up, the
# kernel's share of the CPU figure); the helpers are processes of their own.
switches=0
for p in "${provs[@]}"; do
  for t in /proc/"$p"/task/*/status; do
    s=$(awk '/ctxt_switches/ {n += $2} END {print n + 0}' "$t" 2>/dev/null || echo 0)
    switches=$((switches + s))
    # By thread, for where the sleeps are: name, voluntary, involuntary.
    awk -v name="$(cat "${t%/status}/comm" 2>/dev/null)" \
      '/^voluntary_ctxt_switches/ {v = $2} /^nonvoluntary_ctxt_switches/ {n = $2}
       END {print name, v + 0, n + 0}' "$t" 2>/dev/null >>"$out/switches.txt" || true
  done
done
idle_ticks=0
if [ -z "$PROFILE" ]; then
  sleep 10
  idle_ticks=$(( $(sum_ticks) - busy_ticks ))
  "$bin/examples/queue_rss" >"$out/queue_rss.txt"
else
  prov=${provs[0]}
  echo "not measured under callgrind" >"$out/queue_rss.txt"
  # callgrind writes its counts when the process exits; strace waits for its child.
  if [ "$PROFILE" = strace ] || [ "$PROFILE" = perf ] || [ "$PROFILE" = sleeps ] || [ "$PROFILE" = allocs ] || [ "$PROFILE" = heaptrack ]; then
    kill $(cat "/proc/$prov/task/$prov/children") 2>/dev/null || true
  else
    kill "$prov" 2>/dev/null || true
  fi
  wait "$prov" || true
fi

python3 - "$out/summary.json" "$NODES" "$start_ns" "$end_ns" "$busy_ticks" "$idle_ticks" "$hz" "$peak_kb" "$WORKERS" "$out/queue_rss.txt" "$FEATURES" "$sim_ticks" "$sim_peak_kb" "$PROFILE" "$sys_ticks" "$helper_ticks" "$nats_ticks" "$INSTANCES" "$switches" "$nats_peak_kb" "$out/waiting_max.txt" "$out/scrapes.txt" <<'PY'
import collections, json, sys
summary, nodes, start, end, busy, idle, hz, peak_kb, workers, queue, features, sim_ticks, sim_kb, profile, sys_ticks, helper_ticks, nats_ticks, instances, switches, nats_kb, waiting_max, scrapes = sys.argv[1:]
instances = int(instances)
s = json.load(open(summary))
nodes, hz, start = int(nodes), int(hz), int(start)
done = sum(1 for n in s["nodes"] if n["phase"] == "provisioned")
times = sorted(n["provisioning_ms"] for n in s["nodes"] if n["provisioning_ms"] is not None)
pct = lambda p: times[min(len(times) - 1, int(p * len(times)))] if times else 0
# The provisioner's work ends with the last restart request it made; the nodes then
# take the simulator's 2 s to come back, which is not the provisioner's time.
last = s.get("last_restart_unix_ms")
seconds = (last * 1_000_000 - start) / 1e9 if last else (int(end) - start) / 1e9
everything = (int(end) - start) / 1e9
if profile:
    print(f"bench: PROFILE={profile}: times below are under {profile.split('-')[0]}, only the counts count")
print(f"bench: features: {features or 'none'}")
print(f"bench: {done}/{nodes} nodes provisioned by {instances} instance(s) with {workers} workers each in "
      f"{seconds:.1f} s from the provisioners' start to the last restart request = "
      f"{done / max(seconds, 1e-9) * 60:,.0f} nodes/minute (target >= 60,000); every node back up after {everything:.1f} s")
if instances > 1:
    by = collections.Counter(n.get("restarted_by") for n in s["nodes"])
    shares = ", ".join(f"{k}: {v / max(done, 1):.1%}" for k, v in sorted(by.items(), key=str))
    twice = sum(1 for n in s["nodes"] if len(n.get("callers", [])) > 1)
    again = sum(1 for n in s["nodes"] if n["restarts"] > 1)
    print(f"bench: shares {shares}; nodes touched by two instances {twice}, restarted twice {again}")
print(f"bench: first RPC to restart per node: p50 {pct(0.50)} ms, p99 {pct(0.99)} ms (the 2 s reply grace included: it costs latency, not throughput)")
print(f"bench: most attempts under way at once: {open(waiting_max).read().strip()} (max_waiting_attempts 5,000 by default)")
ok, failed, slowest = open(scrapes).read().split()
print(f"bench: /metrics scraped every second meanwhile: {ok} answered, {failed} failed, the slowest in {slowest} ms (a Python client's start included)")
per_node = lambda ticks: int(ticks) * 1000 / hz / max(done, 1)
print(f"bench: provisioner CPU {per_node(busy):.3f} ms per node, helper excluded (target <= 0.30): "
      f"{per_node(int(busy) - int(sys_ticks)):.3f} user + {per_node(sys_ticks):.3f} system")
if not profile:
    print(f"bench: provisioner context switches {int(switches) / max(done, 1):.1f} per node (its threads' sleeps and wake-ups)")
print(f"bench: the rest of the machine's work per node: helpers {per_node(helper_ticks):.3f} ms CPU, nats-server {per_node(nats_ticks):.3f} ms CPU (peak RSS {int(nats_kb) / 1024:.1f} MB)")
print(f"bench: provisioner peak RSS {int(peak_kb) / 1024:.1f} MB (target <= 64 MB)" + (" (sum over instances)" if instances > 1 else ""))
print(f"bench: choria-fleet-sim CPU {int(sim_ticks) * 1000 / hz / max(done, 1):.3f} ms per node (at least), peak RSS {int(sim_kb) / 1024:.1f} MB")
if not profile and int(sim_ticks) > 0:
    # The machine's speed moves both by the same factor: compare runs by this.
    print(f"bench: provisioner CPU / simulator CPU = {int(busy) / int(sim_ticks):.2f} "
          "(comparable across the machine's fast and slow stretches; the CPU figures are not)")
for i, d in enumerate(s.get("discoveries", []), 1):
    print(f"bench: discovery {i}: at +{(d['at_unix_ms'] * 1_000_000 - start) / 1e9:.2f} s, "
          f"{d['replies']:,} nodes answered within {d['answered_ms'] / 1000:.2f} s")
if not profile:
    print(f"bench: idle CPU {int(idle) / hz / 10 * 100:.2f} % of a core over 10 s (target < 1 %)")
    print("bench: " + open(queue).read().strip() + " (target <= 64 MB)")
PY
if [ "$PROFILE" = strace ]; then
  python3 - "$out/strace.out" "$out/summary.json" <<'PY'
import collections, json, re, sys
done = max(1, sum(1 for n in json.load(open(sys.argv[2]))["nodes"] if n["phase"] == "provisioned"))
call = re.compile(r"^(\d+)\s+(?:<\.\.\. )?([a-z0-9_]+)")
lines = [m.groups() + (l,) for l in open(sys.argv[1], errors="replace") if (m := call.match(l))]
# A helper is every process that called execve after the provisioner's own start:
# all it does, before its exec (in posix_spawn's child) and after, is not the
# provisioner's (its CPU time is not in the provisioner's figure either).
first = lines[0][0] if lines else None
helpers = {pid for pid, name, _ in lines if name == "execve" and pid != first}
counts = collections.Counter(name for pid, name, l in lines if pid not in helpers and "resumed>" not in l)
total = sum(counts.values())
print(f"bench: provisioner: {total / done:.1f} system calls per node ({total} in all, helpers' own left out)")
for name, n in counts.most_common(15):
    print(f"bench:   {n / done:8.2f} {name}")
PY
elif [ "$PROFILE" = allocs ]; then
  python3 - "$out/allocs.csv" "$out/summary.json" <<'PY'
import csv, json, sys
done = max(1, sum(1 for n in json.load(open(sys.argv[2]))["nodes"] if n["phase"] == "provisioned"))
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.strip() and not l.startswith("#"))]
counts = {r[2].split(":")[-1]: int(r[0]) for r in rows if r[0].isdigit()}
print(f"bench: provisioner allocations per node: " + ", ".join(f"{k} {counts.get(k, 0) / done:.1f}" for k in ("malloc", "realloc", "calloc", "free")))
PY
elif [ "$PROFILE" = dhat ] || [ "$PROFILE" = dhat-sim ]; then
  # dhat: what the daemon allocates per node, in blocks and bytes. dhat-sim: what the
  # simulator holds at its peak (dhat's t-gmax), per node of the fleet.
  python3 - "$out/$PROFILE.out" "$out/summary.json" "$NODES" "$PROFILE" <<'PY'
import collections, json, re, sys
d, mode = json.load(open(sys.argv[1])), sys.argv[4]
frames = d["ftbl"]
if mode == "dhat":
    per = max(1, sum(1 for n in json.load(open(sys.argv[2]))["nodes"] if n["phase"] == "provisioned"))
    key, shown = "tbk", lambda v: f"{v:7.1f}"
    blocks = sum(pp["tbk"] for pp in d["pps"])
    size = sum(pp["tb"] for pp in d["pps"])
    print(f"bench: provisioner heap: {blocks / per:.1f} blocks, {size / per / 1024:.1f} KiB allocated per node ({blocks} blocks in all)")
else:
    per = int(sys.argv[3])
    key, shown = "gb", lambda v: f"{v:9,.0f}"
    peak = sum(pp["gb"] for pp in d["pps"])
    print(f"bench: choria-fleet-sim heap at its peak: {peak / 1048576:.1f} MiB, {peak / per:,.0f} bytes per node")
# Each site named by the first frame of our code or of a library we call, past the
# allocator, the collections, std and serde's generic parts.
plumbing = re.compile(r"alloc|RawVec|raw_vec|__rust_|vg_replace|\[root\]|UnknownInlinedFun|core::|std::|hashbrown|indexmap|serde_core|<serde|serde_json::(de|value)|SpecFrom|SpecExtend|Clone|to_owned|to_string|fmt::format")
sites = collections.Counter()
for pp in d["pps"]:
    names = [re.sub(r"^0x[0-9A-F]+: ", "", frames[i]).split(" (")[0] for i in pp["fs"]]
    site = next((n for n in names if not plumbing.search(n)), names[-1] if names else "?")
    sites[site[:110]] += pp[key]
for site, n in sites.most_common(15):
    print(f"bench:   {shown(n / per)} {site}")
PY
elif [ "$PROFILE" = heaptrack ]; then
  heaptrack_print -f "$out/heaptrack.zst" --print-peaks 1 --peak-limit 12 --sub-peak-limit 8 \
    --print-allocators 0 --print-temporary 0 --print-leaks 0 2>/dev/null >"$out/heaptrack.txt" || true
  grep -m1 "peak heap memory consumption" "$out/heaptrack.txt" | sed 's/^/bench: provisioner /'
  echo "bench: what held it then, by the innermost frame (their callers in $out/heaptrack.txt):"
  grep -A1 "peak memory consumed over" "$out/heaptrack.txt" | grep -v '^--' | paste - - \
    | sed -E 's/ peak memory consumed over ([0-9]+) calls from\t */ (\1 allocations) /; s/::h[0-9a-f]{16}$//' | cut -c1-140 | sed 's/^/bench:   /'
elif [ "$PROFILE" = sleeps ]; then
  perf script -i "$out/sleeps.data" -F comm,pid,tid,event,ip,sym 2>/dev/null >"$out/sleeps.txt" || true
  python3 - "$out/sleeps.txt" "$out/summary.json" <<'PY'
import collections, json, re, sys
done = sum(1 for n in json.load(open(sys.argv[2]))["nodes"] if n["phase"] == "provisioned") or 1
# A switch's stack: kernel frames, then the libc/std/parking_lot wait, then the
# code that waited. The site is the first frame of ours (or of the NATS client).
# perf follows the helpers too (their vfork children still carry a worker's name):
# only the process with the most switches, the daemon, is counted.
ours = re.compile(r"choria_provisioner|nats::")
wait = re.compile(r"parking_lot|std::sys|std::thread|crossbeam|futex|lock|park|wait|sleep|poll|read|Condvar|Mutex|RwLock|recv|<unknown>|\\[unknown\\]")
switches = []
for block in open(sys.argv[1]).read().split("\n\n"):
    lines = [l.strip() for l in block.strip().splitlines()]
    head = lines[0].split() if lines else []
    if len(head) < 2:
        continue
    name, pid = re.sub(r"-?\d+$", "", head[0]), head[1].split("/")[0]
    switches.append((pid, name, [re.sub(r"^[0-9a-f]+\s+", "", l).split(" (")[0] for l in lines[1:]]))
daemon = collections.Counter(pid for pid, _, _ in switches).most_common(1)
threads, sites = collections.Counter(), collections.Counter()
for pid, name, frames in switches:
    if not daemon or pid != daemon[0][0]:
        continue
    site = next((f for f in frames if ours.search(f) and not wait.search(f.split("::")[-1])), None)
    site = site or next((f for f in frames if ours.search(f)), frames[-1] if frames else "?")
    threads[name] += 1
    sites[(name, re.sub(r"::h[0-9a-f]{16}$", "", site)[:100])] += 1
print(f"bench: provisioner context switches by thread, per node ({sum(threads.values()) / done:.2f} in all):")
for k, v in threads.most_common(8):
    print(f"bench:   {v / done:6.2f} {k}")
print("bench: and by the code that slept (or was preempted), per node:")
for (t, site), v in sites.most_common(20):
    print(f"bench:   {v / done:6.2f} {t:<16} {site}")
PY
elif [ "$PROFILE" = perf ]; then
  echo "bench: perf report -i $out/perf.data --no-children --sort sym (the provisioner is the process with the most samples)"
elif [ -n "$PROFILE" ]; then
  callgrind_annotate "$out/callgrind.out" >"$out/callgrind.txt" 2>/dev/null || true
  total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$out/callgrind.txt")
  done_nodes=$(python3 -c 'import json,sys; print(sum(1 for n in json.load(open(sys.argv[1]))["nodes"] if n["phase"] == "provisioned"))' "$out/summary.json")
  who=$([ "$PROFILE" = callgrind ] && echo provisioner || echo choria-fleet-sim)
  echo "bench: $who: $(( ${total:-0} / (done_nodes > 0 ? done_nodes : 1) )) instructions per node (${total:-0} in all)"
  echo "bench: top functions by own instructions (all of it in $out/callgrind.txt):"
  # awk stops itself after 25 lines: `| head` would end it with SIGPIPE, and
  # pipefail would fail the run.
  awk '/^-+$/ {n++; next} n >= 3 && NF && shown++ < 25' "$out/callgrind.txt" | sed 's/^/bench:   /'
fi
echo "bench: logs and the summary are in $out/"
