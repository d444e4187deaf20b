# racaffinity — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
PGNODES := tests/cluster/pgnodes
PREFIX ?= /usr/local
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

# The header generator, pinned; installed under target/tools when missing.
CBINDGEN_VERSION := 0.29.4
TOOLS := $(CURDIR)/target/tools
CBINDGEN := $(TOOLS)/bin/cbindgen
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ := $(TOOLS)/bin/cargo-fuzz
LIB_DIR := target/release
TESTING_LIB_DIR := target/ffi-testing/release

.PHONY: failure-matrix fuzz test-fuzz cargo-fuzz-tool demo-rust cbindgen-tool toxiproxy-tool all build lib lib-testing header check-header check-symbols install demo test test-rust test-vectors \
	test-cluster test-demo test-soak soak test-c test-python test-java jar lint bench bench-scaling memory clean help

all: build

help:
	@echo "make demo    - C, Java and Python processes share 2PC transactions over 3 local PostgreSQL nodes; crash, failover"
	@echo "make test    - every test: Rust, C (valgrind), Python, Java, node harness smoke test, demo checks"
	@echo "make bench   - every benchmark (Rust, C, Java, Python; short mode) and one table of ratios"
	@echo "make bench-scaling - route cost by node count and registry size, RSS of 1M sessions/contexts, SVG plot"
	@echo "make memory  - memory of 1M live transaction affinities"
	@echo "make fuzz    - every cargo-fuzz target for FUZZ_SECONDS each (default 300), one after another"

build:
	$(CARGO) build --release --workspace

# libracaffinity.so / .a: what C links, the JAR bundles and Python loads.
lib:
	$(CARGO) build --release -p racaffinity-ffi

# The same library plus the test-only panic export, in its own target dir so
# the shipped library never carries it.
lib-testing:
	$(CARGO) build --release -p racaffinity-ffi --features testing --target-dir target/ffi-testing

$(CBINDGEN):
	$(CARGO) install cbindgen --version $(CBINDGEN_VERSION) --locked --root $(TOOLS)

cbindgen-tool: $(CBINDGEN)
	@$(CBINDGEN) --version | grep -q ' $(CBINDGEN_VERSION)$$' || \
	  $(CARGO) install cbindgen --version $(CBINDGEN_VERSION) --locked --force --root $(TOOLS)

# cargo-fuzz (libFuzzer), pinned like cbindgen; its targets need a nightly
# toolchain, which `make fuzz`/`test-fuzz` check for first.
$(CARGO_FUZZ):
	$(CARGO) install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --root $(TOOLS)

cargo-fuzz-tool: $(CARGO_FUZZ)
	@$(CARGO_FUZZ) --version | grep -q ' $(CARGO_FUZZ_VERSION)$$' || \
	  $(CARGO) install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --force --root $(TOOLS)

# Toxiproxy for the fault tests: the version is pinned in tests/cluster/faults,
# which builds it with 'go install' under target/tools/bin when missing (and
# does so by itself on first use, so this target is only a convenience).
toxiproxy-tool:
	tests/cluster/faults install

header: cbindgen-tool
	$(CBINDGEN) -q --config rust/ffi/cbindgen.toml --crate racaffinity-ffi --output include/racaffinity.h rust/ffi

check-header: cbindgen-tool
	@mkdir -p target
	$(CBINDGEN) -q --config rust/ffi/cbindgen.toml --crate racaffinity-ffi --output target/racaffinity.h.check rust/ffi
	@diff -u include/racaffinity.h target/racaffinity.h.check || \
	  { echo "include/racaffinity.h is stale: run 'make header' and commit it"; exit 1; }

# Only racaffinity_* (and, later, Java_*) may be exported.
check-symbols: lib
	@bad=$$(nm -D --defined-only $(LIB_DIR)/libracaffinity.so | awk '{print $$3}' | grep -v -E '^(racaffinity_|Java_)' || true); \
	if [ -n "$$bad" ]; then echo "unexpected exported symbols:"; echo "$$bad"; exit 1; fi; \
	echo "exports: $$(nm -D --defined-only $(LIB_DIR)/libracaffinity.so | wc -l) symbols, all racaffinity_* or Java_*"

install: lib
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 0755 $(LIB_DIR)/libracaffinity.so $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 $(LIB_DIR)/libracaffinity.a $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 include/racaffinity.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' racaffinity.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/racaffinity.pc

# The main job: a C, a Java and a Python client, one process each, run their
# own branches of the same global transactions over 3 local PostgreSQL nodes;
# a driver (demo/run.py, the TM) commits with 2PC. Then the same workload
# without affinity, and a real crash of a node with FAN, failover and recovery.
# Chart: target/demo/branches.svg.
demo: lib jar
	demo/build.sh
	target/pyenv/bin/python demo/run.py

# The Rust-only walk-through: real 2PC, sessions, data keys, kill -9 and FAN.
demo-rust: build
	@trap '$(PGNODES) stop >/dev/null' EXIT; \
	$(PGNODES) start 3 >/dev/null; \
	eval "$$($(PGNODES) env)"; \
	$(CARGO) run --quiet --release -p racaffinity --example demo

test: lint check-header check-symbols test-rust test-vectors test-fuzz test-c test-python test-java test-cluster test-demo test-soak failure-matrix
	@echo "make test: all tests passed"

# The XA failure matrix of both halves (written by test-java and test-python
# under target/failure-matrix/): one table; fails if any cell does not hold.
failure-matrix:
	python3 tools/failure_matrix.py target/failure-matrix

# Rust format and lints, the core's docs, the Java natives against the
# JNI exports (tools/check_jni_exports.py: both directions, parameters), and
# the sync Python pools and tests against their async source
# (tools/async_to_sync.py).
lint:
	$(CARGO) fmt --all -- --check
	@if $(CARGO) clippy --version >/dev/null 2>&1; then \
	  $(CARGO) clippy --workspace --all-targets --quiet -- -D warnings; \
	else echo "cargo clippy not installed: skipping the lint (rustup component add clippy)"; fi
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p racaffinity -p racaffinity-oracle --quiet
	python3 tools/check_jni_exports.py
	python3 tools/async_to_sync.py --check

# rust/oracle's tests start the local nodes themselves; stop them afterwards.
test-rust:
	@trap '$(PGNODES) stop >/dev/null' EXIT; \
	$(CARGO) test --workspace --all-targets && $(CARGO) test --workspace --doc

test-vectors:
	python3 tests/vectors/generate.py --check

test-cluster: toxiproxy-tool
	tests/cluster/smoke.sh

# racaffinity.jar: the Java API and JDBC DataSource, bundling libracaffinity.
jar: lib
	mvn -q -f java package -Dmaven.test.skip=true

# Java tests: vectors, JDBC/JMX/failover over local nodes, virtual threads on a
# JDK >= 21, the panic test, and the packaged jar run on its own.
test-java: lib lib-testing
	java/run_tests.sh

# pip install ./python into target/pyenv, then pytest against local nodes.
test-python: lib
	bash python/run_tests.sh

# C tests under valgrind, the cffi parse of the header, the pkg-config
# install, and the libpq example over local nodes.
test-c: lib lib-testing
	tests/c/run.sh

test-demo: demo demo-rust
	tests/cluster/demo_stray_prepared.sh

# Fuzzing (fuzz/, docs/fuzzing.md): the config parser, FAN/RLB events on a
# cluster, C-ABI call sequences against a model, and the rendezvous hash
# against the Python reference. `make fuzz` runs each target FUZZ_SECONDS
# (default 5 minutes), `make test-fuzz` 20 seconds, one after another with one
# libFuzzer job. Without a nightly toolchain both say so and succeed.
FUZZ_SECONDS ?= 300
NO_NIGHTLY_MSG = no nightly toolchain ('$(CARGO) +nightly' fails): skipping the fuzz targets (rustup toolchain install nightly)
fuzz:
	@if ! $(CARGO) +nightly --version >/dev/null 2>&1; then echo "make fuzz: $(NO_NIGHTLY_MSG)"; exit 0; fi; \
	$(MAKE) --no-print-directory cargo-fuzz-tool && PATH="$(TOOLS)/bin:$$PATH" CARGO=$(CARGO) tools/fuzz.sh $(FUZZ_SECONDS)

test-fuzz:
	@if ! $(CARGO) +nightly --version >/dev/null 2>&1; then echo "make test-fuzz: $(NO_NIGHTLY_MSG)"; exit 0; fi; \
	$(MAKE) --no-print-directory cargo-fuzz-tool && PATH="$(TOOLS)/bin:$$PATH" CARGO=$(CARGO) tools/fuzz.sh 20

# The chaos soak (demo/soak.py): the demo's C, Java and Python clients and a
# driver run a mixed workload (2PC across the three processes, sessions, data
# keys, pinned work) over 3 nodes behind the fault proxies while a seeded chaos
# schedule kills, blackholes, drains, slows and resets nodes and sends FAN/RLB
# lines to each process at a different moment. Fails on any invariant
# violation. SOAK_SECONDS (default 600), SOAK_SEED (replay a run). Table and
# chart: target/soak/. The trap stops the proxies and nodes whatever happens.
SOAK_SECONDS ?= 600
soak: lib jar toxiproxy-tool
	demo/build.sh
	@trap 'tests/cluster/faults stop >/dev/null 2>&1 || true; $(PGNODES) stop >/dev/null 2>&1 || true' EXIT; \
	SOAK_SECONDS=$(SOAK_SECONDS) target/pyenv/bin/python demo/soak.py

# The soak's short form inside `make test`: 90 seconds, same checks.
test-soak:
	$(MAKE) soak SOAK_SECONDS=90

# Every benchmark in short mode, one after the other (never in parallel on a
# small box), then ONE table of ratios against their baselines. To put it into
# docs/benchmarks.md: python3 tools/perf_table.py --write-readme docs/benchmarks.md
BENCH_OUT := target/bench
bench: lib
	@mkdir -p $(BENCH_OUT)
	RACAFF_BENCH_QUICK=1 $(CARGO) bench -p racaffinity --bench routing 2>&1 | tee $(BENCH_OUT)/criterion.out
	tests/c/bench.sh | tee $(BENCH_OUT)/c.out
	test -x target/pyenv/bin/python || python3 -m venv target/pyenv
	target/pyenv/bin/python -m pip install --quiet --disable-pip-version-check "./python[test]"
	target/pyenv/bin/python python/bench.py | tee $(BENCH_OUT)/python.out
	java/run_bench.sh | tee $(BENCH_OUT)/java.out
	$(MAKE) --no-print-directory bench-scaling
	@echo
	python3 tools/perf_table.py --python $(BENCH_OUT)/python.out | tee $(BENCH_OUT)/table.md

# How route cost grows with nodes and live registry entries, and RSS for 1M
# sessions/contexts (rust/core/examples/scaling.rs); the plot goes to
# $(BENCH_OUT)/scaling.svg (docs/performance.md shows a committed copy).
bench-scaling:
	@mkdir -p $(BENCH_OUT)
	$(CARGO) run --quiet --release -p racaffinity --example scaling | tee $(BENCH_OUT)/scaling.out
	python3 tools/scaling_svg.py $(BENCH_OUT)/scaling.out $(BENCH_OUT)/scaling.svg

memory:
	$(CARGO) run --quiet --release -p racaffinity --example memory

clean:
	-$(PGNODES) stop
	-mvn -q -f java clean
	$(CARGO) clean
