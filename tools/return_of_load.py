#!/usr/bin/env python3
"""How fast load returns to an instance after FAN `status=up` (issue
[ucp-parity], docs/ucp-parity.md): the share of new connections that land on
the instance, per time bucket after the up event.

    eval "$(tests/cluster/pgnodes env)"          # 3 local nodes running
    target/pyenv/bin/python tools/return_of_load.py [--policy random] [--seconds 3] [--bucket 0.25]

Workers open connections through `racaffinity.pools.NodePools` (each one a
real connection and `SELECT inet_server_port()`), the instance RAC2 is taken
down (`reason=FAILURE`, or with --planned a drain with a 1 s timeout, after
which its pool holds no connection), traffic runs without it, then `status=up` is applied
and every connection's server port is recorded with its time. Prints one
line per bucket: seconds after the up event, connections, share on RAC2
(fair share: 1/3).
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from racaffinity import Cluster
from racaffinity.pools import NodePools

NAMES = ["RAC1", "RAC2", "RAC3"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="random")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--bucket", type=float, default=0.25)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--planned", action="store_true", help="a planned drain (reason=USER drain_timeout=1) instead of a failure")
    a = ap.parse_args()
    dsn = {n: os.environ[f"RACAFF_NODE{i + 1}_DSN"] for i, n in enumerate(NAMES)}
    port2 = int(os.environ["RACAFF_NODE2_PORT"])
    ev = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC2 host=h2 "
    with Cluster(f"database = orcl\nservice = svc\nnodes = RAC1, RAC2, RAC3\npolicy = {a.policy}") as c:
        with NodePools(c, dsn, min_size=a.workers, max_size=a.workers + 2) as pools:
            samples: list = []
            lock = threading.Lock()
            stop = threading.Event()

            def worker() -> None:
                while not stop.is_set():
                    with pools.connection() as conn:
                        port = conn.execute("SELECT inet_server_port()").fetchone()[0]
                    with lock:
                        samples.append((time.monotonic(), port))

            pools.apply_event(ev + ("status=down reason=USER drain_timeout=1" if a.planned else "status=down reason=FAILURE"))
            threads = [threading.Thread(target=worker) for _ in range(a.workers)]
            for t in threads:
                t.start()
            time.sleep(1.5 if a.planned else 0.5)  # traffic without RAC2 (its pool emptied if planned)
            t_up = time.monotonic()
            pools.apply_event(ev + "status=up")
            time.sleep(a.seconds)
            stop.set()
            for t in threads:
                t.join()
    before = [p for t, p in samples if t < t_up]
    print(f"policy={a.policy} workers={a.workers} {'planned drain' if a.planned else 'failure'}: before up {len(before)} connections,"
          f" {sum(p == port2 for p in before)} on RAC2")
    print("  t after up (s)   connections   share on RAC2")
    n = int(a.seconds / a.bucket)
    for b in range(n):
        lo, hi = t_up + b * a.bucket, t_up + (b + 1) * a.bucket
        got = [p for t, p in samples if lo <= t < hi]
        share = sum(p == port2 for p in got) / len(got) if got else 0.0
        print(f"  {b * a.bucket:5.2f}-{(b + 1) * a.bucket:5.2f}     {len(got):6d}        {share:6.1%}")
    after = [p for t, p in samples if t >= t_up]
    first = next((t - t_up for t, p in samples if t >= t_up and p == port2), None)
    print(f"  first connection on RAC2 {first * 1000:.1f} ms after up; share over {a.seconds:g} s:"
          f" {sum(p == port2 for p in after) / max(1, len(after)):.1%}")


if __name__ == "__main__":
    main()
