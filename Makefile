# choria-provisioner build and test entry points.
CARGO ?= cargo

.PHONY: all build release test lint unit clean nats-server

all: build

build:
	$(CARGO) build

release:
	$(CARGO) build --release

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

test: lint
	$(CARGO) test

clean:
	$(CARGO) clean

include packaging/rpm.mk
