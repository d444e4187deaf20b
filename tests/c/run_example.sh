#!/usr/bin/env bash
# run_example.sh - build tests/c/example_libpq.c against the shipped
# libracaffinity (target/release) and libpq, start 3 local PostgreSQL nodes
# with tests/cluster/pgnodes, run the example under valgrind, stop the nodes.
#
# usage: tests/c/run_example.sh            (from anywhere; works as root)
#
# environment:
#   RACAFF_VALGRIND=0      run without valgrind (quicker while iterating)
#   RACAFF_PG_BASE_PORT    port of node 1 (default 25461, so the example's nodes
#                          never collide with `make demo`'s on 55431..55433, and below
#                          the ephemeral port range: see the note at "nodes")
#   RACAFF_PG_DIR          data root (default /tmp/racaffinity-pg-cexample-<hash>)
#   CC                     C compiler (default cc)
#
# Exit status: the example's (valgrind errors or definite/indirect leaks make
# it 1); 2 when a prerequisite is missing or the nodes cannot start.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
PGNODES="$ROOT/tests/cluster/pgnodes"
OUT="$ROOT/target/c-example"
LIB_DIR="$ROOT/target/release"
CC=${CC:-cc}

die() { echo "run_example.sh: $*" >&2; exit 2; }

# ---- prerequisites -----------------------------------------------------------
command -v "$CC" >/dev/null || die "no C compiler '$CC' (apt-get install gcc)"
command -v pg_config >/dev/null \
    || die "pg_config not found: install the libpq development files with: apt-get install libpq-dev"
PQ_INC=$(pg_config --includedir)
PQ_LIB=$(pg_config --libdir)
[[ -f $PQ_INC/libpq-fe.h ]] \
    || die "libpq-fe.h not found in $PQ_INC: install it with: apt-get install libpq-dev"
[[ -e $PQ_LIB/libpq.so || $(ldconfig -p 2>/dev/null) == *"libpq.so "* ]] \
    || die "libpq.so not found (in $PQ_LIB or the linker cache): install it with: apt-get install libpq-dev"
USE_VALGRIND=${RACAFF_VALGRIND:-1}
if [[ $USE_VALGRIND != 0 ]]; then
    command -v valgrind >/dev/null || die "valgrind not found: apt-get install valgrind (or set RACAFF_VALGRIND=0)"
fi
if [[ ! -f $LIB_DIR/libracaffinity.so ]]; then
    echo "run_example.sh: $LIB_DIR/libracaffinity.so is missing; building it with 'make lib'"
    make -s lib
fi

# ---- build -------------------------------------------------------------------
mkdir -p "$OUT"
"$CC" -std=c11 -Wall -Wextra -Werror -pthread -O1 -g \
    -Iinclude -I"$PQ_INC" \
    tests/c/example_libpq.c -o "$OUT/example_libpq" \
    -L"$LIB_DIR" -Wl,-rpath,"$LIB_DIR" -lracaffinity -L"$PQ_LIB" -lpq
"$CC" -std=c11 -Wall -Wextra -Werror -O1 -g \
    -Iinclude -I"$PQ_INC" \
    tests/c/example_replay.c -o "$OUT/example_replay" \
    -L"$LIB_DIR" -Wl,-rpath,"$LIB_DIR" -lracaffinity -L"$PQ_LIB" -lpq
# The example must use the library it was built against, not an installed copy.
resolved=$(ldd "$OUT/example_libpq")
[[ $resolved == *"$LIB_DIR/libracaffinity.so"* ]] \
    || die "example_libpq does not resolve libracaffinity.so to $LIB_DIR"

# ---- nodes -------------------------------------------------------------------
# Own ports and data root: another checkout's or `make demo`'s nodes keep running.
# The ports sit below Linux's ephemeral range (32768-60999 by default): a port
# inside it can be held by a client socket in TIME_WAIT (this example opens
# ~200 connections), and then `pgnodes restart 2` fails with "could not bind
# ... Address already in use" even though nothing listens there.
export RACAFF_PG_BASE_PORT=${RACAFF_PG_BASE_PORT:-25461}
export RACAFF_PG_DIR=${RACAFF_PG_DIR:-/tmp/racaffinity-pg-cexample-$(printf '%s' "$ROOT" | sha1sum | cut -c1-8)}
export RACAFF_PGNODES="$PGNODES"

cleanup() {
    local rc=$?
    # A run that died between the kill and the restart leaves node 2 down:
    # bring it back so its prepared state is recovered, then stop everything.
    if [[ $("$PGNODES" status 2>/dev/null) == *"node2 down"* ]]; then
        "$PGNODES" restart 2 >/dev/null 2>&1 || true
    fi
    "$PGNODES" stop >/dev/null 2>&1 || echo "run_example.sh: warning: 'pgnodes stop' failed" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$PGNODES" start 3 >/dev/null || die "could not start the PostgreSQL nodes (see above)"
eval "$("$PGNODES" env)"

# ---- run -----------------------------------------------------------------------
status=0
if [[ $USE_VALGRIND != 0 ]]; then
    VLOG="$OUT/valgrind.log"
    valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect --log-file="$VLOG" \
        "$OUT/example_libpq" || status=$?
    echo
    echo "valgrind ($VLOG):"
    # The main process's summary (children, e.g. system()'s shell, are not traced).
    sed -n -e 's/^==[0-9]*== //' -e '/HEAP SUMMARY/,$p' "$VLOG" | grep -v '^$' | sed 's/^/  /'
    if ! grep -q 'ERROR SUMMARY: 0 errors' "$VLOG"; then
        echo "run_example.sh: valgrind reported errors:" >&2
        cat "$VLOG" >&2
        (( status != 0 )) || status=1
    fi
else
    "$OUT/example_libpq" || status=$?
fi

# The replay example (docs/continuity.md): a request killed before COMMIT is
# replayed once elsewhere, a lost COMMIT reply is found committed, a COMMIT
# held on its node is forced and found committed (RACAFF_INFLIGHT_ROUNDS
# times, default 10), a request that committed by its own text or set
# session state before BEGIN is not replayed, a constraint violation is
# never replayed.
echo
if [[ $USE_VALGRIND != 0 ]]; then
    RLOG="$OUT/valgrind-replay.log"
    valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect --log-file="$RLOG" \
        "$OUT/example_replay" || status=$?
    grep -q 'ERROR SUMMARY: 0 errors' "$RLOG" || { echo "run_example.sh: valgrind (replay) reported errors:" >&2; cat "$RLOG" >&2; (( status != 0 )) || status=1; }
else
    "$OUT/example_replay" || status=$?
fi
exit "$status"
