#!/bin/sh
# Placeholder helper: defers every node until a real site helper is installed.
#
# The provisioner writes one JSON object (the node's identity, inventory, CSR and
# verified JWT claims, which include the token) to stdin and expects one JSON
# object on stdout. Deferring is always safe: the node is retried on the next
# discovery or start-up. To use it: copy to /etc/choria-provisioner/helper and
# chmod 0755. Never copy the request to a file others can read: it holds secrets.

# Read and discard the request so the provisioner's writer is not left blocked.
cat >/dev/null

printf '%s\n' '{"defer": true, "msg": "edit /etc/choria-provisioner/helper: no site helper configured yet"}'
