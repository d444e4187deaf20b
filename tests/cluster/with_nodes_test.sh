#!/usr/bin/env bash
# tests/cluster/with-nodes leaves nodes the user started running, stops the
# ones it started, exports their variables, and passes the command's status.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
ROOT=$(cd "$HERE/../.." && pwd -P)
export RACAFF_PG_BASE_PORT=${RACAFF_PG_BASE_PORT:-55481}
export RACAFF_PG_DIR=${RACAFF_PG_DIR:-/tmp/racaffinity-pg-with-nodes-$(printf '%s' "$ROOT" | sha1sum | cut -c1-8)}
PGNODES="$HERE/pgnodes"
trap '"$PGNODES" stop >/dev/null 2>&1 || true' EXIT
up_count() { "$PGNODES" status 2>/dev/null | grep -c '^node[0-9]* up' || true; }
fail() { echo "FAIL: $*"; "$PGNODES" status || true; exit 1; }

"$PGNODES" start 2 >/dev/null
"$HERE/with-nodes" 2 true 2>/dev/null
[[ $(up_count) == 2 ]] || fail "the user's 2 nodes should still be up"
echo "ok: nodes the user started stay up"

"$PGNODES" stop >/dev/null
seen=$("$HERE/with-nodes" 2 sh -c 'echo "$RACAFF_NODES"' 2>/dev/null)
[[ $seen == 2 ]] || fail "the command should see RACAFF_NODES=2, saw '$seen'"
[[ $(up_count) == 0 ]] || fail "nodes it started should be stopped"
echo "ok: nodes it started are stopped, the command sees their variables"

if "$HERE/with-nodes" 2 false 2>/dev/null; then fail "the command's failure should pass through"; fi
[[ $(up_count) == 0 ]] || fail "nodes it started should be stopped after a failing command too"
echo "ok: a failing command fails, and its nodes are stopped"
