#!/usr/bin/env bash
# java/run_module_tests.sh MODULE [mvn args...] - run the tests of one of the Java
# integration modules (java/appservers, java/micrometer) against 3 local PostgreSQL nodes.
#
# Steps: build libracaffinity, install racaffinity.jar into the local Maven repository
# (the modules resolve it like any other artifact), start the nodes if they are not
# running (stopped again on exit), export RACAFF_NODEi_PORT/URL, run `mvn test` in MODULE,
# print one closing line "MODULE: N passed, N failed, N skipped".
#
# Environment: RACAFF_PG_BASE_PORT / RACAFF_PG_DIR (the nodes, as for pgnodes),
# RACAFF_MVN_OFFLINE=1 (mvn -o), MVN, CARGO; for java/micrometer RACAFF_PY_VENV (the
# virtualenv of Python's exporter, default target/pyenv, created and updated here) and PYTHON.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
module=${1:?usage: java/run_module_tests.sh MODULE [mvn args...]}
shift
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

# java/micrometer's MetricNamesTest compares with Python's exporter: the Python package and
# its test extras (the OpenTelemetry SDK and Prometheus exporter) in a virtualenv.
if [[ $module == java/micrometer || $module == java/micrometer/ ]]; then
    RACAFF_PY_VENV=${RACAFF_PY_VENV:-$PWD/target/pyenv}
    export RACAFF_PY_VENV
    [[ -x $RACAFF_PY_VENV/bin/python ]] || "${PYTHON:-python3}" -m venv "$RACAFF_PY_VENV"
    "$RACAFF_PY_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "./python[test]"
fi

rm -rf "$module/target/surefire-reports"
status=0
"$MVN" "${mvn_opts[@]}" -f "$module" test "$@" || status=$?

# One closing line (mvn -q prints none on success).
MODULE=$module python3 - <<'PY' || true
import glob, os, xml.etree.ElementTree as ET
m = os.environ["MODULE"]
t = f = e = s = 0
for p in glob.glob(f"{m}/target/surefire-reports/TEST-*.xml"):
    r = ET.parse(p).getroot()
    t += int(r.get("tests", 0)); f += int(r.get("failures", 0)); e += int(r.get("errors", 0)); s += int(r.get("skipped", 0))
print(f"{os.path.basename(m)}: {t - f - e - s} passed, {f + e} failed, {s} skipped")
PY
exit $status
