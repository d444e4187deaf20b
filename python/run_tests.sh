#!/usr/bin/env bash
# Python binding tests: builds and installs ./python (with its test extras)
# into a virtualenv under target/, starts 3 local PostgreSQL nodes with
# tests/cluster/pgnodes, runs pytest, and stops the nodes on exit.
#
#   bash python/run_tests.sh [pytest args...]
#
# Environment:
#   PYTHON                 interpreter for the virtualenv (default python3)
#   RACAFF_PY_VENV         virtualenv directory (default target/pyenv; reused)
#   RACAFF_PG_BASE_PORT    port of node 1 (default 55441: its own nodes, so it
#   RACAFF_PG_DIR          never stops nodes another test step is using;
#                          default data root /tmp/racaffinity-pg-python-<hash>)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
VENV=${RACAFF_PY_VENV:-$ROOT/target/pyenv}
PGNODES=$ROOT/tests/cluster/pgnodes

export RACAFF_PG_BASE_PORT=${RACAFF_PG_BASE_PORT:-55441}
if [[ -z ${RACAFF_PG_DIR:-} ]]; then
    RACAFF_PG_DIR=/tmp/racaffinity-pg-python-$(printf '%s' "$ROOT" | sha1sum | cut -c1-8)
fi
export RACAFF_PG_DIR

if [[ ! -x $VENV/bin/python ]]; then
    echo "run_tests.sh: creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# pip rebuilds and reinstalls a local directory every time (cargo only
# recompiles what changed), so the tests always run the current sources.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "./python[test]"

stop_nodes() { "$PGNODES" stop >/dev/null 2>&1 || true; }
trap stop_nodes EXIT
"$PGNODES" start 3 >/dev/null
eval "$("$PGNODES" env)"
export RACAFF_PGNODES=$PGNODES

cd "$ROOT/python"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
