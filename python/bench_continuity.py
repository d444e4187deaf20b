"""What request replay costs when nothing fails ([continuity]), measured
side by side in one process.

    tests/cluster/with-nodes 3 target/pyenv/bin/python python/bench_continuity.py [--quick]

One request = `pools.request()` borrow, `SELECT 1` (its row read), COMMIT,
give back, on one node over TCP (the local PostgreSQL nodes). Two cases,
interleaved round by round (odd rounds in reverse order): `NodePools` with
`replay=True` (each statement recorded with a digest of its rows, the
transaction id read before COMMIT) and the same with `replay=False`. The
figure is the median of the per-round ratios (replay / no replay) with its
min and max, over wall time (the recording's cost against a whole round
trip, which is what a request pays) and over this thread's CPU time (the
recording's cost against the client's own work only). Prints one table and
`PYBENCH` lines like python/bench.py.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from typing import Callable, Dict, List

import racaffinity as ra
from racaffinity.pools import NodePools

NAMES = ["RAC1", "RAC2", "RAC3"]


def rounds(cases: Dict[str, Callable[[], None]], n: int, repeats: int) -> Dict[str, Dict[str, List[float]]]:
    """case -> clock -> per-round ns/op."""
    out: Dict[str, Dict[str, List[float]]] = {k: {"wall": [], "cpu": []} for k in cases}
    for fn in cases.values():
        for _ in range(max(1, n // 4)):
            fn()
    order = list(cases)
    for r in range(repeats):
        gc.collect()
        for name in order if r % 2 == 0 else reversed(order):
            fn = cases[name]
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(n):
                fn()
            out[name]["wall"].append((time.perf_counter_ns() - w0) / n)
            out[name]["cpu"].append((time.thread_time_ns() - c0) / n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (make bench's short mode)")
    args = ap.parse_args()
    if "RACAFF_NODE1_DSN" not in os.environ:
        raise SystemExit("no local nodes: run under tests/cluster/with-nodes 3 (see the docstring)")
    n, repeats = (200, 11) if args.quick else (500, 21)
    dsns = {NAMES[i]: os.environ[f"RACAFF_NODE{i + 1}_DSN"] for i in range(3)}
    cluster = ra.Cluster("thread.auto_pin = false", nodes=NAMES)
    key = next(k for k in range(10_000) if cluster.route_key(k).name == "RAC1")
    with NodePools(cluster, dsns, replay=True, min_size=1, max_size=2) as on, NodePools(
        cluster, dsns, replay=False, min_size=1, max_size=2
    ) as off:

        def request(pools: NodePools) -> Callable[[], None]:
            def run() -> None:
                with pools.request(key=key) as req:
                    req.execute("SELECT 1").fetchone()

            return run

        res = rounds({"replay off": request(off), "replay on": request(on)}, n, repeats)
    cluster.close()
    print(f"request = borrow + SELECT 1 + COMMIT + give back, {n} per round, {repeats} rounds interleaved")
    print("| clock | replay off ns/op | replay on ns/op | on / off: median | min | max |")
    print("|---|---:|---:|---:|---:|---:|")
    for clock in ("wall", "cpu"):
        off_, on_ = res["replay off"][clock], res["replay on"][clock]
        ratios = [b / a for a, b in zip(off_, on_)]
        med = statistics.median(ratios)
        print(
            f"| {clock} | {statistics.median(off_):,.0f} | {statistics.median(on_):,.0f} | "
            f"{med:.2f}× | {min(ratios):.2f} | {max(ratios):.2f} |"
        )
        print(f"PYBENCH replay_on_{clock} {statistics.median(on_):.0f} {med:.3f}")


if __name__ == "__main__":
    main()
