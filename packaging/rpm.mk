# Source tarball and RPM (included by the top-level Makefile).
#
#   make dist       target/dist/choria-provisioner-<version>.tar.gz: the working
#                   tree's files (git ls-files), the vendored crates and the cargo
#                   config that uses them; `rpmbuild -ta` on it needs no network
#   make rpm        the RPM, built by rpmbuild from that tarball, in target/rpm/
#   make rpm-check  the RPM built with no network, then every path, mode, owner,
#                   flag and scriptlet of the Go provisioner's RPM checked, rpmlint,
#                   systemd-analyze verify and `check` of the default YAML
#
# The version has one source, Cargo.toml; the release defaults to 1.

.PHONY: vendor dist rpm rpm-check

PKG_NAME    := choria-provisioner
PKG_VERSION := $(shell sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
RELEASE     ?= 1
# Go's generic EL package is named ...-1.el.<arch>.rpm; on an EL host
# `rpmbuild -ta` uses the host's own dist tag instead.
RPM_DIST    ?= .el
DIST_DIR    := target/dist
STAGE       := $(DIST_DIR)/$(PKG_NAME)-$(PKG_VERSION)
TARBALL     := $(DIST_DIR)/$(PKG_NAME)-$(PKG_VERSION).tar.gz
RPM_TOPDIR  := $(CURDIR)/target/rpm
RPM_ARCH     = $(shell rpm --eval '%{_arch}' 2>/dev/null)
RPM_FILE     = $(RPM_TOPDIR)/RPMS/$(RPM_ARCH)/$(PKG_NAME)-$(PKG_VERSION)-$(RELEASE)$(RPM_DIST).$(RPM_ARCH).rpm
# Debian's rpm database knows nothing of the dpkg-installed build tools.
RPM_NODEPS  ?= $(if $(wildcard /etc/debian_version),--nodeps)
# rpm-check sets this to `unshare -n`.
RPMBUILD_WRAP ?=

# Crates only ever compiled for Windows whose bulk is prebuilt import libraries
# (~250 MB); their lib/ directories are emptied in the tarball (see vendor).
WINDOWS_IMPORT_LIBS := windows_*_gnu* windows_*_msvc* winapi-*-pc-windows-gnu*

# Vendors the crates of Cargo.lock into the staging tree. The import libraries
# of Windows-only crates are dropped and their per-file checksums cleared (the
# package checksum that Cargo.lock pins is kept), so cargo still resolves them
# for --frozen without shipping files no Linux build reads.
vendor:
	rm -rf $(STAGE)/vendor
	mkdir -p $(STAGE)/.cargo
	$(CARGO) vendor --locked --quiet $(STAGE)/vendor >/dev/null
	cd $(STAGE)/vendor && for d in $(WINDOWS_IMPORT_LIBS); do \
	  [ -d "$$d/lib" ] || continue; \
	  rm -rf "$$d/lib"/*; \
	  sed -i 's/"files":{[^}]*}/"files":{}/' "$$d/.cargo-checksum.json"; \
	done
	printf '%s\n' \
	  '# Written by make dist: build only from the vendored crates.' \
	  '[source.crates-io]' 'replace-with = "vendored-sources"' '' \
	  '[source.vendored-sources]' 'directory = "vendor"' \
	  > $(STAGE)/.cargo/config.toml

# The file list is git's (tracked and untracked-but-not-ignored files that
# exist), so target/, .git and fuzz artifacts never get in. The spec is written
# with the version and release filled in; it is the tarball's only *.spec, which
# is what `rpmbuild -ta` looks for.
dist:
	rm -rf $(STAGE) $(TARBALL)
	mkdir -p $(STAGE)
	git ls-files -z -co --exclude-standard | \
	  xargs -0 sh -c 'for f; do [ -f "$$f" ] && printf "%s\0" "$$f"; done' sh | \
	  tar -c --null -T - -f - | tar -x -C $(STAGE) -f -
	sed -e 's/@VERSION@/$(PKG_VERSION)/g' -e 's/@RELEASE@/$(RELEASE)/g' \
	  packaging/$(PKG_NAME).spec > $(STAGE)/packaging/$(PKG_NAME).spec
	$(MAKE) --no-print-directory vendor
	tar -C $(DIST_DIR) --sort=name --owner=0 --group=0 --numeric-owner \
	  -cf - $(PKG_NAME)-$(PKG_VERSION) | gzip -n > $(TARBALL)
	rm -rf $(STAGE)
	@echo "$(TARBALL)"

rpm: dist
	rm -rf $(RPM_TOPDIR)
	$(RPMBUILD_WRAP) rpmbuild -ta $(RPM_NODEPS) \
	  --define '_topdir $(RPM_TOPDIR)' --define 'dist $(RPM_DIST)' \
	  $(TARBALL)
	@echo "$(RPM_FILE)"

# Cargo must not be able to reach any network: rpmbuild runs in a network
# namespace of its own where unshare(1) is allowed (root, or user namespaces).
rpm-check:
	@if unshare -n true 2>/dev/null; then \
	  echo "rpm-check: rpmbuild runs with no network (unshare -n)"; wrap="unshare -n"; \
	else \
	  echo "rpm-check: unshare -n not permitted here; the build is offline by --offline --frozen and vendored sources only"; wrap=""; \
	fi; \
	$(MAKE) --no-print-directory rpm RPMBUILD_WRAP="$$wrap"
	packaging/rpm-check.sh $(PKG_VERSION) $(RELEASE)$(RPM_DIST) $(TARBALL) $(RPM_FILE)
