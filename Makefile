# choria-provisioner build and test entry points. `make help` lists them.
CARGO ?= cargo

.PHONY: all help build release test ci lint unit nats-server clean demo bench bench-approvals recovery man fuzz fuzz-smoke stress

all: build

help:
	@echo "make build     debug build"
	@echo "make release   optimised, stripped binary in target/release/"
	@echo "make test      lint + every test (installs a nats-server if none is found)"
	@echo "make ci        .ci/run on a clean clone of HEAD, in a PID namespace as on CI"
	@echo "make demo      provision 200 simulated nodes on a local nats-server"
	@echo "               (BROKER=issuer or BROKER=mtls: through a Choria broker front end)"
	@echo "make bench     provision 10,000 simulated nodes and report speed and memory"
	@echo "               (INSTANCES=N: N active-active provisioners share the fleet)"
	@echo "make bench-approvals  2 and 3 instances sharing 50,000 approval records"
	@echo "make recovery  the broker-restart scenario of tests/recovery.rs, 10 runs"
	@echo "make lint      cargo fmt --check and clippy with warnings as errors"
	@echo "make fuzz      every cargo-fuzz target (10 min network-facing, 2 min others)"
	@echo "make stress    the driver's contract stress test, 4 million replies a seed, 8 seeds,"
	@echo "               and 200,000 random histories of the approvals merge rule"
	@echo "make dist      source tarball with vendored crates (air-gapped builds)"
	@echo "make rpm       RPM from that tarball into target/rpm/"
	@echo "make man       regenerate packaging/choria-provisioner.8 from the CLI's help"
	@echo "make clean     remove build output"

build:
	$(CARGO) build --features sim

release:
	$(CARGO) build --release

# fmt, clippy, and doc links that resolve and point at public items (cargo doc, ~10 s).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --features sim,fuzzing -- -D warnings
	@# The daemon as the package builds it: no item kept only for the simulator or tests.
	$(CARGO) clippy --lib --bins -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --features sim,fuzzing
	scripts/regen-patch.sh --check
	@# The bench helper as scripts/bench.sh builds it (no libc; x86-64 and aarch64),
	@# with the toolchain's clippy-driver (a rustup proxy beside cargo-clippy).
	@driver=$$(command -v clippy-driver || true); \
	case "$$(uname -m)" in x86_64|aarch64) \
	  if [ -z "$$driver" ]; then echo "lint: no clippy-driver on PATH: bench helper (nolibc) not linted"; \
	  else mkdir -p target && "$$driver" --edition 2021 --cfg nolibc -C panic=abort \
	    --emit=metadata -o target/bench_helper.rmeta -D warnings examples/bench_helper.rs; fi;; \
	esac

nats-server:
	@scripts/ensure-nats-server.sh

# Tests start their own nats-server on a free 127.0.0.1 port; this finds or installs
# the binary first so a fresh machine needs nothing by hand.
# `fuzzing` adds tests/fuzz_smoke.rs (every fuzz seed and regression input replayed on
# stable); then a few seconds of libFuzzer per target when nightly and cargo-fuzz exist.
test: lint
	NATS_SERVER="$$(scripts/ensure-nats-server.sh)" $(CARGO) test --features sim,fuzzing
	fuzz/run.sh smoke

# CI as it runs: `.ci/run` on a clean clone of the last commit (what is not committed
# is not tested), inside a new PID namespace where, as on the CI machine, the tests'
# session and process group ids read 0 (unshare without root maps the user; where
# user namespaces are refused it runs without one and says so). The clone's build
# goes to target/ci-build, kept between runs; the nats-server found here is reused.
CI_CLONE ?= target/ci-clone
ci:
	rm -rf $(CI_CLONE) && git clone -q . $(CI_CLONE)
	export NATS_SERVER="$$(scripts/ensure-nats-server.sh)" CARGO_TARGET_DIR="$(CURDIR)/target/ci-build"; \
	cd $(CI_CLONE) && if unshare --map-current-user -p -f --mount-proc true 2>/dev/null; then \
	  unshare --map-current-user -p -f --mount-proc bash .ci/run; \
	else echo "ci: user namespaces refused here: running without a PID namespace"; bash .ci/run; fi

# Every fuzz target, one at a time (fuzz/README.md); installs cargo-fuzz into
# target/tools if missing. Seconds per target are overridable.
FUZZ_SECONDS_NET ?= 600
FUZZ_SECONDS ?= 120
fuzz:
	FUZZ_SECONDS_NET=$(FUZZ_SECONDS_NET) FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh campaign

fuzz-smoke:
	fuzz/run.sh smoke

# The driver's contract (src/node/driver.rs) under a longer race than make test runs:
# replies, timer wakes and workers on shared cells, each seed replayable with
# DRIVER_STRESS_SEED=<seed> cargo test --lib node::driver::tests::contract.
STRESS_REPLIES ?= 4000000
# The approvals merge rule's random histories (make test runs 1,500).
APPROVALS_PROPERTY_CASES ?= 200000
stress:
	for seed in 1 2 3 4 5 6 7 8; do \
	  DRIVER_STRESS_SEED=$$seed DRIVER_STRESS_REPLIES=$(STRESS_REPLIES) \
	    $(CARGO) test --release --lib node::driver::tests::contract -- --nocapture || exit 1; \
	done
	APPROVALS_PROPERTY_CASES=$(APPROVALS_PROPERTY_CASES) \
	  $(CARGO) test --release --lib fleet::approvals::merge -- --nocapture

# tests/recovery.rs's broker restart (100 nodes booting, the broker restarted once
# 30 are provisioned, nodes back 0 to 20 s after it) RECOVERY_RUNS times in a row.
RECOVERY_RUNS ?= 10
recovery:
	RECOVERY_RUNS=$(RECOVERY_RUNS) NATS_SERVER="$$(scripts/ensure-nats-server.sh)" \
	  $(CARGO) test --features sim,fuzzing --test recovery nodes_that_come_back -- --nocapture

# The README's first command: 200 simulated nodes provisioned on this machine.
demo: build
	scripts/demo.sh

# 10,000 simulated nodes with a compiled helper; prints throughput, latency, CPU, RSS.
bench:
	scripts/bench.sh

# The site's instances sharing a big approvals table (release build): two started
# together and three staggered, the first with APPROVAL_SYNC_RECORDS records; prints
# when they converged and what idling cost (make test runs 5,000). Then 40 approved
# nodes admitted with and without 64 clients polling the pending pages.
APPROVAL_SYNC_RECORDS ?= 50000
bench-approvals:
	APPROVAL_SYNC_RECORDS=$(APPROVAL_SYNC_RECORDS) NATS_SERVER="$$(scripts/ensure-nats-server.sh)" \
	  $(CARGO) test --release --features sim --test approval big_table -- --nocapture --test-threads 1
	APPROVAL_SYNC_RECORDS=$(APPROVAL_SYNC_RECORDS) NATS_SERVER="$$(scripts/ensure-nats-server.sh)" \
	  $(CARGO) test --release --features sim --test approval pollers -- --ignored --nocapture

# The man page's SYNOPSIS, OPTIONS and COMMANDS come from the binary's --help, the
# rest from packaging/choria-provisioner.8.in; `make test` fails when the committed
# page differs from what tests/manpage.rs makes of them.
man:
	UPDATE_MAN=1 $(CARGO) test --features sim --test manpage the_committed_man_page_is_generated_from_the_cli_help

clean:
	$(CARGO) clean

include packaging/rpm.mk
