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
# An input makes about 4,200 allocations (2.4 MB). With ASan's default 256 MB
# quarantine each one lands on memory that left the cache long ago, and the
# read of its chunk header was a fifth of the target's time; 16 MB still
# holds the frees of the last six inputs, so a use after free within an input
# (the only kind a sequence can make) is still caught. The 0xbe fill of new
# memory (max_malloc_fill_size) only makes uninitialised reads look alike; it
# reports nothing, and Rust cannot read uninitialised memory in safe code.
asan_options() { case $1 in capi_sequence) echo "malloc_context_size=0:quarantine_size_mb=16:max_malloc_fill_size=0" ;; *) echo "" ;; esac; }
# Extra libFuzzer flags per target: sequences need room for many calls.
# -reload: two workers share capi_sequence's working corpus; libFuzzer
# re-reads it every second by default, a stat of each of its ~10,000 files (5 %
# of the target's time), so every 10 s instead.
extra_args() { case $1 in capi_sequence) echo "-max_len=2048 -len_control=10 -reload=10" ;; *) echo "" ;; esac; }

# Build every target up front, so the time limit is spent fuzzing.
for t in "${TARGETS[@]}"; do
  # shellcheck disable=SC2046
  "$CARGO" +nightly fuzz build --fuzz-dir "$ROOT/fuzz" -O $(build_args "$t") "$t"
done

# One libFuzzer job: target $1 for $2 seconds as worker $3. Workers of one
# target share its working corpus (libFuzzer reloads it every second, so
# each sees what the other found) and its artifacts directory; each has its
# own log directory, because -jobs=1 writes fuzz-0.log in the working
# directory. Leaves "rc runs exec/s" in $OUT/logs/$t/w$3.result.
run_job() {
  local t=$1 secs=$2 w=$3 rc=0
  local dir=$OUT/logs/$t/w$w
  mkdir -p "$dir" "$OUT/corpus/$t" "$OUT/artifacts/$t" "fuzz/corpus/$t" "fuzz/regressions/$t"
  # libFuzzer reads -max_total_time=0 as "no limit".
  [ "$secs" -ge 1 ] || secs=1
  local args=(-max_total_time="$secs" -jobs=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$OUT/artifacts/$t/")
  [ -n "$RUNS" ] && args+=(-runs="$RUNS")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$t.dict")
  # shellcheck disable=SC2206
  args+=($(extra_args "$t"))
  echo "== fuzz $t for ${secs}s, worker $w (log: target/fuzz/logs/$t/w$w/fuzz-0.log)"
  # shellcheck disable=SC2046
  (cd "$dir" && rm -f fuzz-0.log && ASAN_OPTIONS=$(asan_options "$t") "$CARGO" +nightly fuzz run --fuzz-dir "$ROOT/fuzz" -O $(build_args "$t") "$t" \
     "$OUT/corpus/$t" "$ROOT/fuzz/corpus/$t" "$ROOT/fuzz/regressions/$t" -- "${args[@]}") >"$dir/run.log" 2>&1 || rc=$?
  local log=$dir/fuzz-0.log
  [ -f "$log" ] || log=$dir/run.log
  local runs eps
  # A crashed job has no "Done" line (and may have no stats): under
  # pipefail a grep that finds nothing would end the whole script here,
  # before the report, with the other worker left running.
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -1 | awk '{print $2}' || true)
  [ -n "$runs" ] || runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  if grep -q -E '^==[0-9]+== ERROR|deadly signal|panicked at' "$log"; then [ "$rc" -ne 0 ] || rc=99; fi
  echo "$rc ${runs:-0} ${eps:-0}" >"$OUT/logs/$t/w$w.result"
}

# The workers' results for target $1, as one summary line; sets status=1 and
# prints the failing log when a worker failed or a crash input appeared.
report() {
  local t=$1 took=$2 before=$3 runs=0 eps=0 rc= log= r n e f
  for f in "$OUT/logs/$t"/w*.result; do
    read -r r n e <"$f"
    runs=$(( runs + n )); eps=$(( eps + e ))
    if [ "$r" -ne 0 ]; then rc=$r; log="${f%.result}/fuzz-0.log"; fi
  done
  local crashes=$(( $(ls "$OUT/artifacts/$t" | wc -l) - before ))
  if [ -n "${rc:-}" ] || [ "$crashes" -ne 0 ]; then
    status=1
    echo "!! $t FAILED (exit ${rc:-0}); the end of its log:"
    [ -f "${log:-}" ] && tail -40 "$log"
    echo "!! crash inputs: target/fuzz/artifacts/$t/ ; reproduce: cargo +nightly fuzz run --fuzz-dir fuzz -O $(build_args "$t") $t <file>"
  fi
  local workers
  workers=$(ls "$OUT/logs/$t"/w*.result | wc -l)
  summary+=("$(printf '%-18s runs=%-12s exec/s=%-8s seconds=%-6s workers=%s crashes=%s' "$t" "$runs" "$eps" "$took" "$workers" "$crashes")")
}

# Stopped early (Ctrl-C, a CI timeout), take the libFuzzer processes along:
# with -jobs=1 each job is a child of a child of cargo, which a plain kill of
# this script leaves running (and fuzzing) for the rest of its time.
descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$c"; echo "$c"; done
}
stop_workers() {
  trap - INT TERM
  # shellcheck disable=SC2046
  kill $(descendants $$) 2>/dev/null || true
  exit 130
}
trap stop_workers INT TERM

status=0
summary=()
left=$SECONDS_ARG
n_left=${#TARGETS[@]}
# With --total and two or more cores (FUZZ_WORKERS, default the core count,
# at most 2), the last target (the slowest: capi_sequence under ASan, about
# 20 times slower per input than the next) does not wait its turn: it gets a
# worker of its own for the whole budget from the start, the others run one
# after another on the other core, and when they are done a second worker
# of the last target joins it for the time left. One job per core, as before.
WORKERS=${FUZZ_WORKERS:-$(nproc)}
[ "$WORKERS" -le 2 ] || WORKERS=2
EARLY=
if [ -n "$TOTAL" ] && [ "$WORKERS" -ge 2 ] && [ ${#TARGETS[@]} -ge 2 ]; then
  EARLY=${TARGETS[-1]}
  unset 'TARGETS[-1]'
  rm -f "$OUT/logs/$EARLY"/w*.result
  # (Made first: under pipefail an `ls` of a missing directory ended the
  # script here, silently, on a fresh clone.)
  mkdir -p "$OUT/artifacts/$EARLY"
  early_before=$(ls "$OUT/artifacts/$EARLY" | wc -l)
  early_started=$(date +%s)
  run_job "$EARLY" "$SECONDS_ARG" 0 &
  early_pid=$!
  n_left=${#TARGETS[@]}
fi
for t in "${TARGETS[@]}"; do
  if [ -n "$TOTAL" ]; then SECONDS_EACH=$(( left / n_left )); else SECONDS_EACH=$SECONDS_ARG; fi
  n_left=$(( n_left - 1 ))
  started=$(date +%s)
  mkdir -p "$OUT/artifacts/$t"
  before=$(ls "$OUT/artifacts/$t" | wc -l)
  rm -f "$OUT/logs/$t"/w*.result
  run_job "$t" "$SECONDS_EACH" 0
  took=$(( $(date +%s) - started ))
  left=$(( left > took ? left - took : 0 ))
  report "$t" "$took" "$before"
done
if [ -n "$EARLY" ]; then
  if [ "$left" -ge 10 ] && kill -0 "$early_pid" 2>/dev/null; then run_job "$EARLY" "$left" 1; fi
  wait "$early_pid" || true
  report "$EARLY" "$(( $(date +%s) - early_started ))" "$early_before"
fi
if [ -n "$TOTAL" ]; then budget="${SECONDS_ARG}s in all"; else budget="${SECONDS_ARG}s each"; fi
echo "== fuzz summary ($(date -u +%Y-%m-%d), $budget${RUNS:+, at most $RUNS runs per worker})"
printf '%s\n' "${summary[@]}"
exit $status
