# Sourced by smoke.sh (uses its pass/fail/abort, $PSQL, $HERE and the
# RACAFF_NODEi_* variables): every fault of tests/cluster/faults checked
# with real psql clients through real proxies, independent-node mode.

FAULTS="$HERE/faults"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/racaff-smoke-faults.XXXXXX")   # smoke.sh removes it

# psql_at DSN ARGS...: one psql run that cannot hang (client and server
# side timeouts), tuples only; stderr kept for the caller's message checks
psql_at() {
    local dsn=$1; shift
    PGOPTIONS="-c client_min_messages=warning -c statement_timeout=10000" \
        timeout 15 "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 \
        "$dsn connect_timeout=3 application_name=racaff_smoke" "$@"
}

proxy_dsn() { local v="RACAFF_PROXY${1}_DSN"; echo "${!v}"; }

# wait_for COND_CMD... : poll a condition with a 10 s deadline
wait_for() {
    local deadline=$(( SECONDS + 10 ))
    until "$@"; do
        (( SECONDS < deadline )) || return 1
        sleep 0.05
    done
}

has_line() { grep -qx "$1" "$2" 2>/dev/null; }

# held_session NAME DSN LIMIT: one psql connection that runs SELECT 'before',
# then waits for "$SCRATCH/NAME.go" before sending SELECT 'after'. The session
# is bounded by timeout LIMIT; output in NAME.out, exit status in NAME.rc
# (124 = still waiting when the limit hit: the socket stayed open).
held_session() {
    local name=$1 dsn=$2 limit=$3 go="$SCRATCH/$1.go"
    (
        rc=0
        { echo "SELECT 'before';"
          wait_for test -e "$go" || true
          echo "SELECT 'after';"
        } | timeout "$limit" "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 \
                "$dsn connect_timeout=3 application_name=racaff_smoke" >"$SCRATCH/$name.out" 2>&1 || rc=$?
        echo "$rc" >"$SCRATCH/$name.rc"
    ) &
    wait_for has_line before "$SCRATCH/$name.out" \
        || abort "held session $name: no answer to its first query: $(cat "$SCRATCH/$name.out")"
}

# release_session NAME: send the second query, wait for the session's end;
# prints psql's exit status (999: the session outlived its own timeout)
release_session() {
    touch "$SCRATCH/$1.go"
    if wait_for test -s "$SCRATCH/$1.rc"; then cat "$SCRATCH/$1.rc"; else echo 999; fi
}

answers() { [[ $(psql_at "$(proxy_dsn "$1")" -c "SELECT 7" 2>/dev/null) == 7 ]]; }

ms_now() { echo $(( $(date +%s%N) / 1000000 )); }

echo "== faults: toxiproxy instances in front of independent nodes"
"$FAULTS" start "$NODES" || abort "faults start $NODES"
eval "$("$FAULTS" env)" || abort "faults env"
[[ ${RACAFF_PROXIES:-0} == "$NODES" && $RACAFF_PROXY_MODE == nodes ]] \
    && pass "faults env: RACAFF_PROXIES=$RACAFF_PROXIES, mode nodes" \
    || abort "faults env: RACAFF_PROXIES=${RACAFF_PROXIES:-unset} mode=${RACAFF_PROXY_MODE:-unset}"
[[ $RACAFF_PROXY1_DSN == "${RACAFF_NODE1_DSN/port=$RACAFF_NODE1_PORT/port=$RACAFF_PROXY1_PORT}" ]] \
    && pass "RACAFF_PROXY1_DSN has pgnodes' DSN shape with the proxy port" \
    || fail "RACAFF_PROXY1_DSN='$RACAFF_PROXY1_DSN' vs RACAFF_NODE1_DSN='$RACAFF_NODE1_DSN'"
for (( i = 1; i <= NODES; i++ )); do
    portvar="RACAFF_NODE${i}_PORT"
    got=$(psql_at "$(proxy_dsn "$i")" -c "SELECT inet_server_port()") || abort "connect through instance $i"
    [[ $got == "${!portvar}" ]] || abort "instance $i reached port $got, expected node $i (${!portvar})"
done
pass "instance I reaches node I, for I=1..$NODES"

echo "== reset"
held_session reset "$(proxy_dsn 1)" 10
"$FAULTS" reset 1 >/dev/null || abort "faults reset 1"
err=$(psql_at "$(proxy_dsn 1)" -c "SELECT 1" 2>&1) && fail "instance 1: query succeeded under reset" \
    || { [[ $err == *"closed the connection"* || $err == *reset* ]] \
         && pass "instance 1 reset: new connection fails (${err%%$'\n'*})" \
         || fail "instance 1 reset: unexpected error: $err"; }
rc=$(release_session reset)
(( rc != 0 && rc != 124 )) && pass "instance 1 reset: the open connection fails at once (psql exit $rc)" \
    || fail "instance 1 reset: open connection: psql exit $rc, output: $(cat "$SCRATCH/reset.out")"
answers 2 && pass "instance 2 unaffected by instance 1's reset" || fail "instance 2 failed while only instance 1 was reset"
"$FAULTS" heal 1 >/dev/null || abort "faults heal 1"
answers 1 && pass "instance 1 answers after heal" || fail "instance 1 still failing after heal"

echo "== blackhole"
held_session blackhole "$(proxy_dsn 1)" 3
"$FAULTS" blackhole 1 >/dev/null || abort "faults blackhole 1"
rc=$(release_session blackhole)
if [[ $rc == 124 ]] && ! has_line after "$SCRATCH/blackhole.out"; then
    pass "instance 1 blackhole: the open connection's query hangs, no error, until the client's 3 s timeout"
else
    fail "instance 1 blackhole: open connection: psql exit $rc, output: $(cat "$SCRATCH/blackhole.out")"
fi
err=$(PGCONNECT_TIMEOUT=2 timeout 15 "$PSQL" -X -A -t "$(proxy_dsn 1) connect_timeout=2" -c "SELECT 1" 2>&1) \
    && fail "instance 1: query succeeded under blackhole" \
    || { [[ $err == *"timeout expired"* ]] \
         && pass "instance 1 blackhole: new connection accepted, then times out (connect_timeout=2)" \
         || fail "instance 1 blackhole: new connection: $err"; }
"$FAULTS" heal 1 >/dev/null || abort "faults heal 1"
answers 1 && pass "instance 1 answers after heal" || fail "instance 1 still failing after heal"

echo "== refuse"
held_session refuse "$(proxy_dsn 2)" 10
"$FAULTS" refuse 2 >/dev/null || abort "faults refuse 2"
err=$(psql_at "$(proxy_dsn 2)" -c "SELECT 1" 2>&1) && fail "instance 2: query succeeded while refused" \
    || { [[ $err == *"Connection refused"* ]] && pass "instance 2 refuse: new connection refused" \
         || fail "instance 2 refuse: unexpected error: $err"; }
rc=$(release_session refuse)
(( rc != 0 && rc != 124 )) && pass "instance 2 refuse: the open connection is closed (psql exit $rc)" \
    || fail "instance 2 refuse: open connection: psql exit $rc, output: $(cat "$SCRATCH/refuse.out")"
[[ $("$FAULTS" status) == *"instance2 refusing "* ]] && pass "faults status shows instance2 refusing" \
    || fail "faults status does not show instance2 refusing: $("$FAULTS" status)"
"$FAULTS" heal 2 >/dev/null || abort "faults heal 2"
answers 2 && pass "instance 2 answers after heal" || fail "instance 2 still refusing after heal"

echo "== latency"
"$FAULTS" latency 3 400 >/dev/null || abort "faults latency 3 400"
t0=$(ms_now)
answers 3 || fail "instance 3: query failed under latency"
took=$(( $(ms_now) - t0 ))
(( took >= 400 )) && pass "instance 3 latency 400: connect + query took $took ms (>= 400)" \
    || fail "instance 3 latency 400: connect + query took only $took ms"

echo "== heal-all"
"$FAULTS" refuse 1 >/dev/null && "$FAULTS" reset 2 >/dev/null || abort "faults refuse 1 / reset 2"
"$FAULTS" heal-all >/dev/null || abort "faults heal-all"
answers 1 && answers 2 && [[ $("$FAULTS" status) != *"latency("* ]] \
    && pass "heal-all: every instance answers, no toxic left" \
    || fail "after heal-all: $("$FAULTS" status)"
