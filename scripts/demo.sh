#!/usr/bin/env bash
# make demo: a nats-server on a free 127.0.0.1 port, choria-fleet-sim with 200 nodes
# (some of them faulty), and the provisioner with the example shell helper and
# /metrics. Shows progress, ends with a summary, stops everything it started.
# BROKER=issuer (protocol v2, choria security provider, organisation issuer) or
# BROKER=mtls (protocol v1, file provider, mutual TLS) puts the tests' Choria broker
# front end (examples/choria_broker.rs) before the nats-server: provisioner and nodes
# connect with TLS and the credentials `choria-fleet-sim keys` made for them.
# Ends with `choria-provisioner nodes` for the fleet, one faulty node's history, and
# the audit trail's path: what happened to node X, when and why.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/rig.sh
. scripts/rig.sh
NODES="${NODES:-200}"
TIMEOUT="${TIMEOUT:-180}"
out="$PWD/target/demo"
rm -rf "$out" && mkdir -p "$out"
bin="$PWD/target/debug"
nats_server="$(scripts/ensure-nats-server.sh)"

monitor_port=$(free_port)

BROKER="${BROKER:-}"
if [ -n "$BROKER" ]; then
  cargo build --features sim --example choria_broker >"$out/build-broker.log" 2>&1
  NATS_SERVER="$nats_server" "$bin/examples/choria_broker" "$BROKER" "$out" 2>"$out/broker.log" &
  pids+=($!)
  for _ in $(seq 150); do [ -f "$out/broker.env" ] && break; sleep 0.2; done
  # shellcheck disable=SC1091
  . "$out/broker.env"
  url="$BROKER_URL"
  security=$(cat "$out/broker-security.cfg")
  access=$(cat "$out/broker.yaml")
  sim_access=(--keys "$BROKER_KEYS")
else
  nats_port=$(free_port)
  "$nats_server" -a 127.0.0.1 -p "$nats_port" >"$out/nats-server.log" 2>&1 &
  pids+=($!)
  url="nats://127.0.0.1:$nats_port"
  security=""
  access=$'token: demo-token\nchoria_insecure: true'
  sim_access=(--token demo-token)
fi

cat >"$out/provisioner.yaml" <<YAML
workers: 16
interval: 1m
logfile: $out/provisioner.log
loglevel: info
helper: $PWD/packaging/examples/provision-helper.sh
$access
site: demo
audit_file: $out/audit.log
monitor_port: $monitor_port
monitor_host: 127.0.0.1
YAML
cat >"$out/choria.cfg" <<CFG
identity = provisioner.demo.local
plugin.choria.middleware_hosts = $url
plugin.choria.use_srv = false
$security
CFG

echo "demo: ${BROKER:+Choria broker ($BROKER) on }$url, /metrics on http://127.0.0.1:$monitor_port/metrics"
"$bin/choria-provisioner" check --config "$out/provisioner.yaml" --choria-config "$out/choria.cfg" >"$out/check.txt"
"$bin/choria-provisioner" run --config "$out/provisioner.yaml" --choria-config "$out/choria.cfg" --pid "$out/provisioner.pid" 2>"$out/provisioner.stderr" &
pids+=($!)
"$bin/choria-fleet-sim" --nats "$url" --nodes "$NODES" "${sim_access[@]}" \
  --boot-rate 50 --fault-silent 0.02 --fault-slow 0.02 --fault-error 0.02 \
  --fault-garbage 0.02 --fault-reboot 0.02 --summary "$out/summary.json" \
  2>"$out/fleet-sim.log" &
sim=$!
pids+=($sim)

metric() { curl -s "http://127.0.0.1:$monitor_port/metrics" 2>/dev/null | awk -v m="$1" '$1 ~ "^"m"[{ ]" {s+=$2} END {print s+0}'; }
start=$(date +%s)
while kill -0 "$sim" 2>/dev/null; do
  sleep 2
  line=$(tail -n 1 "$out/fleet-sim.log" 2>/dev/null || true)
  printf 'demo: %3ss  provisioned %s  errors %s  | %s\n' "$(( $(date +%s) - start ))" \
    "$(metric choria_provisioner_provisioned)" "$(metric choria_provisioner_provision_errors)" "${line#choria-fleet-sim: }"
  if [ $(( $(date +%s) - start )) -ge "$TIMEOUT" ]; then
    echo "demo: stopping after ${TIMEOUT}s"
    kill -INT "$sim" 2>/dev/null || true
    break
  fi
done
wait "$sim" 2>/dev/null || true
sleep 0.2

python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
nodes = s["nodes"]
done = sum(1 for n in nodes if n["phase"] == "provisioned")
faulty = [n for n in nodes if n["fault"]]
print(f"demo: {done}/{len(nodes)} nodes provisioned; {sum(1 for n in faulty if n['phase']=='provisioned')}/{len(faulty)} faulty nodes recovered")
print(f"demo: {sum(1 for n in nodes if n['restarts'] > 1)} nodes came back in provisioning mode and were provisioned again")
PY
nodes=("$bin/choria-provisioner" nodes --monitor "http://127.0.0.1:$monitor_port")
echo
echo "demo: \$ choria-provisioner nodes --monitor http://127.0.0.1:$monitor_port"
"${nodes[@]}" || true
# The node that was hardest to provision (most attempts, then the longest one: a
# faulty one), as an operator would look it up.
retried=$(python3 - "$out/audit.log" <<'PY'
import json, sys
worst = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    n, took = worst.get(r["identity"], (0, 0.0))
    worst[r["identity"]] = (n + 1, max(took, r["duration_seconds"]))
print(max(worst, key=worst.get) if worst else "")
PY
)
if [ -n "$retried" ]; then
  echo
  echo "demo: \$ choria-provisioner nodes --monitor http://127.0.0.1:$monitor_port $retried"
  "${nodes[@]}" "$retried" || true
fi
echo
echo "demo: the audit trail (one JSON line per attempt) is $out/audit.log"
echo "demo: provisioner metrics: provisioned $(metric choria_provisioner_provisioned), errors $(metric choria_provisioner_provision_errors), rpc errors $(metric choria_provisioner_rpc_errors)"
echo "demo: logs and the per-node summary are in $out/"
