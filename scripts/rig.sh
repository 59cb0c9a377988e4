# Shared by demo.sh and bench.sh (sourced): free ports and stopping what was started.

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Processes to stop on exit, newest first, so the provisioner stops while its broker
# is still up.
pids=()
cleanup() {
  for ((i=${#pids[@]}-1; i>=0; i--)); do
    kill "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
