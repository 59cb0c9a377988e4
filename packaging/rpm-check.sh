#!/bin/sh
# Checks a built choria-provisioner RPM against the Go provisioner's RPM (the Go
# package's interface) and the packaging issue. Run by `make rpm-check`:
#   packaging/rpm-check.sh VERSION RELEASE TARBALL RPM
# Prints every failed expectation and exits 1 if there was any.
set -eu

version=$1 release=$2 tarball=$3 rpm=$4
name=choria-provisioner
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
# expect NAME FILE LINE: FILE has exactly this line.
expect() {
    if grep -qxF -- "$3" "$2"; then ok "$1: $3"; else fail "$1: missing line: $3"; fi
}

[ -f "$rpm" ] || { echo "FAIL: no RPM at $rpm"; exit 1; }

echo "== tarball: $tarball"
tar tzf "$tarball" > "$work/tarball"
top=$name-$version
for f in "$top/.cargo/config.toml" "$top/Cargo.lock" "$top/vendor/" "$top/packaging/$name.spec"; do
    expect tarball "$work/tarball" "$f"
done
if grep -E "^$top/(target|\.git|fuzz/(target|corpus|artifacts))/" "$work/tarball" | head -n 3 | grep .; then
    fail "tarball holds build output, .git or fuzz artifacts"
fi
[ "$(grep -c '\.spec$' "$work/tarball")" -eq 1 ] || fail "tarball must hold exactly one *.spec (rpmbuild -ta reads it)"

echo "== rpm -qip"
rpm -qp --qf 'Name=%{NAME}\nVersion=%{VERSION}\nRelease=%{RELEASE}\nLicense=%{LICENSE}\nSummary=%{SUMMARY}\nURL=%{URL}\nGroup=%{GROUP}\n' "$rpm" > "$work/info"
for line in "Name=$name" "Version=$version" "Release=$release" "License=Apache-2.0" \
    "Summary=Choria Server Provisioner" "URL=https://choria.io" "Group=System Tools"; do
    expect info "$work/info" "$line"
done

echo "== files: mode owner group path"
rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILENAMES}\n]' "$rpm" > "$work/files"
cat > "$work/want-files" <<EOF
-rwxr-xr-x root root /usr/sbin/$name
-rw-r--r-- root root /usr/lib/systemd/system/$name.service
-rw-r--r-- root root /etc/logrotate.d/$name
drwxr-xr-x root root /etc/$name
-rw-r----- root root /etc/$name/$name.yaml
-rw-r----- root root /etc/$name/choria.cfg
-rw-r--r-- root root /var/log/$name.log
drwxr-xr-x root root /var/log/$name
drwxr-xr-x root root /var/lib/$name
drwxr-xr-x root root /usr/share/doc/$name/examples
-rw-r--r-- root root /usr/share/doc/$name/configuration.md
-rw-r--r-- root root /usr/share/doc/$name/helper.md
-rw-r--r-- root root /usr/share/doc/$name/operations.md
-rw-r--r-- root root /usr/share/doc/$name/security.md
-rw-r--r-- root root /usr/share/doc/$name/performance.md
-rw-r--r-- root root /usr/share/man/man8/$name.8.gz
drwxr-xr-x root root /usr/share/$name
-rw-r--r-- root root /usr/share/$name/grafana-dashboard.json
-rw-r--r-- root root /usr/share/$name/prometheus-alerts.yaml
EOF
while IFS= read -r line; do expect files "$work/files" "$line"; done < "$work/want-files"
# Nothing else outside documentation, licences and build-id links.
grep -vxF -f "$work/want-files" "$work/files" |
    grep -vE ' (/usr/share/doc/|/usr/share/licenses/|/usr/lib/\.build-id)' > "$work/extra" || true
if [ -s "$work/extra" ]; then fail "unexpected files:"; cat "$work/extra"; fi

echo "== file flags (c config, n noreplace, g ghost, d doc)"
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" > "$work/flags"
for line in "cn /etc/$name/$name.yaml" "cn /etc/$name/choria.cfg" "cn /etc/logrotate.d/$name" \
    "g /var/log/$name.log" " /usr/sbin/$name" " /usr/lib/systemd/system/$name.service" \
    "d /usr/share/man/man8/$name.8.gz"; do
    expect flags "$work/flags" "$line"
done

echo "== scriptlets"
rpm -qp --scripts "$rpm" > "$work/scripts"
# Split into the %post and %preun bodies.
awk '/^postinstall scriptlet/{s="post";next} /^preuninstall scriptlet/{s="preun";next}
     /scriptlet \(using/{s="";next} s{print > (dir "/" s)}' dir="$work" "$work/scripts"
touch "$work/post" "$work/preun"
for line in 'if [ $1 -eq 1 ]; then' \
    "    systemctl --no-reload preset $name.service >/dev/null 2>&1 || :" \
    'systemctl daemon-reload >/dev/null 2>&1 || :' \
    "systemctl try-restart $name.service >/dev/null 2>&1 || :"; do
    expect %post "$work/post" "$line"
done
for line in 'if [ $1 -eq 0 ]; then' \
    "    systemctl --no-reload disable --now $name.service >/dev/null 2>&1 || :"; do
    expect %preun "$work/preun" "$line"
done
[ "$(grep -c 'scriptlet (using' "$work/scripts")" -eq 2 ] || fail "scriptlets other than %post and %preun: $(grep 'scriptlet (using' "$work/scripts")"

echo "== package contents"
mkdir "$work/root"
(cd "$work/root" && rpm2cpio "$rpm" | cpio -idm --quiet)
root=$work/root
bin=$root/usr/sbin/$name
unit=$root/usr/lib/systemd/system/$name.service
expect unit "$unit" "ExecStart=/usr/sbin/$name run --choria-config /etc/$name/choria.cfg --config=/etc/$name/$name.yaml"
expect unit "$unit" "Restart=on-failure"
expect unit "$unit" "After=network-online.target"
expect unit "$unit" "Wants=network-online.target"
expect unit "$unit" "WantedBy=multi-user.target"
expect logrotate "$root/etc/logrotate.d/$name" "/var/log/$name.log {"
expect logrotate "$root/etc/logrotate.d/$name" "/var/log/$name/audit.log {"
cmp -s "$root/etc/$name/$name.yaml" packaging/$name.yaml || fail "installed YAML is not packaging/$name.yaml"
cmp -s "$root/etc/$name/choria.cfg" packaging/choria.cfg || fail "installed choria.cfg is not packaging/choria.cfg"
for f in grafana-dashboard.json prometheus-alerts.yaml; do
    cmp -s "$root/usr/share/$name/$f" "packaging/monitoring/$f" || fail "installed $f is not packaging/monitoring/$f"
done
gzip -dc "$root/usr/share/man/man8/$name.8.gz" | cmp -s - "packaging/$name.8" ||
    fail "installed man page is not packaging/$name.8"

echo "== --version"
out=$("$bin" --version 2>&1) || fail "$name --version exited $?"
case "$out" in
    *"$version"*) ok "--version prints $out" ;;
    "") echo "SKIP: $name --version prints nothing yet (the CLI is not on this branch)" ;;
    *) fail "--version printed '$out', not $version" ;;
esac

echo "== rpmlint (spec in the tarball, and the RPM)"
tar xzf "$tarball" -C "$work" "$top/packaging/$name.spec"
if rpmlint -r packaging/$name.rpmlintrc "$work/$top/packaging/$name.spec" "$rpm" > "$work/rpmlint" 2>&1; then
    grep -E ': (W|E): |badness' "$work/rpmlint" || true
    ok "rpmlint: no errors"
    # rpmlint 2.4.0 (Debian 12) records a man page's section instead of its name
    # (FilesCheck man_basenames), so it names every binary whatever the package has;
    # the man page itself is checked above. Any other rpmlint must not complain.
    if grep -q 'no-manual-page-for-binary' "$work/rpmlint"; then
        case "$(rpmlint --version 2>/dev/null)" in
            2.4.0) echo "SKIP: rpmlint 2.4.0 reports no-manual-page-for-binary for every binary" ;;
            *) fail "rpmlint: no-manual-page-for-binary (the man page is not where rpmlint looks)" ;;
        esac
    fi
else
    cat "$work/rpmlint"
    fail "rpmlint reported errors"
fi

echo "== systemd-analyze verify"
# verify insists that ExecStart names an executable on this machine, so the
# copy verified runs the packaged binary from where it was unpacked; every other
# line is the packaged unit's (its ExecStart was checked above).
mkdir "$work/unit"
sed "s#^ExecStart=/usr/sbin/$name #ExecStart=$bin #" "$unit" > "$work/unit/$name.service"
if systemd-analyze verify "$work/unit/$name.service" > "$work/verify" 2>&1 && ! [ -s "$work/verify" ]; then
    ok "systemd-analyze verify: clean"
else
    cat "$work/verify"
    fail "systemd-analyze verify complained"
fi

echo "== check of the default configuration"
# Only a binary whose `check --help` documents --config has the subcommand (the
# skeleton exits 0 on anything and prints nothing).
if "$bin" check --help 2>&1 | grep -q -- '--config'; then
    # Point every /etc/choria-provisioner path at real files in a scratch tree:
    # an executable helper (the packaged example), a verify certificate, the
    # client certificate, key and CA.
    etc=$work/etc
    mkdir -p "$etc/ssl"
    install -m 0755 "$root/usr/share/doc/$name/examples/helper.sh" "$etc/helper"
    # check loads the keys as run does, so they must be real: a throw-away
    # self-signed certificate serves as verify certificate, client certificate and CA.
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=provisioner.mcollective \
        -keyout "$etc/ssl/provisioner.mcollective.key" -out "$etc/ssl/provisioner.mcollective.pem" >/dev/null 2>&1 \
        || fail "openssl could not make a test certificate"
    cp "$etc/ssl/provisioner.mcollective.pem" "$etc/jwt-verify.pem"
    cp "$etc/ssl/provisioner.mcollective.pem" "$etc/ssl/ca.pem"
    sed -e "s#/etc/$name/#$etc/#g" -e "s#/var/log/$name/#$root/var/log/$name/#g" \
        -e "s#/var/lib/$name/#$root/var/lib/$name/#g" \
        "$root/etc/$name/$name.yaml" > "$etc/$name.yaml"
    sed "s#/etc/$name/#$etc/#g" "$root/etc/$name/choria.cfg" > "$etc/choria.cfg"
    if "$bin" check --config "$etc/$name.yaml" --choria-config "$etc/choria.cfg" > "$work/check" 2>&1; then
        ok "check passes on the default YAML"
    else
        cat "$work/check"
        fail "check rejects the default YAML"
    fi
else
    echo "SKIP: $name has no check subcommand yet (its check --help does not document --config)"
fi

echo "== upgrade from the Go package"
# A stand-in for Go's RPM (its %files of §6.2: the packager metadata as the YAML,
# a regular empty log file), installed into a scratch rpm root, edited as an
# operator would, then upgraded to ours: edits and log content must survive.
# --oldpackage: Go's versions (0.29.x, nightly 0.99.0.<date>) may sort above ours.
go=$work/go
mkdir -p "$go"
cat > "$go/go.spec" <<'SPEC'
Name: choria-provisioner
Version: 0.29.4
Release: 1.el
Summary: stand-in for the Go package
License: Apache-2.0
%global debug_package %{nil}
%description
stand-in
%install
mkdir -p %{buildroot}/usr/sbin %{buildroot}/etc/choria-provisioner %{buildroot}/var/log
printf '#!/bin/sh\n' > %{buildroot}/usr/sbin/choria-provisioner
printf 'required_properties: []\n' > %{buildroot}/etc/choria-provisioner/choria-provisioner.yaml
touch %{buildroot}/var/log/choria-provisioner.log
%files
%config(noreplace) %attr(0640,root,root) /etc/choria-provisioner/choria-provisioner.yaml
%attr(0755,root,root) /usr/sbin/choria-provisioner
%attr(0644,root,root) /var/log/choria-provisioner.log
SPEC
r=$go/root
quiet() { "$@" 2>&1 | grep -vE 'use Alien|assuming you know' || true; }
if rpmbuild -bb --quiet --define "_topdir $go/top" "$go/go.spec" > "$go/build.log" 2>&1; then
    mkdir -p "$r"
    rpm --root "$r" --initdb
    quiet rpm --root "$r" -i --nodeps --noscripts "$go"/top/RPMS/*/*.rpm
    echo "site: edited" > "$r/etc/$name/$name.yaml"
    echo "plugin.choria.middleware_hosts = site:4222" > "$r/etc/$name/choria.cfg"
    echo "an old log line" > "$r/var/log/$name.log"
    quiet rpm --root "$r" -U --oldpackage --nodeps --noscripts "$rpm"
    got=$(rpm --root "$r" -q "$name" 2>/dev/null)
    [ "$got" = "$(rpm -qp "$rpm" 2>/dev/null)" ] || fail "upgrade: installed is '$got'"
    expect upgrade "$r/etc/$name/$name.yaml" "site: edited"
    expect upgrade "$r/etc/$name/choria.cfg" "plugin.choria.middleware_hosts = site:4222"
    expect upgrade "$r/var/log/$name.log" "an old log line"
    cmp -s "$r/etc/$name/$name.yaml.rpmnew" packaging/$name.yaml || fail "upgrade: no $name.yaml.rpmnew"
    cmp -s "$r/etc/$name/choria.cfg.rpmnew" packaging/choria.cfg || fail "upgrade: no choria.cfg.rpmnew"
    rpm --root "$r" -qf "/var/log/$name.log" 2>/dev/null | grep -q "^$name-$version-" ||
        fail "upgrade: the log file is not owned by the new package"
else
    cat "$go/build.log"
    fail "could not build the stand-in Go package"
fi

if [ "$failures" -gt 0 ]; then
    echo "rpm-check: $failures failure(s)"
    exit 1
fi
echo "rpm-check: all checks passed for $(basename "$rpm")"
