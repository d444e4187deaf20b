#!/usr/bin/env bash
# The glibc floor of every shipped native (make check-portable):
#
#   tools/check_portable.sh FLOOR LIB_DIR JAR WHEEL_DIR
#
# - LIB_DIR/libracaffinity.so, the jar's io/racaffinity/native/linux-x86_64/
#   libracaffinity.so and the wheel's racaffinity/_native/libracaffinity.so:
#   the highest GLIBC_x.y among the symbol versions they import (objdump -T)
#   is at most FLOOR;
# - the wheel: `auditwheel show` says it is consistent with
#   manylinux_FLOOR_x86_64 (manylinux2014 for 2.17);
# - LIB_DIR/libracaffinity.a: an archive carries no symbol versions, so a
#   program is linked with it by `zig cc -target x86_64-linux-gnu.FLOOR`
#   (zig's glibc FLOOR stubs: a symbol newer than FLOOR does not link), its
#   imports are checked as above, and it runs.
# zig (python-zig/ziglang) and auditwheel must be on PATH (the Makefile's
# target/zig-tools and target/wheel-tools).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
(($# == 4)) || { sed -n '2,18p' "$0" >&2; exit 2; }
floor=$1 libdir=$2 jar=$3 wheeldir=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/racaffinity-portable.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0

# extract ZIP MEMBER OUT (python's zipfile: unzip may be missing).
extract() {
    python3 -c 'import sys, zipfile; open(sys.argv[3], "wb").write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' "$@" 2>/dev/null
}

# The highest GLIBC_ version a binary imports.
glibc_max() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1
}

at_most_floor() {
    local name=$1 file=$2 max
    max=$(glibc_max "$file")
    if [[ -z $max ]]; then
        echo "  FAIL $name: no GLIBC_ symbol versions found in $file" >&2
        fails=$((fails + 1))
    elif [[ $(printf '%s\n%s\n' "$max" "$floor" | sort -V | tail -1) != "$floor" ]]; then
        echo "  FAIL $name: needs GLIBC_$max, above the floor $floor:" >&2
        objdump -T "$file" | grep -E "GLIBC_$max\b" | awk '{print "         " $NF}' | head -5 >&2
        fails=$((fails + 1))
    else
        echo "  ok   $name: highest GLIBC_$max (floor $floor)"
    fi
}

echo "== shipped natives: glibc at most $floor"
at_most_floor "shared library ($libdir/libracaffinity.so)" "$libdir/libracaffinity.so"

if extract "$jar" io/racaffinity/native/linux-x86_64/libracaffinity.so "$work/jar.so" && [[ -s $work/jar.so ]]; then
    at_most_floor "the jar's native ($(basename "$jar"))" "$work/jar.so"
else
    echo "  FAIL the jar's native: $jar has no io/racaffinity/native/linux-x86_64/libracaffinity.so" >&2
    fails=$((fails + 1))
fi

shopt -s nullglob
wheels=("$wheeldir"/racaffinity-*.whl)
if ((${#wheels[@]} != 1)); then
    echo "  FAIL the wheel: expected one wheel in $wheeldir, found ${#wheels[@]}" >&2
    fails=$((fails + 1))
else
    wheel=${wheels[0]}
    if extract "$wheel" racaffinity/_native/libracaffinity.so "$work/wheel.so" && [[ -s $work/wheel.so ]]; then
        at_most_floor "the wheel's native ($(basename "$wheel"))" "$work/wheel.so"
    else
        echo "  FAIL the wheel's native: $wheel has no racaffinity/_native/libracaffinity.so" >&2
        fails=$((fails + 1))
    fi
    tag="manylinux_${floor//./_}_x86_64"
    auditwheel show "$wheel" >"$work/auditwheel.txt" 2>&1 || true
    if tr -s ' \n' ' ' <"$work/auditwheel.txt" | grep -q "consistent with the following platform tag: \"$tag\""; then
        echo "  ok   auditwheel show: $(basename "$wheel") is consistent with $tag"
    else
        echo "  FAIL auditwheel show: $(basename "$wheel") is not consistent with $tag:" >&2
        sed 's/^/         /' "$work/auditwheel.txt" >&2
        fails=$((fails + 1))
    fi
    case $(basename "$wheel") in
    *manylinux2014_x86_64*|*"$tag"*) echo "  ok   the wheel's tag: $(basename "$wheel")" ;;
    *) echo "  FAIL the wheel's tag: $(basename "$wheel") is not $tag / manylinux2014" >&2; fails=$((fails + 1)) ;;
    esac
fi

# The static archive: linked against glibc $floor's stubs, then run here.
cat >"$work/static.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <racaffinity.h>
int main(void) {
    racaffinity_cluster *c = NULL;
    if (racaffinity_cluster_new("nodes = A, B, C", &c) != RACAFFINITY_RESULT_OK) return 1;
    racaffinity_route route;
    if (racaffinity_tx_begin(c, (const uint8_t *)"g", 1, &route) != RACAFFINITY_RESULT_OK) return 1;
    racaffinity_cluster_free(c);
    if (strcmp(racaffinity_version(), RACAFFINITY_VERSION) != 0) return 1;
    printf("%s\n", racaffinity_version());
    return 0;
}
EOF
if python-zig cc -target "x86_64-linux-gnu.$floor" -std=c11 -Iinclude "$work/static.c" "$libdir/libracaffinity.a" \
    -lpthread -ldl -lm -lunwind -o "$work/static" >"$work/static.log" 2>&1; then
    at_most_floor "static archive, linked against glibc $floor ($libdir/libracaffinity.a)" "$work/static"
    if out=$("$work/static" 2>&1); then
        echo "  ok   the statically linked program runs: version $out"
    else
        echo "  FAIL the statically linked program: $out" >&2
        fails=$((fails + 1))
    fi
else
    echo "  FAIL static archive: does not link against glibc $floor:" >&2
    grep -E 'undefined|error' "$work/static.log" | head -10 | sed 's/^/         /' >&2
    fails=$((fails + 1))
fi

if ((fails)); then
    echo "check-portable: $fails native(s) above glibc $floor" >&2
    exit 1
fi
echo "check-portable: every shipped native runs on glibc $floor and newer"
