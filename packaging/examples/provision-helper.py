#!/usr/bin/env python3
"""Example Choria provisioning helper (Python 3 standard library only).

Reads the provisioner's request on stdin and prints a reply on stdout:

* nodes whose facts say ``"decommissioned": true`` are shut down;
* nodes without a ``role`` fact are deferred until the CMDB knows them;
* with ``features.pki``, the node's CSR is signed with ``openssl`` using the CA in
  ``$PROVISION_CA_CERT`` / ``$PROVISION_CA_KEY`` and the node gets the file
  security provider; without a CA configured the node is deferred;
* everyone else gets a configuration for the production broker.

It never writes the request anywhere: the request carries the provisioning token.
"""
import json
import os
import subprocess
import sys
import tempfile

BROKER = os.environ.get("PROVISION_BROKER", "nats://broker.example.net:4222")


def reply(**fields):
    json.dump(fields, sys.stdout)
    sys.stdout.write("\n")
    sys.exit(0)


def sign_csr(csr_pem):
    ca_cert = os.environ.get("PROVISION_CA_CERT")
    ca_key = os.environ.get("PROVISION_CA_KEY")
    if not (ca_cert and ca_key):
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        csr_path = os.path.join(tmp, "node.csr")
        with open(csr_path, "w") as f:
            f.write(csr_pem)
        signed = subprocess.run(
            ["openssl", "x509", "-req", "-in", csr_path, "-CA", ca_cert, "-CAkey", ca_key,
             "-CAcreateserial", "-CAserial", os.path.join(tmp, "ca.srl"), "-days", "365"],
            capture_output=True, text=True, check=True,
        ).stdout
    with open(ca_cert) as f:
        return signed, f.read()


def main():
    request = json.load(sys.stdin)
    identity = request.get("identity") or ""
    inventory = json.loads(request.get("inventory") or "{}")
    facts = inventory.get("facts") or {}

    if not identity:
        reply(defer=True, msg="no identity in the request")
    if facts.get("decommissioned") is True:
        reply(shutdown=True, msg="%s is decommissioned" % identity)
    if not facts.get("role"):
        reply(defer=True, msg="%s has no role fact yet" % identity)

    configuration = {
        "identity": identity,
        "plugin.choria.server.provision": "false",
        "plugin.choria.middleware_hosts": BROKER,
        "plugin.choria.use_srv": "false",
        "loglevel": "info",
    }
    answer = {"defer": False, "msg": "role %s" % facts["role"], "configuration": configuration}

    csr = request.get("csr")
    if csr:
        try:
            certificate, ca = sign_csr(csr["csr"])
        except (OSError, subprocess.CalledProcessError) as e:
            reply(defer=True, msg="could not sign the CSR: %s" % e)
        if certificate is None:
            reply(defer=True, msg="no CA configured (PROVISION_CA_CERT, PROVISION_CA_KEY)")
        ssldir = csr.get("ssldir") or "/etc/choria/ssl"
        answer.update(certificate=certificate, ca=ca, ssldir=ssldir)
        configuration.update({
            "plugin.security.provider": "file",
            "plugin.security.file.certificate": ssldir + "/certificate.pem",
            "plugin.security.file.key": ssldir + "/private.pem",
            "plugin.security.file.ca": ssldir + "/ca.pem",
            "plugin.security.file.cache": ssldir + "/cache",
        })

    reply(**answer)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # any surprise is a deferral, never a crash
        reply(defer=True, msg="helper failed: %s: %s" % (type(e).__name__, e))
