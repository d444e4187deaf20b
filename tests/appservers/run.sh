#!/usr/bin/env bash
# tests/appservers/run.sh - the app-server tests (make test-appservers): a real Tomcat
# distribution (Maven Central, unpacked under java/appservers/target/) runs a web
# application over racaffinity.jar and 3 local PostgreSQL nodes; see
# java/appservers/src/test/java/io/racaffinity/appservers/TomcatRedeployTest.java.
#
# Steps: build libracaffinity, install racaffinity.jar into the local Maven repository
# (the test module resolves it like any other artifact), start the nodes if they are not
# running (stopped again on exit), run `mvn test` in java/appservers.
#
# Environment: RACAFF_PG_BASE_PORT / RACAFF_PG_DIR (the nodes, as for pgnodes),
# RACAFF_TOMCAT_PORT (HTTP port of the first Tomcat, default 53880; the next one uses +1),
# RACAFF_MVN_OFFLINE=1 (mvn -o), MVN, CARGO; extra arguments go to mvn (e.g. -Dtest=...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PGNODES=tests/cluster/pgnodes
CARGO=${CARGO:-cargo}
MVN=${MVN:-mvn}
mvn_opts=(-q)
[[ ${RACAFF_MVN_OFFLINE:-0} == 1 ]] && mvn_opts+=(-o)

"$CARGO" build --release -p racaffinity-ffi
"$MVN" "${mvn_opts[@]}" -f java install -Dmaven.test.skip=true

if [[ $("$PGNODES" status 2>/dev/null | grep -c '^node[1-3] up ') != 3 ]]; then
    trap '"$PGNODES" stop >/dev/null || true' EXIT
    "$PGNODES" start 3 >/dev/null
fi
eval "$("$PGNODES" env)"

rm -rf java/appservers/target/surefire-reports
status=0
"$MVN" "${mvn_opts[@]}" -f java/appservers test "-Dracaffinity.tomcat.port=${RACAFF_TOMCAT_PORT:-53880}" "$@" || status=$?

# One closing line (mvn -q prints none on success).
python3 - <<'PY' || true
import glob, xml.etree.ElementTree as ET
t = f = e = s = 0
for p in glob.glob("java/appservers/target/surefire-reports/TEST-*.xml"):
    r = ET.parse(p).getroot()
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0)); e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
print(f"appservers: {t - f - e - s} passed, {f + e} failed, {s} skipped")
PY
exit $status
