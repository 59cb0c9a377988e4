#!/usr/bin/env python3
"""Example helper for Organization Issuer (ed25519) networks, standard library only.

Use with ``features: {ed25519: true}``: the provisioner has already fetched the
node's ed25519 public key and the directory of its ``server.seed``; this helper
configures the node to use that seed and the server JWT the provisioner will sign,
and asks for the claims the node needs.

Unlike the Go project's sample, it does not dump the request (which carries the
provisioning token) to a world-readable temporary file.
"""
import json
import os
import sys

BROKER = os.environ.get("PROVISION_BROKER", "nats://broker.example.net:4222")
ISSUER = os.environ.get("PROVISION_ISSUER_PUBLIC", "")  # hex ed25519 issuer public key
FIVE_YEARS = 5 * 365 * 24 * 3600


def reply(**fields):
    json.dump(fields, sys.stdout)
    sys.stdout.write("\n")
    sys.exit(0)


def main():
    request = json.load(sys.stdin)
    identity = request.get("identity") or ""
    ed = request.get("ed25519_pubkey") or {}
    directory = ed.get("directory") or ""
    if not identity:
        reply(defer=True, msg="no identity in the request")
    if not ed.get("public_key") or not directory:
        reply(defer=True, msg="no ed25519 key from %s: enable features.ed25519" % identity)
    if not ISSUER:
        reply(defer=True, msg="set PROVISION_ISSUER_PUBLIC to the issuer's public key")

    reply(
        defer=False,
        msg="Done",
        configuration={
            "identity": identity,
            "loglevel": "info",
            "plugin.choria.server.provision": "false",
            "plugin.choria.middleware_hosts": BROKER,
            "plugin.choria.use_srv": "false",
            "plugin.security.issuer.names": "choria",
            "plugin.security.issuer.choria.public": ISSUER,
            "plugin.security.provider": "choria",
            "plugin.security.choria.token_file": os.path.join(directory, "server.jwt"),
            "plugin.security.choria.seed_file": os.path.join(directory, "server.seed"),
            "rpcauthorization": "0",
        },
        # exp is read as seconds from now (see docs/helper.md); Go read it as an
        # absolute time and silently used its default instead.
        server_claims={
            "exp": FIVE_YEARS,
            "permissions": {"streams": True, "submission": True},
        },
    )


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        reply(defer=True, msg="Unexpected failure during provisioning: %s" % e)
