#!/usr/bin/env bash
# tests/cluster/pgnodes stop, on a node whose postmaster is already shutting
# down: a postmaster removes postmaster.pid as the last step of its exit, so
# a stop that saw the file, then ran pg_ctl after it went, found a live
# postmaster and no pid file ("fast stop failed", status 1) where the node
# was stopping. The race's order is made certain here: the postmaster's exit
# after it removes the file is slowed with strace (as on a loaded machine)
# and pg_ctl runs only once the file is gone (as a stop scheduled late).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
ROOT=$(cd "$HERE/../.." && pwd -P)
export RACAFF_PG_BASE_PORT=${RACAFF_PG_BASE_PORT:-55491}
export RACAFF_PG_DIR=${RACAFF_PG_DIR:-/tmp/racaffinity-pg-stop-test-$(printf '%s' "$ROOT" | sha1sum | cut -c1-8)}
PGNODES="$HERE/pgnodes"
REAL_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
fail() { echo "FAIL: $*"; "$PGNODES" status || true; exit 1; }

if ! command -v strace >/dev/null; then
    echo "SKIP: pgnodes_stop_test.sh needs strace (to slow the postmaster's exit)" >&2
    exit 0
fi

wrap=$(mktemp -d)
strace_pid=
cleanup() {
    if [[ -n $strace_pid ]]; then kill "$strace_pid" 2>/dev/null || true; fi
    "$PGNODES" stop >/dev/null 2>&1 || true
    rm -rf "$wrap"
}
trap cleanup EXIT

"$PGNODES" start 1 >/dev/null
dir="$RACAFF_PG_DIR/node1"
read -r pid < "$dir/postmaster.pid"

# The binaries as they are, but pg_ctl's stop waits until postmaster.pid is gone.
for f in "$REAL_BIN"/*; do ln -s "$f" "$wrap/${f##*/}"; done
rm "$wrap/pg_ctl"
cat > "$wrap/pg_ctl" <<WRAP
#!/bin/sh
case " \$* " in
*" stop "*)
    touch "$wrap/stop-called"
    i=0
    while [ -f "$dir/postmaster.pid" ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i + 1)); done ;;
esac
exec "$REAL_BIN/pg_ctl" "\$@"
WRAP
chmod 755 "$wrap/pg_ctl"
chmod 1777 "$wrap" # pgnodes runs pg_ctl as the postgres user when run as root

# Once it has removed postmaster.pid, the postmaster takes 3 s to exit.
strace -p "$pid" -P postmaster.pid -e trace=unlink,unlinkat \
    -e inject=unlink,unlinkat:delay_exit=3000000 -o /dev/null 2>/dev/null &
strace_pid=$!
for (( t = 0; t < 100; t++ )); do
    [[ $(awk '/^TracerPid:/ {print $2}' "/proc/$pid/status") != 0 ]] && break
    sleep 0.05
done
if [[ $(awk '/^TracerPid:/ {print $2}' "/proc/$pid/status") == 0 ]]; then
    echo "SKIP: pgnodes_stop_test.sh: strace cannot attach to the postmaster (ptrace not allowed here)" >&2
    exit 0
fi

out=$(mktemp)
PG_BIN=$wrap "$PGNODES" stop >"$out" 2>&1 &
stop=$!
for (( t = 0; t < 200; t++ )); do [[ -f $wrap/stop-called ]] && break; sleep 0.05; done
[[ -f $wrap/stop-called ]] || fail "stop never ran pg_ctl: $(cat "$out")"
kill -INT "$pid" # a shutdown already under way (a smart stop whose last session ended)
rc=0; wait "$stop" || rc=$?
said=$(cat "$out"); rm -f "$out"
(( rc == 0 )) || fail "stop of a node shutting down returned $rc: $said"
[[ $said == *"node1: stopped"* ]] || fail "stop should say the node stopped: $said"
# Gone, or a zombie nobody reaps (PID 1 in a container may not).
state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || true
[[ -z $state || $state == Z ]] || fail "the postmaster (pid $pid) is still running after stop returned (state $state)"
echo "ok: stop of a node whose postmaster removed its pid file and has not exited yet waits for it"
