#!/usr/bin/env python3
"""Markdown summary of the `routing` criterion bench, measured vs baseline.

    cargo bench -p racaffinity --bench routing   # or RACAFF_BENCH_QUICK=1 ...
    python3 rust/core/benches/summary.py [CRITERION_DIR]

Reads `<dir>/<group>/<bench>/new/estimates.json` (criterion 0.5) and prints one
table row per measured bench: its median, its baseline's median (same run),
the ratio, the target and whether it is met. Exits 1 if any target with data
is missed, 2 if no results were found.

The criterion directory is resolved as the bench binary does: the argument,
else $CRITERION_HOME, else $CARGO_TARGET_DIR/criterion, else the workspace's
target/criterion. The pairs below mirror `ratio_pairs()` in routing.rs.
"""

import json
import os
import sys
from pathlib import Path

POLICIES = ["random", "round_robin", "weighted", "least_outstanding"]

# (measured id, baseline id, target: ("ns", max, the issue that set it) | None)
PAIRS = [("pinned_pick/pick", "pinned_pick/thread_local", ("ns", 20.0, "core"))]
for _p in POLICIES:
    for _n in (3, 8):
        PAIRS.append((
            f"unpinned_pick/{_p}/{_n}",
            "unpinned_pick/atomic_fetch_add",
            ("ns", 60.0, "core") if _p == "least_outstanding" else None,
        ))
PAIRS += [
    ("tx/begin_end", "tx/mutex_hashmap", ("ns", 300.0, "core")),
    ("session/route_hit", "session/mutex_hashmap_get", None),
    ("key_route/route_key", "key_route/hash_bytes", ("ns", 150.0, "core")),
    ("key_route/route_key_i64", "key_route/hash_i64", ("ns", 150.0, "core")),
]

# 2-thread scaling: throughput(2)/throughput(1) = 2 * t(1) / t(2), because one
# iteration of threads/<kind>/2 is two operations done in parallel.
# (kind, target, the issue that set it)
SCALING = [
    ("pinned", 1.7, "core"),
    ("unpinned", 1.7, "core"),
    ("compute", None, None),  # shared-nothing control: the machine's own ceiling
]
# Below this control ratio the box was busy (or has fewer free cores than
# threads) and the pick scaling numbers say nothing about the core.
CONTROL_MIN = 1.8


def criterion_dir(argv):
    if len(argv) > 1:
        return Path(argv[1])
    if os.environ.get("CRITERION_HOME"):
        return Path(os.environ["CRITERION_HOME"])
    if os.environ.get("CARGO_TARGET_DIR"):
        return Path(os.environ["CARGO_TARGET_DIR"]) / "criterion"
    d = Path(__file__).resolve().parent
    for p in [d, *d.parents]:
        if (p / "Cargo.lock").exists():
            return p / "target" / "criterion"
    return Path("target/criterion")


def median_ns(root, bench_id):
    f = root / bench_id / "new" / "estimates.json"
    try:
        return json.loads(f.read_text())["median"]["point_estimate"]
    except (OSError, KeyError, ValueError):
        return None


def fmt_ns(v):
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def main(argv):
    root = criterion_dir(argv)
    if not root.is_dir():
        print(f"no criterion results under {root}; run the bench first", file=sys.stderr)
        return 2
    rows, missed, found = [], [], 0
    for bench, base, target in PAIRS:
        m, b = median_ns(root, bench), median_ns(root, base)
        found += m is not None
        ratio = f"{m / b:.1f}×" if m is not None and b else "–"
        if target is None:
            tgt, met = "–", "–"
        else:
            tgt = f"≤ {target[1]:g} ns"
            met = "–" if m is None else ("yes" if m <= target[1] else "**no**")
            if met == "**no**":
                missed.append(bench)
        rows.append(f"| `{bench}` | {fmt_ns(m)} | `{base}` | {fmt_ns(b)} | {ratio} | {tgt} | {met} |")

    scaling = {}
    for kind, _, _ in SCALING:
        t1, t2 = median_ns(root, f"threads/{kind}/1"), median_ns(root, f"threads/{kind}/2")
        found += t1 is not None
        scaling[kind] = (t1, t2, 2 * t1 / t2 if t1 and t2 else None)
    control = scaling["compute"][2]
    for kind, target, _ in SCALING:
        t1, t2, r = scaling[kind]
        tgt = f"≥ {target:g}× (2 threads vs 1)" if target else "– (control)"
        if target is None or r is None:
            met = "–"
        elif r >= target:
            met = "yes"
        elif control is not None and control < CONTROL_MIN:
            met = "n/a (busy box: control < %.1f×)" % CONTROL_MIN
        else:
            met = "**no**"
            missed.append(f"threads/{kind}")
        rows.append(
            f"| `threads/{kind}/2` (ns per 2 parallel ops) | {fmt_ns(t2)} | `threads/{kind}/1` | {fmt_ns(t1)} "
            f"| {'%.2f× throughput' % r if r else '–'} | {tgt} | {met} |"
        )

    if not found:
        print(f"no routing bench results under {root}; run the bench first", file=sys.stderr)
        return 2
    print(f"Criterion medians from `{root}`.\n")
    print("| bench | median ns | baseline | baseline ns | ratio | target | met? |")
    print("|---|---:|---|---:|---:|---|---|")
    print("\n".join(rows))
    if missed:
        print(f"\nMissed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
