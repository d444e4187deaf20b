#!/usr/bin/env bash
# demo/build.sh - build what `make demo` runs, after `make lib` and `make jar`:
#   - target/pyenv: a virtualenv with `pip install ./python[test]` (racaffinity
#     over the fresh libracaffinity, psycopg), as python/run_tests.sh does;
#   - target/demo/client_c: demo/client.c against target/release/libracaffinity.so and libpq;
#   - target/demo/java/DemoClient.class against java/target/racaffinity-0.2.0.jar,
#     and target/demo/java.classpath (that jar, and pgjdbc, HikariCP and slf4j from the local
#     Maven repository, fetched with mvn when missing).
# Then run the demo with: target/pyenv/bin/python demo/run.py
#
# Environment: PYTHON (default python3), CC (default cc), JAVAC (default javac),
# M2_REPO (default ~/.m2/repository), RACAFF_PY_VENV (default target/pyenv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
OUT=$ROOT/target/demo
PYTHON=${PYTHON:-python3}
VENV=${RACAFF_PY_VENV:-$ROOT/target/pyenv}
CC=${CC:-cc}
JAVAC=${JAVAC:-javac}
M2_REPO=${M2_REPO:-$HOME/.m2/repository}
LIB=$ROOT/target/release/libracaffinity.so
JAR=$ROOT/java/target/racaffinity-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1).jar

die() { echo "demo/build.sh: $*" >&2; exit 2; }
[[ -f $LIB ]] || die "$LIB is missing: run 'make lib' first"
[[ -f $JAR ]] || die "$JAR is missing: run 'make jar' first"
command -v "$CC" >/dev/null || die "no C compiler '$CC' (apt-get install gcc)"
command -v pg_config >/dev/null || die "pg_config not found: apt-get install libpq-dev"
command -v "$JAVAC" >/dev/null || die "no '$JAVAC' (a JDK >= 17)"
mkdir -p "$OUT/java"

# Python: the binding and psycopg, as python/run_tests.sh installs them.
if [[ ! -x $VENV/bin/python ]]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "./python[test]"

# C
"$CC" -std=c11 -Wall -Wextra -Werror -O2 -Iinclude -I"$(pg_config --includedir)" demo/client.c \
    -o "$OUT/client_c" -L"$ROOT/target/release" -Wl,-rpath,"$ROOT/target/release" -lracaffinity \
    -L"$(pg_config --libdir)" -lpq -pthread

# Java: pgjdbc is the version java/pom.xml tests with (make jar has fetched it).
PGJDBC_VERSION=$(sed -n 's:.*<postgresql.version>\(.*\)</postgresql.version>.*:\1:p' java/pom.xml | head -1)
PGJDBC=$M2_REPO/org/postgresql/postgresql/$PGJDBC_VERSION/postgresql-$PGJDBC_VERSION.jar
[[ -f $PGJDBC ]] || die "$PGJDBC is missing: 'make jar' (mvn package) downloads it; or set M2_REPO"
# The soak's replay-enabled Java client (DemoClient --replay) runs AffinityDataSource over HikariCP
# node pools, the versions java/pom.xml tests with; fetched when a build skipped the tests' dependencies.
pom_version() { sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" java/pom.xml | head -1; }
HIKARI_VERSION=$(pom_version hikaricp.version)
SLF4J_VERSION=$(pom_version slf4j.version)
HIKARI=$M2_REPO/com/zaxxer/HikariCP/$HIKARI_VERSION/HikariCP-$HIKARI_VERSION.jar
SLF4J_API=$M2_REPO/org/slf4j/slf4j-api/$SLF4J_VERSION/slf4j-api-$SLF4J_VERSION.jar
SLF4J_NOP=$M2_REPO/org/slf4j/slf4j-nop/$SLF4J_VERSION/slf4j-nop-$SLF4J_VERSION.jar
for artifact in com.zaxxer:HikariCP:$HIKARI_VERSION org.slf4j:slf4j-api:$SLF4J_VERSION org.slf4j:slf4j-nop:$SLF4J_VERSION; do
    IFS=: read -r g a v <<< "$artifact"
    f=$M2_REPO/${g//.//}/$a/$v/$a-$v.jar
    if [[ ! -f $f ]]; then
        command -v mvn >/dev/null || die "$f is missing and there is no mvn to fetch it"
        mvn -q dependency:get -Dartifact="$artifact" -Dtransitive=false >/dev/null || die "mvn could not fetch $artifact"
    fi
done
"$JAVAC" -Xlint:all -Werror -d "$OUT/java" -cp "$JAR:$PGJDBC" demo/DemoClient.java
echo "$OUT/java:$JAR:$PGJDBC:$HIKARI:$SLF4J_API:$SLF4J_NOP" > "$OUT/java.classpath"
echo "demo/build.sh: built $OUT/client_c, $OUT/java/DemoClient.class, $VENV"
