#!/usr/bin/env bash
# java/run_bench.sh - JMH benchmarks of the Java binding, short mode by default:
#   (a) a no-op JNI call against a pinned pick through JNI;
#   (b) AffinityDataSource.getConnection()+close() over HikariCP node pools against
#       bare HikariCP getConnection()+close() on the same node (and both with SELECT 1);
#   (c) a request (connection, auto-commit off, SELECT 1, COMMIT, close) through an
#       AffinityDataSource with replay on against the same without replay.
# Side by side in one JMH run; prints the ratios. Nodes are started as needed and
# stopped on exit if this script started them.
#   RACAFF_BENCH_FULL=1   2 forks, 5 x 2 s warm-up, 10 x 2 s measurement (default: 1 fork, 3 x 1 s, 5 x 1 s)
#   RACAFF_MVN_OFFLINE=1  mvn -o
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PGNODES=tests/cluster/pgnodes
CARGO=${CARGO:-cargo}
MVN=${MVN:-mvn}
JAVA=${JAVA:-java}

"$CARGO" build --release -p racaffinity-ffi
mvn_args=(-q -f java -Pbench package -DskipTests)
[[ ${RACAFF_MVN_OFFLINE:-0} == 1 ]] && mvn_args+=(-o)
"$MVN" "${mvn_args[@]}"

if [[ $("$PGNODES" status 2>/dev/null | grep -c '^node[1-3] up ') != 3 ]]; then
    trap '"$PGNODES" stop >/dev/null || true' EXIT
    "$PGNODES" start 3 >/dev/null
fi
eval "$("$PGNODES" env)"   # RACAFF_NODE<i>_URL for the DataSource benchmark

if [[ ${RACAFF_BENCH_FULL:-0} == 1 ]]; then
    jmh=(-f 2 -wi 5 -w 2s -i 10 -r 2s)
else
    jmh=(-f 1 -wi 3 -w 1s -i 5 -r 1s)
fi
out=java/target/jmh-result.json
"$JAVA" -jar java/target/racaffinity-0.2.0-benchmarks.jar "${jmh[@]}" -rf json -rff "$out" "$@"

python3 - "$out" <<'PY'
import json, sys
r = {b["benchmark"].rsplit(".", 1)[-1]: b["primaryMetric"] for b in json.load(open(sys.argv[1]))}
def ns(k):
    return r[k]["score"] if k in r else float("nan")
rows = [
    ("(a) pinned route: Cluster.route() / no-op JNI call", "pinnedRoute", "noop", 2.0),
    ("    raw Native.contextRoute / no-op JNI call", "nativePinnedRoute", "noop", None),
    ("    pick()+release(OK) / no-op JNI call", "pinnedPickRelease", "noop", None),
    ("(b) AffinityDataSource get+close / bare HikariCP get+close", "affinityPinned", "bareHikari", 1.15),
    ("    unpinned AffinityDataSource get+close / bare HikariCP get+close", "affinityUnpinned", "bareHikari", 1.6),
    ("    ... with SELECT 1 / bare HikariCP with SELECT 1", "affinityPinnedSelect1", "bareHikariSelect1", None),
    ("(c) request, replay on / replay off", "replayOn", "replayOff", None),
]
print()
print(f"{'comparison':62} {'ours ns':>10} {'base ns':>10} {'ratio':>7}  target")
for label, a, b, target in rows:
    ratio = ns(a) / ns(b)
    t = "" if target is None else f"<= {target}x " + ("met" if ratio <= target else "NOT met")
    print(f"{label:62} {ns(a):10.1f} {ns(b):10.1f} {ratio:6.2f}x  {t}")
PY

# The routing ratios again, interleaved in one process (round by round, thread
# CPU time): what docs/performance.md and tools/perf_table.py report.
"$JAVA" -cp java/target/racaffinity-0.2.0-benchmarks.jar io.racaffinity.InterleavedBench 21 \
    | tee java/target/interleaved.out
# AffinityDataSource against bare HikariCP over the same pool, in a JVM of its own.
"$JAVA" -cp java/target/racaffinity-0.2.0-benchmarks.jar io.racaffinity.InterleavedBench 21 --datasource \
    | tee -a java/target/interleaved.out
# Unpinned pick() + release(OK) against the raw two-call path it replaced, in a JVM of its own.
"$JAVA" -cp java/target/racaffinity-0.2.0-benchmarks.jar io.racaffinity.InterleavedBench 21 --unpinned \
    | tee -a java/target/interleaved.out
# What an XA call pays to key its Xid (XidKey.of, one JNI call), in a JVM of its own.
"$JAVA" -cp java/target/racaffinity-0.2.0-benchmarks.jar io.racaffinity.InterleavedBench 21 --xid \
    | tee -a java/target/interleaved.out
# Request replay's recording cost on a SELECT 1 request, wall and CPU time, in a JVM of its own.
"$JAVA" -cp java/target/racaffinity-0.2.0-benchmarks.jar io.racaffinity.InterleavedBench 21 --replay \
    | tee -a java/target/interleaved.out
