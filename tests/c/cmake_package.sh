#!/usr/bin/env bash
# The CMake package as a user meets it: configure tests/c/cmake_consumer (a
# copy outside the repository) against an install prefix's package (copied,
# PREFIX is only read) with CMAKE_PREFIX_PATH, build it, run the shared and
# the static consumer.
#
#   tests/c/cmake_package.sh PREFIX     (after make install PREFIX=PREFIX)
#
# tests/c/run.sh calls it after its own `make install PREFIX=<tmp>`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
prefix=${1:?usage: cmake_package.sh PREFIX}
log=target/c-tests/cmake.log
mkdir -p target/c-tests
work=$(mktemp -d "${TMPDIR:-/tmp}/racaffinity-cmake.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r tests/c/cmake_consumer "$work/consumer"
# The consumer is built against a copy of the package's files: the deploy
# check below takes the library away, and PREFIX may be a user's, which a
# kill in that window would leave without it. The package's paths are
# relative to its own file, so a moved tree is one a user may meet too.
copy=$work/prefix
for f in include/racaffinity.h lib/libracaffinity.so lib/libracaffinity.a lib/cmake/racaffinity; do
    if [[ ! -e $prefix/$f ]]; then
        echo "cmake_package.sh: $prefix/$f is missing (make install PREFIX=$prefix)" >&2
        exit 1
    fi
    mkdir -p "$copy/$(dirname "$f")"
    cp -RL "$prefix/$f" "$copy/$f"
done
if ! { cmake -S "$work/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$copy" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$work/build"; } >"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "cmake_package.sh: the consumer project did not configure or build (log: $log)" >&2
    exit 1
fi
# The shared consumer finds the installed library through the RPATH CMake
# records for an imported target, not through LD_LIBRARY_PATH.
env -u LD_LIBRARY_PATH "$work/build/consumer"
env -u LD_LIBRARY_PATH "$work/build/consumer_static"
if readelf -d "$work/build/consumer_static" | grep 'NEEDED.*libracaffinity' >/dev/null; then
    echo "cmake_package.sh: consumer_static needs libracaffinity.so" >&2
    exit 1
fi
# Deployed elsewhere: the shared consumer must find the library by name (as a
# pkg-config build does), not by the path of the prefix it was built against.
# With the prefix's copy gone, a copy in another directory on
# LD_LIBRARY_PATH must serve it.
mkdir "$work/deploy"
mv "$copy/lib/libracaffinity.so" "$work/deploy/"
if ! LD_LIBRARY_PATH="$work/deploy" "$work/build/consumer"; then
    readelf -d "$work/build/consumer" | grep NEEDED >&2
    echo "cmake_package.sh: the shared consumer does not load libracaffinity.so from LD_LIBRARY_PATH once the prefix's copy is gone" >&2
    exit 1
fi
echo "  find_package(racaffinity CONFIG REQUIRED): shared and static consumers built and ran"
