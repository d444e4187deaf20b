#!/usr/bin/env bash
# Self-test of tests/cluster/etcdnodes with a real 3-member etcd cluster and
# the v3 JSON gateway over HTTP: a value written through one member is read
# through another; SIGKILL of the leader elects another and loses nothing; a
# value written while a member is down reaches it once it rejoins; destroy
# leaves no process and no data root. Exits non-zero on any failure.
# Its own ports and data root (so it never destroys a cluster of yours):
# RACAFF_ETCD_BASE_PORT (default 23840), RACAFF_ETCD_DIR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
CHECKOUT=$(cd "$HERE/../.." && pwd -P)
ETCDNODES="$HERE/etcdnodes"
export RACAFF_ETCD_BASE_PORT=${RACAFF_ETCD_BASE_PORT:-23840}
export RACAFF_ETCD_DIR=${RACAFF_ETCD_DIR:-/tmp/racaffinity-etcd-smoke-$(printf '%s' "$CHECKOUT" | sha1sum | cut -c1-8)}

checks=0
failures=()
finished=0
t0=$SECONDS

pass() { checks=$(( checks + 1 )); echo "  ok   - $*"; }
fail() { checks=$(( checks + 1 )); failures+=("$*"); echo "  FAIL - $*" >&2; }
# abort: a failure later steps depend on
abort() { fail "$*"; exit 1; }

summary() {
    local rc=$?
    if (( ! finished )); then
        echo "smoke_etcd: destroying the cluster (cleanup)"
        "$ETCDNODES" destroy >/dev/null || echo "smoke_etcd: warning: 'etcdnodes destroy' failed during cleanup" >&2
    fi
    echo
    if (( rc == 0 && ${#failures[@]} == 0 )); then
        echo "smoke_etcd: PASS ($checks checks, $(( SECONDS - t0 )) s)"
    else
        echo "smoke_etcd: FAIL (${#failures[@]} of $checks checks failed, exit status $rc)" >&2
        local f
        for f in "${failures[@]}"; do echo "  - $f" >&2; done
        (( rc != 0 )) || rc=1
    fi
    exit "$rc"
}
trap summary EXIT
trap 'exit 130' INT TERM

command -v curl >/dev/null || abort "curl not found on PATH"

member_url() { local v="RACAFF_ETCD${1}_URL"; echo "${!v}"; }
b64() { printf '%s' "$1" | base64 -w0; }

# gateway I PATH JSON: POST to member I's v3 JSON gateway; the reply on stdout
gateway() {
    curl -sS --fail-with-body --noproxy '*' --max-time 5 -H 'Content-Type: application/json' \
        -X POST -d "$3" "$(member_url "$1")$2"
}

put() { gateway "$1" /v3/kv/put "{\"key\":\"$(b64 "$2")\",\"value\":\"$(b64 "$3")\"}" >/dev/null; }

# get I KEY: the value member I returns for KEY (a linearizable read: it needs
# a quorum and the member's own log caught up to the leader's); empty if none
get() {
    gateway "$1" /v3/kv/range "{\"key\":\"$(b64 "$2")\"}" | python3 -c '
import base64, json, sys
kvs = json.load(sys.stdin).get("kvs") or []
sys.stdout.write(base64.b64decode(kvs[0]["value"]).decode() if kvs else "")'
}

# expect_value I KEY WANT WHAT: the check every read goes through
expect_value() {
    local got
    got=$(get "$1" "$2") || { fail "$4: reading '$2' from member$1 failed"; return 1; }
    if [[ $got == "$3" ]]; then pass "$4: member$1 returns '$got'"; return 0; fi
    fail "$4: member$1 returns '$got' for '$2', expected '$3'"
    return 1
}

echo "== etcdnodes: start a 3-member cluster (root $RACAFF_ETCD_DIR, base port $RACAFF_ETCD_BASE_PORT)"
"$ETCDNODES" destroy >/dev/null || abort "etcdnodes destroy of a leftover root"
"$ETCDNODES" start 3 || abort "etcdnodes start 3"
eval "$("$ETCDNODES" env)" || abort "etcdnodes env"
want_endpoints="127.0.0.1:$RACAFF_ETCD_BASE_PORT,127.0.0.1:$(( RACAFF_ETCD_BASE_PORT + 1 )),127.0.0.1:$(( RACAFF_ETCD_BASE_PORT + 2 ))"
[[ $RACAFF_ETCD_ENDPOINTS == "$want_endpoints" ]] \
    && pass "env: RACAFF_ETCD_ENDPOINTS=$RACAFF_ETCD_ENDPOINTS" \
    || abort "env: RACAFF_ETCD_ENDPOINTS='$RACAFF_ETCD_ENDPOINTS', expected '$want_endpoints'"
version=$(gateway 1 /v3/maintenance/status '{}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])') \
    || abort "maintenance/status of member 1"
pinned=$(sed -n 's|^[[:space:]]*go.etcd.io/etcd/server/v3 v\([^ ]*\)$|\1|p' "$HERE/etcd/go.mod")
[[ -n $pinned && $version == "$pinned" ]] && pass "member 1 runs etcd $version, the version go.mod pins" \
    || fail "member 1 runs etcd '$version', go.mod pins '$pinned'"
[[ $("$ETCDNODES" status | grep -c ' up') == 3 ]] && pass "status: 3 members up" \
    || fail "status: $("$ETCDNODES" status)"

echo "== a write through one member is read through another"
leader=$("$ETCDNODES" leader) || abort "etcdnodes leader"
[[ $leader =~ ^[1-3]$ ]] || abort "etcdnodes leader printed '$leader'"
other=$(( leader % 3 + 1 ))
value="written-through-member$other-$$"
put "$other" racaff/smoke "$value" || abort "put through member $other"
expect_value "$(( other % 3 + 1 ))" racaff/smoke "$value" "read through another member" || true
# the check above must be able to fail: a key never written reads back empty
got=$(get 1 racaff/never-written) || abort "reading a missing key"
[[ -z $got ]] && pass "a key never written reads back empty (the read check can fail)" \
    || fail "a key never written reads back '$got'"

echo "== SIGKILL of the leader (member$leader)"
"$ETCDNODES" kill "$leader" >/dev/null || abort "etcdnodes kill $leader"
if put "$leader" racaff/dead x 2>/dev/null; then fail "a put through the killed member $leader succeeded"
else pass "a put through the killed member $leader fails"; fi
new_leader=$("$ETCDNODES" leader) || abort "no new leader after killing member $leader"
[[ $new_leader =~ ^[1-3]$ && $new_leader != "$leader" ]] \
    && pass "member$new_leader is the new leader" \
    || abort "leader after the kill is '$new_leader' (the killed one was $leader)"
survivor=$(( leader % 3 + 1 ))
expect_value "$survivor" racaff/smoke "$value" "after the leader's death" || true
put "$survivor" racaff/while-down "written-without-member$leader" \
    && pass "a put with 2 of 3 members succeeds" || fail "a put with 2 of 3 members failed"

echo "== restart of member$leader"
"$ETCDNODES" restart "$leader" >/dev/null || abort "etcdnodes restart $leader"
expect_value "$leader" racaff/while-down "written-without-member$leader" \
    "the restarted member caught up with a write it missed" || true
expect_value "$leader" racaff/smoke "$value" "the restarted member kept its data" || true
[[ $("$ETCDNODES" status | grep -c ' up') == 3 ]] && pass "status: 3 members up again" \
    || fail "status: $("$ETCDNODES" status)"

echo "== destroy"
pids=$(cat "$RACAFF_ETCD_DIR"/member*/etcd.pid)
"$ETCDNODES" destroy >/dev/null || abort "etcdnodes destroy"
finished=1
alive=""
for pid in $pids; do
    # a zombie (state Z) is dead; PID 1 of a container may reap it late
    [[ -r /proc/$pid/stat && $(awk '{print $3}' "/proc/$pid/stat") != Z ]] && alive+=" $pid"
done
[[ -z $alive ]] && pass "destroy: no etcd process left" || fail "destroy: etcd pids still alive:$alive"
[[ ! -e $RACAFF_ETCD_DIR ]] && pass "destroy: $RACAFF_ETCD_DIR removed" || fail "destroy: $RACAFF_ETCD_DIR still exists"
