#!/usr/bin/env bash
# Smoke test for the node harness, with real servers, proxies and psql:
# pgnodes (multi-node start, the "prepared transaction is node-local"
# behaviour racaffinity relies on - PostgreSQL's "does not exist" error is our
# ORA-24756 analogue -, durable commits across kill -9 + restart, stop), then
# every fault of tests/cluster/faults (smoke_faults.sh) and the RAC model of
# one database behind three instances (smoke_rac.sh). Exits non-zero on any
# failure. Ports: pgnodes' and faults' environment variables.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
PGNODES="$HERE/pgnodes"
PSQL=${PSQL:-$(command -v psql || echo /usr/bin/psql)}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
if [[ -x $PG_BIN/pg_isready ]]; then PG_ISREADY=$PG_BIN/pg_isready
else PG_ISREADY=$(command -v pg_isready || echo pg_isready); fi
NODES=3

checks=0
failures=()
finished=0

pass() { checks=$(( checks + 1 )); echo "  ok   - $*"; }
fail() { checks=$(( checks + 1 )); failures+=("$*"); echo "  FAIL - $*" >&2; }
# abort: a failure later steps depend on
abort() { fail "$*"; exit 1; }

summary() {
    local rc=$?
    [[ -n ${SCRATCH:-} ]] && rm -rf "$SCRATCH"
    if (( ! finished )); then
        echo "smoke: stopping proxies and nodes (cleanup)"
        "$HERE/faults" stop >/dev/null 2>&1 || echo "smoke: warning: 'faults stop' failed during cleanup" >&2
        "$PGNODES" stop >/dev/null 2>&1 || echo "smoke: warning: 'pgnodes stop' failed during cleanup" >&2
    fi
    echo
    if (( rc == 0 && ${#failures[@]} == 0 )); then
        echo "smoke: PASS ($checks checks)"
    else
        echo "smoke: FAIL (${#failures[@]} of $checks checks failed, exit status $rc)" >&2
        local f
        for f in "${failures[@]}"; do echo "  - $f" >&2; done
        (( rc != 0 )) || rc=1
    fi
    exit "$rc"
}
trap summary EXIT
trap 'exit 130' INT TERM

[[ -x $PSQL ]] || abort "psql not found (looked at '$PSQL')"

# psql I SQL... : run SQL on node I, tuples only, unaligned; stderr kept
psql_node() {
    local i=$1; shift
    local dsnvar="RACAFF_NODE${i}_DSN"
    PGOPTIONS="-c client_min_messages=warning" \
        "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 "${!dsnvar} connect_timeout=5 application_name=racaff_smoke" "$@"
}

# prepare_smoke_row I GID: leave a row tagged with node I's port in a
# transaction prepared as GID on node I
prepare_smoke_row() {
    local i=$1 gid=$2
    psql_node "$i" -f - >/dev/null <<SQL
BEGIN;
CREATE TABLE IF NOT EXISTS racaff_smoke (
    gid        text PRIMARY KEY,
    node_port  int  NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO racaff_smoke (gid, node_port) VALUES ('$gid', inet_server_port());
PREPARE TRANSACTION '$gid';
SQL
}

reachable() {
    local portvar="RACAFF_NODE${1}_PORT"
    "$PG_ISREADY" -q -h 127.0.0.1 -p "${!portvar}" -t 2 >/dev/null 2>&1
}

echo "== start $NODES nodes"
t0=$(date +%s%N)
"$PGNODES" start "$NODES" || abort "pgnodes start $NODES"
t1=$(date +%s%N)
pass "pgnodes start $NODES ($(( (t1 - t0) / 1000000 )) ms)"
"$PGNODES" start "$NODES" >/dev/null || abort "pgnodes start $NODES (second time, must be a no-op)"
pass "pgnodes start $NODES again is a no-op"

eval "$("$PGNODES" env)"
(( ${RACAFF_NODES:-0} >= NODES )) || abort "pgnodes env: RACAFF_NODES=${RACAFF_NODES:-unset}, expected >= $NODES"
pass "pgnodes env exports RACAFF_NODES=$RACAFF_NODES"
[[ $("$PGNODES" dsn 1) == "$RACAFF_NODE1_DSN" ]] || abort "pgnodes dsn 1 differs from RACAFF_NODE1_DSN"
pass "pgnodes dsn 1 == \$RACAFF_NODE1_DSN"

echo "== node identity"
for (( i = 1; i <= NODES; i++ )); do
    portvar="RACAFF_NODE${i}_PORT"
    got=$(psql_node "$i" -c "SELECT inet_server_port()") || abort "connect to node $i"
    [[ $got == "${!portvar}" ]] || abort "node $i: inet_server_port()=$got, expected ${!portvar}"
    mpt=$(psql_node "$i" -c "SHOW max_prepared_transactions")
    (( mpt > 0 )) || abort "node $i: max_prepared_transactions=$mpt (2PC disabled)"
done
pass "each node answers with its own inet_server_port(), 2PC enabled"

# fsync may stay off (kill -9 keeps the OS page cache), but an acknowledged
# commit must be in the WAL the OS holds before the client hears "COMMIT":
# fault tests count rows after a crash.
for (( i = 1; i <= NODES; i++ )); do
    sc=$(psql_node "$i" -c "SHOW synchronous_commit") || abort "node $i: SHOW synchronous_commit"
    [[ $sc == on ]] && pass "node $i: synchronous_commit=on" \
        || fail "node $i: synchronous_commit=$sc, must be on (a crash would lose acknowledged commits)"
done

echo "== clean up prepared transactions left by earlier (crashed) runs"
for (( i = 1; i <= NODES; i++ )); do
    leftovers=$(psql_node "$i" -c "SELECT gid FROM pg_prepared_xacts
        WHERE gid LIKE 'racaff\\_smoke\\_%' AND database = current_database()")
    for g in $leftovers; do
        psql_node "$i" -c "ROLLBACK PREPARED '$g'" >/dev/null || abort "node $i: ROLLBACK PREPARED '$g'"
        echo "  rolled back leftover $g on node $i"
    done
done
pass "no leftover racaff_smoke_* prepared transactions"

echo "== prepared transaction is local to the node that prepared it"
gid="racaff_smoke_$(date +%s)_$$_${RANDOM}"
prepare_smoke_row 1 "$gid" || abort "node 1: BEGIN/CREATE/INSERT/PREPARE TRANSACTION '$gid'"
pass "node 1: PREPARE TRANSACTION '$gid'"

n=$(psql_node 1 -c "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '$gid'")
[[ $n == 1 ]] && pass "node 1 lists $gid in pg_prepared_xacts" || fail "node 1 pg_prepared_xacts count for $gid = $n"
n=$(psql_node 2 -c "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '$gid'")
[[ $n == 0 ]] && pass "node 2 does not list $gid" || fail "node 2 pg_prepared_xacts count for $gid = $n"

if err=$(psql_node 2 -c "COMMIT PREPARED '$gid'" 2>&1); then
    fail "node 2: COMMIT PREPARED '$gid' unexpectedly succeeded"
else
    pass "node 2: COMMIT PREPARED fails"
    if [[ $err == *"does not exist"* ]]; then
        pass "node 2: error says 'does not exist' (ORA-24756 analogue): ${err//$'\n'/ }"
    else
        fail "node 2: error lacks 'does not exist': ${err//$'\n'/ }"
    fi
fi

psql_node 1 -c "COMMIT PREPARED '$gid'" >/dev/null || abort "node 1: COMMIT PREPARED '$gid'"
pass "node 1: COMMIT PREPARED succeeds"

got=$(psql_node 1 -c "SELECT node_port FROM racaff_smoke WHERE gid = '$gid'")
[[ $got == "$RACAFF_NODE1_PORT" ]] && pass "node 1: committed row visible" \
    || fail "node 1: row for $gid: '$got', expected node_port=$RACAFF_NODE1_PORT"
reg=$(psql_node 2 -c "SELECT to_regclass('public.racaff_smoke') IS NOT NULL")
if [[ $reg == t ]]; then
    n=$(psql_node 2 -c "SELECT count(*) FROM racaff_smoke WHERE gid = '$gid'")
else
    n=0
fi
[[ $n == 0 ]] && pass "node 2: row not visible" || fail "node 2: row for $gid visible (count=$n)"

echo "== crash (kill -9) and restart node 2"
gid2="${gid}_indoubt"
prepare_smoke_row 2 "$gid2" || abort "node 2: PREPARE TRANSACTION '$gid2'"
pass "node 2: PREPARE TRANSACTION '$gid2' before crash"

# Autocommitted, so psql returning means the commit was acknowledged; the
# kill follows at once, before the WAL writer's own flush (200 ms) would hide
# an asynchronous commit.
acked="${gid}_acked"
psql_node 2 -c "CREATE TABLE IF NOT EXISTS racaff_smoke_durable (id text PRIMARY KEY)" \
    -c "INSERT INTO racaff_smoke_durable VALUES ('$acked')" >/dev/null \
    || abort "node 2: autocommit INSERT before crash"
"$PGNODES" kill 2 || abort "pgnodes kill 2"
if reachable 2; then fail "node 2 still reachable after kill"; else pass "node 2 unreachable after 'pgnodes kill 2'"; fi
if reachable 1 && reachable 3; then pass "nodes 1 and 3 unaffected"; else fail "node 1 or 3 unreachable after killing node 2"; fi
st=$("$PGNODES" status)
[[ $'\n'$st == *$'\n'"node2 down "* ]] && pass "status reports node2 down" || fail "status does not report node2 down: $st"

"$PGNODES" restart 2 || abort "pgnodes restart 2"
if reachable 2; then pass "node 2 reachable after 'pgnodes restart 2'"; else abort "node 2 unreachable after restart"; fi
got=$(psql_node 2 -c "SELECT inet_server_port()") || abort "query node 2 after restart"
[[ $got == "$RACAFF_NODE2_PORT" ]] && pass "node 2 answers queries after restart" || fail "node 2 port after restart: $got"
# an asynchronous commit can lose the CREATE TABLE too: count that as a loss
n=$(psql_node 2 -c "SELECT count(*) FROM racaff_smoke_durable WHERE id = '$acked'" 2>&1) || true
[[ $n == 1 ]] && pass "node 2: row committed (acknowledged) just before kill -9 survived" \
    || fail "node 2: acknowledged row $acked lost by kill -9 + restart (count=${n//$'\n'/ })"
n=$(psql_node 2 -c "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '$gid2'")
[[ $n == 1 ]] && pass "in-doubt $gid2 survived the crash on node 2" || fail "in-doubt $gid2 missing after crash (count=$n)"
psql_node 2 -c "ROLLBACK PREPARED '$gid2'" >/dev/null && pass "node 2: ROLLBACK PREPARED in-doubt txn" \
    || fail "node 2: ROLLBACK PREPARED '$gid2'"

source "$HERE/smoke_faults.sh"
source "$HERE/smoke_rac.sh"

echo "== stop"
"$FAULTS" stop || abort "faults stop"
answers 1 && fail "instance 1 still answers after 'faults stop'" || pass "no proxy after 'faults stop'"
"$PGNODES" stop || abort "pgnodes stop"
finished=1
up=()
for (( i = 1; i <= RACAFF_NODES; i++ )); do
    reachable "$i" && up+=("$i")
done
(( ${#up[@]} == 0 )) && pass "no node reachable after 'pgnodes stop'" || fail "still reachable after stop: nodes ${up[*]}"
"$PGNODES" stop >/dev/null || fail "second 'pgnodes stop' failed"
pass "second 'pgnodes stop' is a no-op"

echo "== destroy"
# A root of its own, so the suites that follow keep theirs; the ports are
# free again since every node above is stopped.
DESTROY_ROOT=/tmp/racaffinity-pg-smoke-destroy-$$
RACAFF_PG_DIR=$DESTROY_ROOT "$PGNODES" start 1 >/dev/null || abort "pgnodes start 1 in $DESTROY_ROOT"
reachable 1 || fail "node 1 of $DESTROY_ROOT not reachable after start"
# Another run (another RACAFF_PG_BASE_PORT) on a root whose node is running
# elsewhere: refused at once, naming the port the node runs on and the way
# out, and the running node is left alone (it once timed out after 30 s on
# the ports it was asked for, and a soak lost its nodes to a benchmark's).
other=$(( RACAFF_NODE1_PORT + 100 ))
t0=$SECONDS
if out=$(RACAFF_PG_DIR=$DESTROY_ROOT RACAFF_PG_BASE_PORT=$other "$PGNODES" start 1 2>&1); then
    fail "'pgnodes start' on port $other took a root whose node runs on $RACAFF_NODE1_PORT"
elif [[ $out == *"port $RACAFF_NODE1_PORT"* && $out == *RACAFF_PG_DIR* ]] && (( SECONDS - t0 < 10 )); then
    pass "a start on other ports refuses a root whose node runs, at once, naming its port"
else
    fail "a start on other ports of a running root: $(( SECONDS - t0 )) s, said: $out"
fi
reachable 1 || fail "node 1 of $DESTROY_ROOT not reachable after another run's refused start"
# env on those other ports would hand the caller ports nobody listens on.
if out=$(RACAFF_PG_DIR=$DESTROY_ROOT RACAFF_PG_BASE_PORT=$other "$PGNODES" env 2>&1); then
    fail "'pgnodes env' on port $other of a root whose node runs on $RACAFF_NODE1_PORT printed: $out"
elif [[ $out == *"port $RACAFF_NODE1_PORT"* && $out != *"export RACAFF_NODE1_PORT=$other"* ]]; then
    pass "env on other ports refuses a root whose node runs, naming its port"
else
    fail "env on other ports of a running root said: $out"
fi
RACAFF_PG_DIR=$DESTROY_ROOT "$PGNODES" destroy >/dev/null || fail "'pgnodes destroy' failed"
[[ ! -e $DESTROY_ROOT ]] && pass "'pgnodes destroy' removes the data root" \
    || { fail "$DESTROY_ROOT still exists after 'pgnodes destroy'"
         RACAFF_PG_DIR=$DESTROY_ROOT "$PGNODES" stop >/dev/null 2>&1; rm -rf "$DESTROY_ROOT"; }
reachable 1 && fail "node 1 still reachable after 'pgnodes destroy'" || pass "no node reachable after 'pgnodes destroy'"
mkdir -p "$DESTROY_ROOT" && echo keep > "$DESTROY_ROOT/notes.txt"
if RACAFF_PG_DIR=$DESTROY_ROOT "$PGNODES" destroy >/dev/null 2>&1; then
    fail "'pgnodes destroy' accepted a directory pgnodes did not make"
else
    [[ -f $DESTROY_ROOT/notes.txt ]] && pass "'pgnodes destroy' refuses, and keeps, a directory it did not make" \
        || fail "'pgnodes destroy' deleted a file it did not make"
fi
rm -rf "$DESTROY_ROOT"

(( ${#failures[@]} == 0 ))
