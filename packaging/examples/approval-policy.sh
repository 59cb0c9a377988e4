#!/bin/sh
# An approval policy program for choria-provisioner (approval_policy): approves a
# node when its identity is listed in a CSV of the machines the site expects and
# the serial number it reports matches the one listed; denies nothing; leaves
# everything else to a person.
#
#   approval_policy: /bin/sh /usr/share/doc/choria-provisioner/examples/approval-policy.sh /etc/choria-provisioner/expected-machines.csv
#   approval_facts: [dmi.product.serial_number, networking.fqdn, os.name]
#
# The CSV has one machine a line, "identity,serial" ('#' starts a comment):
#
#   web7.example.net,CZ2041ABCD
#   db2.example.net,CZ2041ABCE
#
# The daemon writes one JSON document on stdin: {"identity", "version", "facts"
# (the facts approval_facts names), "jwt" (the provisioning JWT's claims, without
# its token, or null), "csr" ({"common_name", "dns_names"}, or null)}. Exit 0
# approves, 1 denies (the first line of stdout is the reason), 2 leaves the node
# to a person; anything else is counted as a failure and leaves it to a person too.
#
# What this proves: nothing more than that whoever answers for the name knows the
# serial the site wrote down. Facts are reported by the node itself; a serial is
# printed on the box and in the purchase records, so treat it as a shared secret
# of modest strength, and keep the list to the machines due that week.
#
# Second argument: the fact holding the serial (default dmi.product.serial_number).

set -u
csv="${1:-/etc/choria-provisioner/expected-machines.csv}"
fact="${2:-dmi.product.serial_number}"

input=$(cat)
identity=$(printf '%s' "$input" | sed -n 's/^{"identity":"\([A-Za-z0-9._-]*\)".*/\1/p')
[ -n "$identity" ] || exit 2
key=$(printf '%s' "$fact" | sed 's/[.]/[.]/g')
serial=$(printf '%s' "$input" | sed -n "s/.*\"$key\":\"\([A-Za-z0-9._-]*\)\".*/\1/p")
[ -n "$serial" ] || exit 2
[ -r "$csv" ] || { echo "cannot read $csv" >&2; exit 2; }

while IFS=, read -r name expected rest; do
    case "$name" in ''|\#*) continue ;; esac
    expected=$(printf '%s' "$expected" | tr -d ' \r')
    if [ "$name" = "$identity" ] && [ "$expected" = "$serial" ]; then
        exit 0
    fi
done < "$csv"
exit 2
