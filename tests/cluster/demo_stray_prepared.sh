#!/usr/bin/env bash
# `make demo` next to a prepared transaction that is not the demo's, holding
# a lock on the demo's table (left, for example, by a manual test): the demo
# must stop at once with a message naming that transaction, never wait on it
# (it used to hang in TRUNCATE until its 10-minute alarm).
set -euo pipefail
cd "$(dirname "$0")/../.."
PGNODES=tests/cluster/pgnodes
PY=${PY:-target/pyenv/bin/python}
GID="stray-manual-$$"
started=0
if ! $PGNODES status 2>/dev/null | grep -q '^node1 up '; then started=1; fi
$PGNODES start 3 >/dev/null
eval "$($PGNODES env)"
psql_node1() { PGOPTIONS="-c statement_timeout=10000" timeout 20 psql -X -q -v ON_ERROR_STOP=1 "$RACAFF_NODE1_DSN connect_timeout=3" "$@"; }
cleanup() {
  psql_node1 -c "ROLLBACK PREPARED '$GID'" >/dev/null 2>&1 || true
  if [ "$started" = 1 ]; then $PGNODES stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
psql_node1 -c "CREATE TABLE IF NOT EXISTS demo_xa (gtrid text, lang text, port int)"
psql_node1 -c "BEGIN; INSERT INTO demo_xa VALUES ('not-the-demo', 'manual', 0); PREPARE TRANSACTION '$GID';"

t0=$(date +%s)
set +e
out=$(RACAFF_DEMO_LOCK_TIMEOUT=3s timeout 120 "$PY" demo/run.py 2>&1)
rc=$?
set -e
took=$(( $(date +%s) - t0 ))
if [ "$rc" != 2 ]; then
  echo "FAIL: demo/run.py exited $rc after ${took}s (want 2, a clear setup error):"; echo "$out" | tail -20; exit 1
fi
if ! grep -q "$GID" <<<"$out"; then
  echo "FAIL: the demo's error does not name the stray prepared transaction $GID:"; echo "$out" | tail -20; exit 1
fi
if [ "$took" -gt 60 ]; then
  echo "FAIL: the demo took ${took}s to give up"; exit 1
fi
echo "ok: the demo stops after ${took}s naming the foreign prepared transaction:"
grep "$GID" <<<"$out" | head -3
