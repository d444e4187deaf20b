#!/usr/bin/env bash
# `make demo-rust` leaves nodes the user started running (it kills and restarts
# node 2 itself, so they must be up again afterwards), and stops the nodes it
# had to start itself. Uses the caller's RACAFF_PG_BASE_PORT / RACAFF_PG_DIR,
# else its own set, so it never touches nodes another step uses.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
export RACAFF_PG_BASE_PORT=${RACAFF_PG_BASE_PORT:-55461}
export RACAFF_PG_DIR=${RACAFF_PG_DIR:-/tmp/racaffinity-pg-demo-rust-$(printf '%s' "$ROOT" | sha1sum | cut -c1-8)}
PGNODES=tests/cluster/pgnodes
trap '$PGNODES stop >/dev/null 2>&1 || true' EXIT

up_count() { "$PGNODES" status 2>/dev/null | grep -c '^node[123] up' || true; }

echo "demo-rust with nodes the user started:"
"$PGNODES" start 3 >/dev/null
make --no-print-directory demo-rust >/dev/null
n=$(up_count)
if [[ $n != 3 ]]; then
    echo "FAIL: the user's 3 nodes should still be up after make demo-rust, $n are"; "$PGNODES" status; exit 1
fi
echo "  ok: all 3 still up"

echo "demo-rust with no nodes running:"
"$PGNODES" stop >/dev/null
make --no-print-directory demo-rust >/dev/null
n=$(up_count)
if [[ $n != 0 ]]; then
    echo "FAIL: make demo-rust should stop the nodes it started, $n are up"; "$PGNODES" status; exit 1
fi
echo "  ok: none left running"
