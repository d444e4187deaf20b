#!/usr/bin/env bash
# The CMake package as a user meets it: configure tests/c/cmake_consumer (a
# copy outside the repository) against an install prefix with
# CMAKE_PREFIX_PATH, build it, run the shared and the static consumer.
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
if ! { cmake -S "$work/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release &&
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
mv "$prefix/lib/libracaffinity.so" "$work/deploy/"
trap 'mv "$work/deploy/libracaffinity.so" "$prefix/lib/"; rm -rf "$work"' EXIT
if ! LD_LIBRARY_PATH="$work/deploy" "$work/build/consumer"; then
    readelf -d "$work/build/consumer" | grep NEEDED >&2
    echo "cmake_package.sh: the shared consumer does not load libracaffinity.so from LD_LIBRARY_PATH once the prefix's copy is gone" >&2
    exit 1
fi
echo "  find_package(racaffinity CONFIG REQUIRED): shared and static consumers built and ran"
