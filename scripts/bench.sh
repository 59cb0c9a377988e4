#!/usr/bin/env bash
# make bench: the demo rig scripted for a large fleet (default 10,000 nodes) with a
# trivial compiled helper. Prints nodes/minute, per-node time from the first RPC to
# the restart (p50/p99), provisioner CPU per node (from /proc, the helper excluded),
# peak RSS, idle CPU, and the RSS of 50,000 queued nodes while paused.
# INSTANCES=N (default 1) runs N provisioners with active_active: true on the same
# machine: CPU and RSS are summed over them, and each one's share of the fleet and
# the nodes touched by two of them are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/rig.sh
. scripts/rig.sh
NODES="${NODES:-10000}"
WORKERS="${WORKERS:-64}"
INSTANCES="${INSTANCES:-1}"
case "$INSTANCES" in ''|*[!0-9]*|0) echo "INSTANCES must be a positive number" >&2; exit 1;; esac
# FEATURES=ed25519 benchmarks the jwt + gen25519 + signed server JWT sequence.
FEATURES="${FEATURES:-}"
out="$PWD/target/bench"
rm -rf "$out" && mkdir -p "$out"
cargo build --release --features sim --bins --example bench_helper --example queue_rss >"$out/build.log" 2>&1
bin="$PWD/target/release"
nats_server="$(scripts/ensure-nats-server.sh)"
nats_port=$(free_port)

"$nats_server" -a 127.0.0.1 -p "$nats_port" >"$out/nats-server.log" 2>&1 &
pids+=($!)
cat >"$out/provisioner.yaml" <<YAML
workers: $WORKERS
interval: 1m
loglevel: warn
helper: $bin/examples/bench_helper
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
for i in $(seq 1 "$INSTANCES"); do
  # One file pair per instance: its own identity and log.
  sed "1i logfile: $out/provisioner-$i.log" "$out/provisioner.yaml" >"$out/provisioner-$i.yaml"
  printf 'identity = provisioner-%s.bench.local\nplugin.choria.middleware_hosts = nats://127.0.0.1:%s\n' "$i" "$nats_port" >"$out/choria-$i.cfg"
done

sleep 0.5
"$bin/choria-fleet-sim" --nats "nats://127.0.0.1:$nats_port" --nodes "$NODES" --workers 2 --quiet \
  --summary "$out/summary.json" "${sim_extra[@]}" 2>"$out/fleet-sim.log" &
sim=$!
pids+=($sim)
sleep 2 # every node booted before the provisioner starts: the first discovery finds them all

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The sum of a value over every provisioner: ticks, or a /proc/<pid>/status field.
sum_ticks() { local t=0 p; for p in "${provs[@]}"; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
sum_status() { local k=0 p; for p in "${provs[@]}"; do k=$((k + $(awk "/$1/ {print \$2}" "/proc/$p/status"))); done; echo "$k"; }
hz=$(getconf CLK_TCK)
start_ns=$(date +%s%N)
provs=()
for i in $(seq 1 "$INSTANCES"); do
  "$bin/choria-provisioner" run --config "$out/provisioner-$i.yaml" --choria-config "$out/choria-$i.cfg" 2>"$out/provisioner-$i.stderr" &
  provs+=($!)
  pids+=($!)
done
sim_ticks=0; sim_peak_kb=0
while kill -0 "$sim" 2>/dev/null; do
  # The simulator's own cost, read while it runs (it exits when every node is done).
  t=$(ticks "$sim" 2>/dev/null || echo "$sim_ticks"); sim_ticks=${t:-$sim_ticks}
  k=$(awk '/VmHWM/ {print $2}' "/proc/$sim/status" 2>/dev/null || echo "$sim_peak_kb"); sim_peak_kb=${k:-$sim_peak_kb}
  sleep 0.2
done
end_ns=$(date +%s%N)
busy_ticks=$(sum_ticks)
peak_kb=$(sum_status VmHWM)
sleep 10
idle_ticks=$(( $(sum_ticks) - busy_ticks ))
"$bin/examples/queue_rss" >"$out/queue_rss.txt"

python3 - "$out/summary.json" "$NODES" "$start_ns" "$end_ns" "$busy_ticks" "$idle_ticks" "$hz" "$peak_kb" "$WORKERS" "$out/queue_rss.txt" "$FEATURES" "$sim_ticks" "$sim_peak_kb" "$INSTANCES" <<'PY'
import collections, json, sys
summary, nodes, start, end, busy, idle, hz, peak_kb, workers, queue, _features, sim_ticks, sim_kb, instances = sys.argv[1:]
instances = int(instances)
s = json.load(open(summary))
nodes, hz = int(nodes), int(hz)
seconds = (int(end) - int(start)) / 1e9
done = sum(1 for n in s["nodes"] if n["phase"] == "provisioned")
times = sorted(n["provisioning_ms"] for n in s["nodes"] if n["provisioning_ms"] is not None)
pct = lambda p: times[min(len(times) - 1, int(p * len(times)))] if times else 0
print(f"bench: features: {sys.argv[11] or 'none'}")
print(f"bench: {done}/{nodes} nodes provisioned in {seconds:.1f} s by {instances} instance(s) "
      f"with {workers} workers each = {done / seconds * 60:,.0f} nodes/minute (target >= 30,000)")
if instances > 1:
    by = collections.Counter(n.get("restarted_by") for n in s["nodes"])
    shares = ", ".join(f"{k}: {v / max(done, 1):.1%}" for k, v in sorted(by.items(), key=str))
    twice = sum(1 for n in s["nodes"] if len(n.get("callers", [])) > 1)
    again = sum(1 for n in s["nodes"] if n["restarts"] > 1)
    print(f"bench: shares {shares}; nodes touched by two instances {twice}, restarted twice {again}")
print(f"bench: first RPC to restart per node: p50 {pct(0.50)} ms, p99 {pct(0.99)} ms")
print(f"bench: provisioner CPU {int(busy) * 1000 / hz / max(done, 1):.3f} ms per node, helper excluded (target <= 0.3)")
print(f"bench: provisioner peak RSS {int(peak_kb) / 1024:.1f} MB" + (" (sum over instances)" if instances > 1 else ""))
print(f"bench: idle CPU {int(idle) / hz / 10 * 100:.2f} % of a core over 10 s (target < 1 %)")
print("bench: " + open(queue).read().strip() + " (target <= 64 MB)")
print(f"bench: choria-fleet-sim CPU {int(sim_ticks) * 1000 / hz / max(done, 1):.3f} ms per node (at least), peak RSS {int(sim_kb) / 1024:.1f} MB")
PY
echo "bench: logs and the summary are in $out/"
