#!/usr/bin/env python3
"""Instructions per Python pool borrow, counted by valgrind's callgrind.

A count, not a time: it does not move with the load of a shared machine (the
timing ratios of python/bench.py swing with it), so it shows what a change to
the borrow path saves before a quiet machine is at hand to time it. Each case
runs twice under callgrind, with N borrows and with none, after the same
200-borrow warm-up; the difference over N is the count per borrow. The pools'
own threads add a few hundred instructions of noise per borrow.

    target/pyenv/bin/python tools/borrow_instructions.py [--borrows N] [CASE ...]

Cases: bare (psycopg_pool getconn + with conn + putconn), floor (a bare
context manager around those), pinned (NodePools.connection() in a pin),
balanced (NodePools.connection(), unpinned); sa_plain (a plain SQLAlchemy
engine's connect() + close, QueuePool) and sa_pinned (racaffinity's engine,
in a pin). Each ratio is to its group's anchor when that ran too (bare,
sa_plain). Uses the nodes of
RACAFF_NODE1_DSN..3, or starts 3 with tests/cluster/pgnodes (ports from
RACAFF_PG_BASE_PORT, default 57081) and stops them after. Needs valgrind.
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = ("bare", "floor", "pinned", "balanced", "sa_plain", "sa_pinned")

# Run in the child: the pools and borrows of python/bench.py's pool
# benchmark (so both measure the same borrows), a warm-up, then N borrows of
# one case.
CHILD = r"""
import os, sys
sys.path.insert(0, os.environ["RACAFF_BENCH_DIR"])
from bench import PoolSubjects, SqlAlchemySubjects

case, n = sys.argv[1], int(sys.argv[2])
names = ["n1", "n2", "n3"]
if case.startswith("sa_"):
    s = SqlAlchemySubjects({name: os.environ[f"RACAFF_NODE{i + 1}_PORT"] for i, name in enumerate(names)})
    fn = s.plain_connect if case == "sa_plain" else s.ra_connect
else:
    s = PoolSubjects({name: os.environ[f"RACAFF_NODE{i + 1}_DSN"] for i, name in enumerate(names)})
    fn = {"bare": s.bare_getconn, "floor": s.wrapper_floor, "pinned": s.ra_borrow, "balanced": s.ra_borrow}[case]
run = s.pinned.run if case in ("pinned", "sa_pinned") else (lambda f: f())


def borrows(k):
    def go():
        for _ in range(k):
            fn()
    return go


run(borrows(200))
run(borrows(n))
# No teardown: the count is of the borrows, and N=0 runs the same set-up.
os._exit(0)
"""


def collected(case: str, n: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", CHILD, case, str(n)],
        capture_output=True, text=True, check=False, env={**os.environ, "RACAFF_BENCH_DIR": str(REPO / "python")},
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if not m:
        sys.exit(f"borrow_instructions: callgrind gave no count for {case} (N={n}):\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--borrows", type=int, default=6000)
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"any of {', '.join(CASES)} (default: all)")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}: the cases are {', '.join(CASES)}")
    args.cases = args.cases or list(CASES)
    pgnodes = str(REPO / "tests" / "cluster" / "pgnodes")
    started = False
    if not os.environ.get("RACAFF_NODE1_DSN"):
        os.environ.setdefault("RACAFF_PG_BASE_PORT", "57081")
        subprocess.run([pgnodes, "start", "3"], check=True, stdout=subprocess.DEVNULL)
        started = True
        env = subprocess.run([pgnodes, "env"], check=True, capture_output=True, text=True).stdout
        for line in env.splitlines():
            if line.startswith("export "):
                k, _, v = line[len("export "):].partition("=")
                os.environ[k] = v.strip("'")
    try:
        bases: dict = {}  # each group's anchor (bare, sa_plain) -> its count
        for case in args.cases:
            per = (collected(case, args.borrows) - collected(case, 0)) / args.borrows
            first = "sa_plain" if case.startswith("sa_") else "bare"
            if case == first:
                bases[first] = per
            vs = f"  {per / bases[first]:.2f}x {first}" if first in bases else ""
            print(f"{case:9s} {per:9.0f} instructions per borrow{vs}")
    finally:
        if started:
            subprocess.run([pgnodes, "stop"], stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
