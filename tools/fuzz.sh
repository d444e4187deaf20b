#!/usr/bin/env bash
# Runs cargo-fuzz targets one after another, each for SECONDS, one libFuzzer
# job at a time (-jobs=1: the test machines are small and shared).
#
#   tools/fuzz.sh SECONDS [TARGET...]      (default: every target in fuzz/Cargo.toml)
#
# Each target reads its committed seeds (fuzz/corpus/<target>/) and
# regressions (fuzz/regressions/<target>/) and grows a working corpus under
# target/fuzz/corpus/<target>/, so the checked-in seeds stay small. Crash
# inputs land in target/fuzz/artifacts/<target>/. Prints one summary line per
# target (runs, exec/s, crashes) and exits 1 if any target failed.
# Called by `make fuzz` / `make test-fuzz`, which install cargo-fuzz first and
# skip (exit 0, with a message) when no nightly toolchain is present.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECONDS_EACH=${1:?usage: tools/fuzz.sh SECONDS [TARGET...]}
shift
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
sanitizer() { case $1 in capi_sequence) echo address ;; *) echo none ;; esac; }
build_args() {
  if [ "$(sanitizer "$1")" = none ]; then echo "-s none --target-dir $ROOT/fuzz/target/plain"; else echo "-s address"; fi
}
# Extra libFuzzer flags per target: sequences need room for many calls.
extra_args() { case $1 in capi_sequence) echo "-max_len=4096 -len_control=10" ;; *) echo "" ;; esac; }

# Build every target up front, so the time limit is spent fuzzing.
for t in "${TARGETS[@]}"; do
  # shellcheck disable=SC2046
  "$CARGO" +nightly fuzz build --fuzz-dir "$ROOT/fuzz" -O $(build_args "$t") "$t"
done

status=0
summary=()
for t in "${TARGETS[@]}"; do
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t" "$OUT/logs/$t" "fuzz/corpus/$t" "fuzz/regressions/$t"
  args=(-max_total_time="$SECONDS_EACH" -jobs=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$OUT/artifacts/$t/")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$t.dict")
  # shellcheck disable=SC2206
  args+=($(extra_args "$t"))
  echo "== fuzz $t for ${SECONDS_EACH}s (log: target/fuzz/logs/$t/fuzz-0.log)"
  before=$(ls "$OUT/artifacts/$t" | wc -l)
  # -jobs=1 makes libFuzzer write the job's output to fuzz-0.log in the
  # working directory: run it inside the target's log directory.
  rc=0
  (cd "$OUT/logs/$t" && rm -f fuzz-0.log && "$CARGO" +nightly fuzz run --fuzz-dir "$ROOT/fuzz" -O $(build_args "$t") "$t" \
     "$OUT/corpus/$t" "$ROOT/fuzz/corpus/$t" "$ROOT/fuzz/regressions/$t" -- "${args[@]}") >"$OUT/logs/$t/run.log" 2>&1 || rc=$?
  log=$OUT/logs/$t/fuzz-0.log
  [ -f "$log" ] || log=$OUT/logs/$t/run.log
  runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -1 | awk '{print $2}')
  [ -n "$runs" ] || runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2}')
  crashes=$(( $(ls "$OUT/artifacts/$t" | wc -l) - before ))
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || grep -q -E '^==[0-9]+== ERROR|deadly signal|panicked at' "$log"; then
    status=1
    echo "!! $t FAILED (exit $rc); the end of its log:"
    tail -40 "$log"
    echo "!! crash inputs: target/fuzz/artifacts/$t/ ; reproduce: cargo +nightly fuzz run --fuzz-dir fuzz -O $(build_args "$t") $t <file>"
  fi
  summary+=("$(printf '%-18s runs=%-12s exec/s=%-8s crashes=%s' "$t" "${runs:-?}" "${eps:-?}" "$crashes")")
done
echo "== fuzz summary ($(date -u +%Y-%m-%d), ${SECONDS_EACH}s each)"
printf '%s\n' "${summary[@]}"
exit $status
