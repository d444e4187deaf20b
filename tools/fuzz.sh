#!/usr/bin/env bash
# Runs cargo-fuzz targets one after another, one libFuzzer job at a time
# (-jobs=1: the test machines are small and shared).
#
#   tools/fuzz.sh SECONDS [TARGET...]          each target for SECONDS
#   tools/fuzz.sh --total SECONDS [TARGET...]  SECONDS for all of them: each
#       target gets the time left divided by the targets left, so the time a
#       target does not use (see FUZZ_RUNS) goes to the ones after it
#
# FUZZ_RUNS=N stops a target once it has run N inputs (libFuzzer -runs).
# Default targets: every one in fuzz/Cargo.toml, in its order (fastest
# first, so that with --total the slowest gets what the others leave).
#
# Each target reads its committed seeds (fuzz/corpus/<target>/) and
# regressions (fuzz/regressions/<target>/) and grows a working corpus under
# target/fuzz/corpus/<target>/, so the checked-in seeds stay small. Crash
# inputs land in target/fuzz/artifacts/<target>/. Prints one summary line per
# target (runs, exec/s, seconds, crashes) and exits 1 if any target failed.
# Called by `make fuzz` / `make test-fuzz`, which install cargo-fuzz first and
# skip (exit 0, with a message) when no nightly toolchain is present.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOTAL=
if [ "${1:-}" = --total ]; then TOTAL=1; shift; fi
SECONDS_ARG=${1:?usage: tools/fuzz.sh [--total] SECONDS [TARGET...]}
shift
RUNS=${FUZZ_RUNS:-}
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  mapfile -t TARGETS < <(sed -n 's/^name = "\([a-z_0-9]*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^racaffinity')
fi
CARGO=${CARGO:-cargo}
OUT=$ROOT/target/fuzz
mkdir -p "$OUT/logs"

# The sanitizer per target. capi_sequence calls rust/ffi's `unsafe` code
# through raw pointers, so it runs under AddressSanitizer. The other targets
# only reach the core, which is `#![forbid(unsafe_code)]`: ASan would find
# nothing there and would cost half their speed, so they run without one, in
# their own target directory (switching sanitizers in one directory rebuilds
# everything each time).
# capi_sequence is also built without trace-compares (CMP-guided mutation):
# its inputs are read through `arbitrary`, which takes every choice modulo
# its range, so no comparison of a magic value guards its code, and the
# comparison hooks cost a third of its time (docs/fuzzing.md, "Throughput").
sanitizer() { case $1 in capi_sequence) echo address ;; *) echo none ;; esac; }
build_args() {
  if [ "$(sanitizer "$1")" = none ]; then echo "-s none --target-dir $ROOT/fuzz/target/plain"
  else echo "-s address --no-trace-compares"; fi
}
# ASan records the stack of every allocation and free for its reports: a
# sixth of capi_sequence's time. The fuzzing loop skips that (detection is
# the same); the reproduce command printed on a failure runs with full stacks.
asan_options() { case $1 in capi_sequence) echo "malloc_context_size=0" ;; *) echo "" ;; esac; }
# Extra libFuzzer flags per target: sequences need room for many calls.
extra_args() { case $1 in capi_sequence) echo "-max_len=4096 -len_control=10" ;; *) echo "" ;; esac; }

# Build every target up front, so the time limit is spent fuzzing.
for t in "${TARGETS[@]}"; do
  # shellcheck disable=SC2046
  "$CARGO" +nightly fuzz build --fuzz-dir "$ROOT/fuzz" -O $(build_args "$t") "$t"
done

status=0
summary=()
left=$SECONDS_ARG
n_left=${#TARGETS[@]}
for t in "${TARGETS[@]}"; do
  if [ -n "$TOTAL" ]; then SECONDS_EACH=$(( left / n_left )); else SECONDS_EACH=$SECONDS_ARG; fi
  # libFuzzer reads -max_total_time=0 as "no limit".
  [ "$SECONDS_EACH" -ge 1 ] || SECONDS_EACH=1
  n_left=$(( n_left - 1 ))
  started=$(date +%s)
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t" "$OUT/logs/$t" "fuzz/corpus/$t" "fuzz/regressions/$t"
  args=(-max_total_time="$SECONDS_EACH" -jobs=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$OUT/artifacts/$t/")
  [ -n "$RUNS" ] && args+=(-runs="$RUNS")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$t.dict")
  # shellcheck disable=SC2206
  args+=($(extra_args "$t"))
  echo "== fuzz $t for ${SECONDS_EACH}s (log: target/fuzz/logs/$t/fuzz-0.log)"
  before=$(ls "$OUT/artifacts/$t" | wc -l)
  # -jobs=1 makes libFuzzer write the job's output to fuzz-0.log in the
  # working directory: run it inside the target's log directory.
  rc=0
  (cd "$OUT/logs/$t" && rm -f fuzz-0.log && ASAN_OPTIONS=$(asan_options "$t") "$CARGO" +nightly fuzz run --fuzz-dir "$ROOT/fuzz" -O $(build_args "$t") "$t" \
     "$OUT/corpus/$t" "$ROOT/fuzz/corpus/$t" "$ROOT/fuzz/regressions/$t" -- "${args[@]}") >"$OUT/logs/$t/run.log" 2>&1 || rc=$?
  log=$OUT/logs/$t/fuzz-0.log
  [ -f "$log" ] || log=$OUT/logs/$t/run.log
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -1 | awk '{print $2}')
  [ -n "$runs" ] || runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
  crashes=$(( $(ls "$OUT/artifacts/$t" | wc -l) - before ))
  took=$(( $(date +%s) - started ))
  left=$(( left > took ? left - took : 0 ))
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || grep -q -E '^==[0-9]+== ERROR|deadly signal|panicked at' "$log"; then
    status=1
    echo "!! $t FAILED (exit $rc); the end of its log:"
    tail -40 "$log"
    echo "!! crash inputs: target/fuzz/artifacts/$t/ ; reproduce: cargo +nightly fuzz run --fuzz-dir fuzz -O $(build_args "$t") $t <file>"
  fi
  summary+=("$(printf '%-18s runs=%-12s exec/s=%-8s seconds=%-6s crashes=%s' "$t" "${runs:-?}" "${eps:-?}" "$took" "$crashes")")
done
if [ -n "$TOTAL" ]; then budget="${SECONDS_ARG}s in all"; else budget="${SECONDS_ARG}s each"; fi
echo "== fuzz summary ($(date -u +%Y-%m-%d), $budget${RUNS:+, at most $RUNS runs each})"
printf '%s\n' "${summary[@]}"
exit $status
