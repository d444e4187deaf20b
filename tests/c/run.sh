#!/usr/bin/env bash
# The C tests of libracaffinity (`make test-c` runs `make lib lib-testing` first).
#
#   1. coverage: every function declared in include/racaffinity.h is called by
#      a C test, and the header has the 18 result codes the tests expect;
#   2. test_api, test_threads, test_vectors: built with -Wall -Wextra -Werror
#      against the TESTING library (it adds racaffinity_test_panic) and run
#      under valgrind (0 errors, 0 definite/indirect leaks); test_vectors
#      replays tests/vectors/*.json, converted by vectors_to_c.py;
#   2b. test_fork, natively (valgrind hides the race it checks): children
#      forked while a thread reads metrics answer their own calls;
#   3. cffi: include/racaffinity.h parses with cffi.FFI().cdef() and the
#      shipped target/release library answers through it (venv: target/venv);
#   4. pkg-config: `make install PREFIX=<tmp>`, then a program built with
#      pkg-config's flags runs, linked shared and statically;
#   4b. CMake: the same install prefix holds lib/cmake/racaffinity; the
#      consumer project tests/c/cmake_consumer (find_package(racaffinity
#      CONFIG REQUIRED), racaffinity::racaffinity and _static) is configured
#      with CMAKE_PREFIX_PATH=<tmp>, built and run;
#   5. tests/c/run_example.sh (the libpq example), when present.
#
# Run from anywhere; works in the repository root. Exits non-zero on any
# failure and ends with a one-line-per-step summary. Logs: target/c-tests/.
# An argument runs only the C tests whose names contain it (steps 1-2).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$PWD
OUT=target/c-tests
TESTING_LIB=target/ffi-testing/release
RELEASE_LIB=target/release
CFFI_VERSION=2.0.0
FILTER=${1:-}
mkdir -p "$OUT"

# Rust prints a panic's message on stderr (test_api provokes one); keep it short.
export RUST_BACKTRACE=0

# --fair-sched=yes: valgrind runs one thread at a time, and its default lock
# let test_threads' spinning workers starve the main thread for 13 minutes
# in one fresh-clone CI run (6 s otherwise).
VALGRIND=(valgrind --fair-sched=yes --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect
          --show-leak-kinds=definite,indirect --num-callers=30)
# Suppressions for Rust-runtime noise that is not a leak, if any is ever
# needed; each entry in the file documents why.
if [[ -f tests/c/valgrind.supp ]]; then VALGRIND+=(--suppressions=tests/c/valgrind.supp); fi

CFLAGS=(-std=c11 -Wall -Wextra -Werror -pthread -Iinclude -g)
LDFLAGS=(-L"$TESTING_LIB" -lracaffinity -Wl,-rpath,"$ROOT/$TESTING_LIB")

declare -a SUMMARY=()
FAILED=0
pass() { SUMMARY+=("PASS  $1"); }
fail() { SUMMARY+=("FAIL  $1"); FAILED=1; echo "FAIL: $1" >&2; }
section() { printf '\n== %s\n' "$1"; }

for lib in "$TESTING_LIB/libracaffinity.so" "$RELEASE_LIB/libracaffinity.so" "$RELEASE_LIB/libracaffinity.a"; do
    if [[ ! -f $lib ]]; then
        echo "run.sh: $lib is missing; run 'make lib lib-testing' (or 'make test-c')" >&2
        exit 2
    fi
done

# ---- 1. coverage -----------------------------------------------------------------
section "coverage of include/racaffinity.h"
if python3 - include/racaffinity.h tests/c/test_api.c tests/c/test_threads.c tests/c/test_vectors.c <<'EOF'
import re, sys
def code(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)      # comments do not count
    return re.sub(r"//[^\n]*", " ", text)
header = code(sys.argv[1])
declared = sorted(set(re.findall(r"\b(racaffinity_\w+)\s*\(", header)))
tests = "".join(code(p) for p in sys.argv[2:])
missing = [f for f in declared if not re.search(r"\b" + f + r"\s*\(", tests)]
codes = re.findall(r"\bRACAFFINITY_RESULT_[A-Z_0-9]+\s*=\s*\d+", header)
print(f"functions: {len(declared) - len(missing)}/{len(declared)} declared in the header are called by the C tests")
print(f"result codes in the header: {len(codes)} (the tests require all 19 to be exercised)")
for f in missing:
    print(f"  not called by any test: {f}")
sys.exit(1 if missing or len(declared) == 0 or len(codes) != 19 else 0)
EOF
then pass "coverage: every header function called, 19 result codes"
else fail "coverage of the header (see above)"; fi

# ---- 2. C tests under valgrind ------------------------------------------------------
section "C tests (testing library, valgrind)"
# The topology feed's test needs a real etcd cluster: 3 members on ports of
# this script's own, destroyed at the end.
export RACAFF_ETCD_BASE_PORT=${RACAFF_C_ETCD_BASE_PORT:-24990}
export RACAFF_ETCD_DIR=/tmp/racaffinity-etcd-c-$RACAFF_ETCD_BASE_PORT
if tests/cluster/etcdnodes start 3 >"$OUT/etcd.log" 2>&1; then
    trap 'tests/cluster/etcdnodes destroy >/dev/null 2>&1 || true' EXIT
    eval "$(tests/cluster/etcdnodes env)"
    export RACAFF_FEED_ENDPOINTS=$RACAFF_ETCD_ENDPOINTS
else
    fail "a 3-member etcd cluster for the feed test (log: $OUT/etcd.log)"
fi
if python3 tests/c/vectors_to_c.py "$OUT/vectors.txt"; then :; else fail "vectors_to_c.py"; fi

for t in test_api test_threads test_vectors; do
    if ! cc "${CFLAGS[@]}" "tests/c/$t.c" -o "$OUT/$t" "${LDFLAGS[@]}" 2>"$OUT/$t.build.log"; then
        cat "$OUT/$t.build.log" >&2
        fail "$t: build"
        continue
    fi
    args=()
    if [[ $t == test_vectors ]]; then args=("$OUT/vectors.txt")
    elif [[ -n $FILTER ]]; then args=("$FILTER"); fi
    start=$SECONDS
    "${VALGRIND[@]}" --log-file="$OUT/$t.valgrind.log" "$OUT/$t" "${args[@]}" >"$OUT/$t.log" 2>&1
    rc=$?
    secs=$((SECONDS - start))
    # The test's own verdicts: failures in full, then its summary lines.
    grep -v -E '^ok  ' "$OUT/$t.log" | grep -v -E '^(thread .* panicked at .*|racaffinity_test_panic was called|note: run with.*|)$' || true
    errors=$(grep -E 'ERROR SUMMARY' "$OUT/$t.valgrind.log" | sed -E 's/^==[0-9]+== //')
    leaks=$(grep -E '(definitely|indirectly) lost:' "$OUT/$t.valgrind.log" | sed -E 's/^==[0-9]+== +//' | paste -sd';' - | sed 's/;/; /g')
    echo "  valgrind: ${errors:-no summary}; ${leaks:-no leaks reported (all freed)}  [${secs}s]"
    if [[ $rc -eq 0 ]]; then
        pass "$t under valgrind ($(grep -E "^$t: " "$OUT/$t.log" | sed -E "s/^$t: //"))"
    else
        grep -E '^==[0-9]+== +(Invalid|Conditional|Use of|Mismatched|Syscall|Source and destination|Process terminating|(definitely|indirectly) lost: [1-9])' \
            "$OUT/$t.valgrind.log" | head -20 >&2 || true
        fail "$t (exit $rc; logs: $OUT/$t.log, $OUT/$t.valgrind.log)"
    fi
done

tests/cluster/etcdnodes destroy >/dev/null 2>&1 || echo "warning: 'etcdnodes destroy' failed" >&2
trap - EXIT

# ---- 2b. fork() while another thread reads metrics, natively ------------------------
# Not under valgrind: it runs one thread at a time, so the reading thread is
# rarely inside the library when the main thread forks (and a child of a
# valgrind process is valgrind too). Each child has its own timeout.
section "C fork test (testing library, native)"
t=test_fork
if [[ -z $FILTER || $t == *"$FILTER"* ]]; then
    if ! cc "${CFLAGS[@]}" "tests/c/$t.c" -o "$OUT/$t" "${LDFLAGS[@]}" 2>"$OUT/$t.build.log"; then
        cat "$OUT/$t.build.log" >&2
        fail "$t: build"
    elif "$OUT/$t" >"$OUT/$t.log" 2>&1; then
        pass "$t natively ($(grep -E "^$t: " "$OUT/$t.log" | sed -E "s/^$t: //"))"
    else
        grep -v -E '^ok  ' "$OUT/$t.log" >&2 || true
        fail "$t (log: $OUT/$t.log)"
    fi
fi

# ---- 3. cffi parse of the header -----------------------------------------------------
section "cffi parse of include/racaffinity.h"
cffi_ok=1
if [[ ! -x target/venv/bin/python ]]; then
    python3 -m venv target/venv >"$OUT/venv.log" 2>&1 || { cat "$OUT/venv.log" >&2; cffi_ok=0; }
fi
if [[ $cffi_ok -eq 1 ]] && ! target/venv/bin/python -c "import cffi, sys; sys.exit(cffi.__version__ != '$CFFI_VERSION')" 2>/dev/null; then
    target/venv/bin/python -m pip install -q "cffi==$CFFI_VERSION" >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log" >&2; cffi_ok=0; }
fi
if [[ $cffi_ok -eq 1 ]] && target/venv/bin/python tests/c/cffi_parse.py --self-test &&
   target/venv/bin/python tests/c/cffi_parse.py --lib "$RELEASE_LIB/libracaffinity.so"; then
    pass "cffi $CFFI_VERSION: cdef() of the header, dlopen of $RELEASE_LIB/libracaffinity.so"
else
    fail "cffi parse (tests/c/cffi_parse.py)"
fi

# ---- 4. pkg-config after make install ------------------------------------------------
section "make install + pkg-config"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/racaffinity-c.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
pkg_ok=1
if ! make --no-print-directory install PREFIX="$prefix" >"$OUT/install.log" 2>&1; then
    tail -20 "$OUT/install.log" >&2
    pkg_ok=0
fi
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if [[ $pkg_ok -eq 1 ]]; then
    cflags=$(pkg-config --cflags racaffinity) && libs=$(pkg-config --libs racaffinity) &&
        static_libs=$(pkg-config --libs racaffinity-static) || pkg_ok=0
fi
if [[ $pkg_ok -eq 1 ]]; then
    echo "  pkg-config --cflags --libs: $cflags $libs"
    echo "  pkg-config --libs racaffinity-static: $static_libs"
    # Shared: found through LD_LIBRARY_PATH, and it must be the installed copy.
    # shellcheck disable=SC2086
    if cc -std=c11 -Wall -Wextra -Werror tests/c/pkgconfig_app.c $cflags $libs -o "$tmp/app_shared" &&
       LD_LIBRARY_PATH=$prefix/lib "$tmp/app_shared" &&
       # grep without -q reads all of ldd's output: an early exit would kill
       # ldd with SIGPIPE, which pipefail reports as a failure.
       LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/app_shared" | grep "$prefix/lib/libracaffinity.so" >/dev/null; then
        echo "  shared: ok (resolves $prefix/lib/libracaffinity.so)"
    else
        echo "  shared build or run failed" >&2
        pkg_ok=0
    fi
    # Static: racaffinity-static.pc's flags as they are (docs/c.md), and the
    # program runs with the shared library gone from the prefix.
    # shellcheck disable=SC2086
    if cc -std=c11 -Wall -Wextra -Werror tests/c/pkgconfig_app.c $cflags $static_libs -o "$tmp/app_static" &&
       ! readelf -d "$tmp/app_static" | grep 'NEEDED.*libracaffinity' >/dev/null &&
       mv "$prefix/lib/libracaffinity.so" "$tmp/moved.so" &&
       env -u LD_LIBRARY_PATH "$tmp/app_static" && mv "$tmp/moved.so" "$prefix/lib/libracaffinity.so"; then
        echo "  static: ok (no libracaffinity.so needed at run time)"
    else
        echo "  static build or run failed" >&2
        pkg_ok=0
    fi
fi
if [[ $pkg_ok -eq 1 ]]; then pass "make install + pkg-config (shared and static)"
else fail "make install + pkg-config (log: $OUT/install.log)"; fi

# ---- 4b. CMake package after make install -------------------------------------------
section "make install + CMake find_package"
cmake_ok=1
if ! command -v cmake >/dev/null; then
    echo "  cmake not found (Debian package cmake)" >&2
    cmake_ok=0
elif [[ $pkg_ok -ne 1 ]]; then
    echo "  skipped: make install failed above" >&2
    cmake_ok=0
else
    bash tests/c/cmake_package.sh "$prefix" || cmake_ok=0
fi
if [[ $cmake_ok -eq 1 ]]; then pass "make install + CMake package (racaffinity::racaffinity, racaffinity::racaffinity_static)"
else fail "make install + CMake package (log: $OUT/cmake.log)"; fi

# ---- 5. the libpq example ------------------------------------------------------------
example_rc=0
if [[ -f tests/c/run_example.sh ]]; then
    section "tests/c/run_example.sh"
    bash tests/c/run_example.sh
    example_rc=$?
    if [[ $example_rc -eq 0 ]]; then pass "tests/c/run_example.sh"
    else fail "tests/c/run_example.sh (exit $example_rc)"; fi
fi

section "summary"
printf '%s\n' "${SUMMARY[@]}"
if [[ $FAILED -ne 0 ]]; then
    echo "tests/c/run.sh: FAILED"
    if [[ $example_rc -ne 0 ]]; then exit "$example_rc"; fi
    exit 1
fi
echo "tests/c/run.sh: all C tests passed"
exit 0
