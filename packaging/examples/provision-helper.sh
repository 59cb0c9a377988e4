#!/bin/sh
# Example Choria provisioning helper in plain POSIX shell (no jq, no Python).
#
# The provisioner writes one JSON object to stdin whose first key is always
# "identity" (see docs/helper.md); this helper extracts it and answers
# with a minimal configuration that moves the node onto the production broker.
# Replace BROKER and the settings below with your site's.
#
# Never log or store the input: it contains the provisioning token.
set -eu

BROKER="${PROVISION_BROKER:-nats://broker.example.net:4222}"

input=$(cat)
identity=$(printf '%s' "$input" | sed -n 's/^{"identity":"\([^"\\]*\)".*/\1/p')

if [ -z "$identity" ]; then
  printf '{"defer": true, "msg": "no identity in the request"}\n'
  exit 0
fi

cat <<JSON
{
  "defer": false,
  "msg": "configured by provision-helper.sh",
  "configuration": {
    "identity": "$identity",
    "plugin.choria.server.provision": "false",
    "plugin.choria.middleware_hosts": "$BROKER",
    "plugin.choria.use_srv": "false",
    "loglevel": "info"
  }
}
JSON
