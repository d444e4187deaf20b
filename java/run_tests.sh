#!/usr/bin/env bash
# java/run_tests.sh - build libracaffinity and run the Java tests (`mvn verify`):
# unit tests, the shared vectors, the JDBC/JMX/failover tests against 3 local
# PostgreSQL nodes, the virtual-thread tests on a JDK >= 21, the panic test on
# the `testing` build of the library, the packaged-jar quick start, and the
# XA/JTA/app-server tests: Narayana 2PC over AffinityXADataSource (500 global
# transactions, with and without affinity), crash recovery of a SIGKILLed TM
# JVM, the XA fault tests (killed/restarted nodes, refused connections, errors at
# PREPARE) and the RAC model (recovery.scope = database: three Toxiproxy instances
# of one node, tests/cluster/faults), the failure matrix of issue 11 (xa.FailureMatrixTest: each XA phase x
# each fault x soft/strict x both models under Narayana, about 2 minutes; writes target/failure-matrix/java.json
# and prints its table), the replay dimension of issue 29's failure matrix (jdbc.ReplayMatrixTest: each
# step of a request x each fault x both models with replay on, about 1 minute; writes
# target/failure-matrix/replay-java.json), JTA routing of AffinityDataSource, and embedded Tomcat (JNDI factory +
# web-session filter). Maven downloads Narayana and Tomcat (test scope).
#
# Ports: the nodes are pgnodes' (RACAFF_PG_BASE_PORT, default 55431; data in
# RACAFF_PG_DIR); every test, including the crash test's child JVM, uses them.
#
# Nodes are started as needed (tests/cluster/pgnodes) and stopped on exit if
# this script started them. Environment:
#   RACAFF_VT_JAVA=/path/bin/java   JDK >= 21 for the virtual-thread tests
#                                   (default: Temurin 25 in /usr/lib/jvm, else any JDK >= 21 there)
#   RACAFF_SKIP_VIRTUAL_THREADS=1   run without them when no such JDK exists (they are required otherwise)
#   RACAFF_MVN_OFFLINE=1            mvn -o (every version is pinned: works after one online build)
#   CARGO, MVN                      tool overrides
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PGNODES=tests/cluster/pgnodes
CARGO=${CARGO:-cargo}
MVN=${MVN:-mvn}

jdk_feature() { # major version of a java binary
    "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' | head -1
}

vt_java=${RACAFF_VT_JAVA:-}
if [[ -z $vt_java ]]; then
    for j in /usr/lib/jvm/temurin-25-jdk-amd64/bin/java /usr/lib/jvm/*/bin/java; do
        if [[ -x $j ]] && (( $(jdk_feature "$j" || echo 0) >= 21 )); then vt_java=$j; break; fi
    done
fi
mvn_args=(-q -f java verify -Pnative-panic)
if [[ -n $vt_java ]] && [[ -x $vt_java ]] && (( $(jdk_feature "$vt_java" || echo 0) >= 21 )); then
    mvn_args+=(-Pvirtual-threads "-Dracaffinity.vt.jvm=$vt_java")
elif [[ ${RACAFF_SKIP_VIRTUAL_THREADS:-0} == 1 ]]; then
    echo "run_tests.sh: no JDK >= 21 found: SKIPPING the virtual-thread tests (RACAFF_SKIP_VIRTUAL_THREADS=1)" >&2
    mvn_args+=('-P!virtual-threads')
else
    echo "run_tests.sh: the virtual-thread tests need a JDK >= 21: set RACAFF_VT_JAVA=/path/to/bin/java" \
         "(or RACAFF_SKIP_VIRTUAL_THREADS=1 to run without them)" >&2
    exit 2
fi
[[ ${RACAFF_MVN_OFFLINE:-0} == 1 ]] && mvn_args+=(-o)

# The library the jar bundles, and the `testing` build for the panic test (Makefile: lib, lib-testing).
"$CARGO" build --release -p racaffinity-ffi
"$CARGO" build --release -p racaffinity-ffi --features testing --target-dir target/ffi-testing

# Toxiproxy for the RAC-model XA tests (three proxied instances of one node): a no-op once the pinned
# version is in target/tools/bin (tests/cluster/faults install builds it with `go install` otherwise).
tests/cluster/faults install >/dev/null

if [[ $("$PGNODES" status 2>/dev/null | grep -c '^node[1-3] up ') != 3 ]]; then
    trap '"$PGNODES" stop >/dev/null || true' EXIT
    "$PGNODES" start 3 >/dev/null
fi

rm -rf java/target/surefire-reports java/target/failsafe-reports
status=0
"$MVN" "${mvn_args[@]}" || status=$?

# One closing line over every surefire/failsafe execution.
python3 - <<'PY' || true
import glob, xml.etree.ElementTree as ET
t = f = e = s = 0
for p in glob.glob("java/target/surefire-reports/TEST-*.xml") + glob.glob("java/target/failsafe-reports/TEST-*.xml"):
    r = ET.parse(p).getroot()
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0)); e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
print(f"java: {t - f - e - s} passed, {f + e} failed, {s} skipped")
PY
exit $status
