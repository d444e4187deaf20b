#!/usr/bin/env bash
# bench.sh - build tests/c/bench.c (-O2) against the shipped libracaffinity
# (target/release/libracaffinity.so) and run it: one process measures a bare
# __thread read, a no-op call into the library, a pinned-thread route and key
# routes through the C ABI. Prints a markdown table and `CBENCH name ns_per_op`
# lines. Runs in ~2 s.
#
# usage: tests/c/bench.sh              C numbers only
#        tests/c/bench.sh --compare    also run the criterion groups pinned_pick
#                                      and key_route (RACAFF_BENCH_QUICK=1, ~20 s
#                                      plus the bench build) and print C - Rust
#                                      per call (`CBENCH_DIFF name ns` lines; the
#                                      C side is the quicker of two runs)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
OUT="$ROOT/target/c-bench"
LIB_DIR="$ROOT/target/release"
CC=${CC:-cc}
CARGO=${CARGO:-cargo}

compare=0
case ${1:-} in
    --compare) compare=1 ;;
    "") ;;
    *) echo "usage: $0 [--compare]" >&2; exit 64 ;;
esac

command -v "$CC" >/dev/null || { echo "bench.sh: no C compiler '$CC' (apt-get install gcc)" >&2; exit 2; }
if [[ ! -f $LIB_DIR/libracaffinity.so ]]; then
    echo "bench.sh: $LIB_DIR/libracaffinity.so is missing; building it with 'make lib'" >&2
    make -s lib
fi

mkdir -p "$OUT"
"$CC" -std=c11 -Wall -Wextra -Werror -O2 -Iinclude tests/c/bench.c -o "$OUT/bench" \
    -L"$LIB_DIR" -Wl,-rpath,"$LIB_DIR" -lracaffinity

"$OUT/bench" | tee "$OUT/bench.out"

(( compare )) || exit 0

# ---- the same calls in Rust (criterion), for the C ABI's overhead -------------
echo
echo "criterion: RACAFF_BENCH_QUICK=1 $CARGO bench -p racaffinity --bench routing -- '^(pinned_pick|key_route)/'"
RACAFF_BENCH_QUICK=1 "$CARGO" bench -q -p racaffinity --bench routing -- '^(pinned_pick|key_route)/' \
    > "$OUT/criterion.out" 2>&1 || { cat "$OUT/criterion.out" >&2; exit 1; }
grep -E '^(pinned_pick|key_route)/|time:|^RATIO' "$OUT/criterion.out" | sed 's/^/  /'
# A second C run right after criterion, so both sides saw similar machine load.
"$OUT/bench" > "$OUT/bench2.out"

CRITERION_DIR=${CRITERION_HOME:-${CARGO_TARGET_DIR:-$ROOT/target}/criterion}
python3 - "$CRITERION_DIR" "$OUT/bench.out" "$OUT/bench2.out" <<'PY'
import json, sys, pathlib
crit, runs = pathlib.Path(sys.argv[1]), sys.argv[2:]

def c_numbers(path):
    d = {}
    for line in open(path):
        p = line.split()
        if len(p) == 3 and p[0] == "CBENCH":
            d[p[1]] = float(p[2])
    return d

cs = [c_numbers(p) for p in runs]
c = {k: min(r[k] for r in cs) for k in cs[0]}  # the quieter of the two C runs

def rust(bench_id):
    f = crit / bench_id / "new" / "estimates.json"
    return json.loads(f.read_text())["median"]["point_estimate"]

rows = [  # (C name, criterion id, what)
    ("tls_read", "pinned_pick/thread_local", "thread-local read (baseline)"),
    ("pinned_route", "pinned_pick/pick", "pinned-thread pick"),
    ("key_route", "key_route/route_key", "byte key route, 8 nodes"),
    ("key_route_i64", "key_route/route_key_i64", "i64 key route, 8 nodes"),
]
print()
print("| call | C via ABI (ns) | Rust (criterion median, ns) | C - Rust (ns) | within 5 ns |")
print("|---|---:|---:|---:|:---:|")
out = []
for name, cid, what in rows:
    r = rust(cid)
    d = c[name] - r
    ok = "-" if name == "tls_read" else ("yes" if d <= 5.0 else "NO")
    print(f"| {what} | {c[name]:.2f} | {r:.2f} | {d:+.2f} | {ok} |")
    out.append(f"CBENCH_DIFF {name} {d:.3f}")
print(f"| no-op crossing `racaffinity_version()` | {c['noop_crossing']:.2f} | - | - | - |")
print()
print("\n".join(out))
PY
