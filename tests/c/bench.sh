#!/usr/bin/env bash
# bench.sh - build tests/c/bench.c (-O2) against the testing build of
# libracaffinity (target/ffi-testing/release: the shipped code plus the
# test-only exports) and run it: one process measures a bare __thread read, a
# no-op call into the library, a pinned-thread route and key routes through
# the C ABI, and the same routes as a Rust loop inside the library
# (racaffinity_test_route_loop), interleaved round by round, so C - Rust is
# taken within one process. Prints markdown tables and `CBENCH*` lines.
# Runs in ~5 s.
#
# usage: tests/c/bench.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
OUT="$ROOT/target/c-bench"
LIB_DIR="$ROOT/target/ffi-testing/release"
CC=${CC:-cc}

[[ $# -eq 0 ]] || { echo "usage: $0" >&2; exit 64; }

command -v "$CC" >/dev/null || { echo "bench.sh: no C compiler '$CC' (apt-get install gcc)" >&2; exit 2; }
# Always rebuilt (a no-op when fresh): a stale testing library would time old code.
make -s lib-testing >&2

mkdir -p "$OUT"
"$CC" -std=c11 -Wall -Wextra -Werror -O2 -Iinclude tests/c/bench.c -o "$OUT/bench" \
    -L"$LIB_DIR" -Wl,-rpath,"$LIB_DIR" -lracaffinity

"$OUT/bench" | tee "$OUT/bench.out"
