#!/usr/bin/env bash
# The C ABI against its checked-in baseline (docs/c.md, "Versions and ABI").
#
#   tools/abi.sh check LIB      make check-abi: LIB's ABI against abi/racaffinity-<newest <= version>.abi
#   tools/abi.sh baseline LIB   make abi-baseline: writes abi/racaffinity-<version>.abi (at a release)
#
# LIB is a libracaffinity.so with DWARF types: the dev-profile build (the
# release profile strips them). Its ABI is what libabigail's abidw reads from
# it: every exported racaffinity_* function with its parameter and return
# types, down to each struct's fields, sizes and offsets and each enum's
# values. The Java_* exports are the jar's private interface (the loader
# refuses a library of another version), so they are left out.
#
# A change is incompatible when abidiff, with added functions left out,
# still reports one: a function removed or its signature changed, a public
# struct or enum changed (enumerators added are harmless to libabigail and
# pass). Incompatible changes pass only under a breaking version bump from the
# baseline's (semver: the major; the minor while the major is 0).
#
# abidw/abidiff come from Debian's abigail-tools, installed here when missing
# (apt-get, as CI runs as root).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
SUPP=$ROOT/abi/suppressions.txt

ensure_abigail() {
    command -v abidw >/dev/null && command -v abidiff >/dev/null && return 0
    echo "tools/abi.sh: installing abigail-tools (abidw, abidiff)"
    if [[ $(id -u) -ne 0 ]]; then
        echo "tools/abi.sh: abigail-tools is missing and this is not root: apt-get install abigail-tools" >&2
        exit 2
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq abigail-tools >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq abigail-tools >/dev/null
    }
}

version() { python3 tools/version.py show; }

# A deterministic dump: no absolute paths of this machine.
dump() {
    abidw --suppressions "$SUPP" --no-corpus-path --no-comp-dir-path --short-locs --drop-undefined-syms --type-id-style hash "$1" >"$2"
}

# Newest baseline whose version is <= the current one.
baseline_for() {
    local want=$1
    local f best="" bestv=""
    for f in abi/racaffinity-*.abi; do
        [[ -e $f ]] || continue
        local v=${f#abi/racaffinity-}
        v=${v%.abi}
        if [[ $(printf '%s\n%s\n' "$v" "$want" | sort -V | tail -1) == "$want" ]]; then
            if [[ -z $bestv || $(printf '%s\n%s\n' "$v" "$bestv" | sort -V | tail -1) == "$v" ]]; then
                best=$f
                bestv=$v
            fi
        fi
    done
    echo "$best"
}

# Is moving from $1 to $2 a breaking bump (semver; 0.x: the minor)?
breaking_bump() {
    local a=(${1//./ }) b=(${2//./ })
    [[ ${a[0]} != "${b[0]}" ]] && return 0
    [[ ${a[0]} == 0 && ${a[1]} != "${b[1]}" ]] && return 0
    return 1
}

cmd=${1:-}
lib=${2:-}
[[ -n $cmd && -n $lib ]] || { sed -n '2,6p' "$0" >&2; exit 2; }
[[ -f $lib ]] || { echo "tools/abi.sh: $lib is not built" >&2; exit 2; }
ensure_abigail
ver=$(version)
mkdir -p target/abi

case $cmd in
baseline)
    # A released baseline is history: rewriting it would hide the very change
    # check-abi exists to catch. A new version gets a new file.
    if [[ -e abi/racaffinity-$ver.abi && ${ABI_BASELINE_FORCE:-0} != 1 ]]; then
        echo "tools/abi.sh: abi/racaffinity-$ver.abi exists; a release bumps the version first" \
            "(tools/version.py set), or ABI_BASELINE_FORCE=1 rewrites it" >&2
        exit 1
    fi
    dump "$lib" "abi/racaffinity-$ver.abi"
    echo "tools/abi.sh: wrote abi/racaffinity-$ver.abi ($(grep -c '<elf-symbol ' "abi/racaffinity-$ver.abi") symbols)"
    ;;
check)
    base=$(baseline_for "$ver")
    if [[ -z $base ]]; then
        echo "tools/abi.sh: no baseline at or below $ver in abi/ (make abi-baseline at a release)" >&2
        exit 1
    fi
    basever=${base#abi/racaffinity-}
    basever=${basever%.abi}
    dump "$lib" target/abi/current.abi
    set +e
    abidiff --suppressions "$SUPP" --no-added-syms "$base" target/abi/current.abi >target/abi/incompatible.txt 2>&1
    rc=$?
    abidiff --suppressions "$SUPP" "$base" target/abi/current.abi >target/abi/diff.txt 2>&1
    set -e
    # abidiff's status is a bit field: 1 error, 2 usage, 4 ABI change, 8 incompatible change.
    if (((rc & 3) != 0)); then
        cat target/abi/incompatible.txt >&2
        echo "tools/abi.sh: abidiff failed (status $rc)" >&2
        exit 2
    fi
    if ((rc == 0)); then
        added=$(grep -Eo '[0-9]+ Added function' target/abi/diff.txt | grep -Eo '^[0-9]+' || echo 0)
        echo "check-abi: the C ABI of $ver is compatible with $base (functions added since: $added)"
        exit 0
    fi
    if breaking_bump "$basever" "$ver"; then
        echo "check-abi: incompatible with $base, allowed by the version bump $basever -> $ver" \
            "(write abi/racaffinity-$ver.abi with make abi-baseline when releasing):"
        sed 's/^/  /' target/abi/incompatible.txt
        exit 0
    fi
    echo "check-abi: the C ABI changed incompatibly since $base, and $ver is no breaking bump from $basever:" >&2
    sed 's/^/  /' target/abi/incompatible.txt >&2
    echo "check-abi: keep the ABI, or bump the version (tools/version.py set; docs/c.md, 'Versions and ABI')" >&2
    exit 1
    ;;
*)
    sed -n '2,6p' "$0" >&2
    exit 2
    ;;
esac
