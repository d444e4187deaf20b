# racaffinity — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
PGNODES := tests/cluster/pgnodes

.PHONY: all build demo test test-rust test-vectors test-cluster test-demo lint bench memory clean help

all: build

help:
	@echo "make demo    - start 3 local PostgreSQL nodes and run the routing/failover demo"
	@echo "make test    - every test: Rust unit/property/vector tests, node harness smoke test, demo check"
	@echo "make bench   - criterion benchmarks (short mode) and the ratio table"
	@echo "make memory  - memory of 1M live transaction affinities"

build:
	$(CARGO) build --release --workspace

# The main job: real 2PC transactions, sessions and keys over local nodes, a
# real crash announced by a FAN event, and the failover.
demo: build
	@trap '$(PGNODES) stop >/dev/null' EXIT; \
	$(PGNODES) start 3 >/dev/null; \
	eval "$$($(PGNODES) env)"; \
	$(CARGO) run --quiet --release -p racaffinity --example demo

test: lint test-rust test-vectors test-cluster test-demo
	@echo "make test: all tests passed"

lint:
	$(CARGO) fmt --all -- --check
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p racaffinity --quiet

test-rust:
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

test-vectors:
	python3 tests/vectors/generate.py --check

test-cluster:
	tests/cluster/smoke.sh

test-demo: demo

bench:
	RACAFF_BENCH_QUICK=1 $(CARGO) bench -p racaffinity --bench routing
	python3 rust/core/benches/summary.py

memory:
	$(CARGO) run --quiet --release -p racaffinity --example memory

clean:
	-$(PGNODES) stop
	$(CARGO) clean
