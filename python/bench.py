"""Benchmarks of the Python binding, measured side by side in one run.

    target/pyenv/bin/python python/bench.py [--quick]

(a) call overhead: a no-op call through the binding (`racaffinity_version`
    on the same cffi `lib` object) against `Cluster.pick()` + release,
    unpinned and pinned, and the raw cffi calls they make;
(b) pools: `NodePools.connection()` acquire + release (in a pin, unpinned,
    with a key) against the two anchors a psycopg user would pick, on the
    same node: bare `getconn()` / `with conn` / `putconn()` (what
    `NodePools.connection()` does inside its lease) and
    `psycopg_pool.ConnectionPool.connection()` (which adds a generator
    context manager and its usage statistic, about 1 us); and two floors:
    the pinned borrow with node pools that check out as bare psycopg_pool
    (no alive check) and the balanced borrow on a one-node cluster (one
    pool, as the anchor);
(c) SQLAlchemy: racaffinity's engine (`racaffinity.sqlalchemy.create_engine`)
    `connect()` + close, in a pin and unpinned, against a plain SQLAlchemy
    engine (`QueuePool`) on the same node.
With `--before DIR` (a directory holding the `racaffinity` package of an
earlier build, for instance copied from that build's site-packages), (b)
and (c) also run that build's pinned and balanced cases, as
`racaffinity_before`, in the same rounds: before and after in one process,
each as a ratio to the same anchor.
(b) and (c) need the local PostgreSQL nodes: if RACAFF_NODE1_DSN is not set,
    the script starts them with tests/cluster/pgnodes (on the ports
    python/run_tests.sh uses) and stops them at the end.

Plain timing with time.thread_time_ns (this thread's CPU time, so other
processes' load on a shared machine does not count): each case runs `repeats` rounds of
`n` operations, cases interleaved round by round (odd rounds in reverse
order), and reports the median ns/op. Prints a table and one line per case:
`PYBENCH name ns_per_op ratio` (the ratio of medians to the section's
baseline), `PYBENCH_RATIO name median min max` (per-round ratios to the
section's first case) and, for the pools and SQLAlchemy, `PYBENCH_VS
subject baseline median min max subject_ns baseline_ns` (per-round ratios
to each anchor).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import racaffinity as ra
from racaffinity._lib import ffi, lib

REPO = Path(__file__).resolve().parent.parent
NAMES = ["RAC1", "RAC2", "RAC3"]
BEFORE: Any = None  # the earlier build's package (--before), or None


def load_before(path: str) -> Any:
    """The `racaffinity` package under `path`, imported as
    `racaffinity_before` (its imports are relative, so it stays apart from
    the current one; both load the same library file's code)."""
    import importlib.util

    init = Path(path) / "racaffinity" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "racaffinity_before", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules["racaffinity_before"] = mod
    spec.loader.exec_module(mod)
    return mod


def pinned_on(cluster: Any, node: str) -> Any:
    """A context pinned on `node`: pins chosen by balancing until one lands there."""
    import contextvars

    for _ in range(1000):
        ctx = contextvars.copy_context()
        scope = cluster.pin()
        if ctx.run(scope.__enter__).name == node:
            return ctx
        ctx.run(scope.__exit__, None, None, None)
    raise RuntimeError(f"no pin landed on {node}")


def loop(fn: Callable[[], None], n: int) -> Callable[[], int]:
    def run() -> int:
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        return time.thread_time_ns() - t0

    return run


RATIOS: Dict[str, Tuple[float, float, float]] = {}  # case -> per-round ratio to the first case: median, min, max
SAMPLES: Dict[str, List[float]] = {}  # case -> ns/op per round, of the last measure()


def measure(cases: Dict[str, Callable[[], int]], n: int, repeats: int) -> Dict[str, float]:
    """Runs the cases round by round, odd rounds in reverse order (a case
    never always follows the same one)."""
    samples: Dict[str, List[float]] = {k: [] for k in cases}
    for run in cases.values():  # warm up
        run()
    gc.collect()
    gc.disable()
    try:
        for r in range(repeats):
            order = list(cases.items())
            for name, run in order if r % 2 == 0 else reversed(order):
                samples[name].append(run() / n)
    finally:
        gc.enable()
    base = samples[next(iter(cases))]
    for k, v in samples.items():
        r = [a / b for a, b in zip(v, base)]
        RATIOS[k] = (statistics.median(r), min(r), max(r))
    SAMPLES.update(samples)
    return {k: statistics.median(v) for k, v in samples.items()}


def versus(pairs: List[Tuple[str, str, str, str, str]]) -> None:
    """Per-round ratios of (subject, baseline) pairs measured in the last
    measure(): median with min–max, one `PYBENCH_VS subject baseline median
    min max subject_ns baseline_ns` line each, and a table."""
    print(f"\n  {'subject':<52} {'baseline':<44} {'ratio (min-max)':>22}  target")
    for subject, label, baseline, blabel, target in pairs:
        r = [a / b for a, b in zip(SAMPLES[subject], SAMPLES[baseline])]
        med, lo, hi = statistics.median(r), min(r), max(r)
        ns, bns = statistics.median(SAMPLES[subject]), statistics.median(SAMPLES[baseline])
        print(f"  {label:<52} {blabel:<44} {med:>7.2f}x ({lo:.2f}-{hi:.2f})  {target}")
        print(f"PYBENCH_VS {subject} {baseline} {med:.3f} {lo:.3f} {hi:.3f} {ns:.0f} {bns:.0f}")


def report(title: str, results: Dict[str, float], baseline: str, rows: List[Tuple[str, str, str]]) -> None:
    base = results[baseline]
    print(f"\n{title}")
    print(f"  {'case':<44} {'ns/op':>10} {'ratio':>8}  target")
    for key, label, target in rows:
        print(f"  {label:<44} {results[key]:>10.0f} {results[key] / base:>7.2f}x  {target}")
    for key, _label, _t in rows:
        print(f"PYBENCH {key} {results[key]:.0f} {results[key] / base:.3f}")
        if key in RATIOS:
            print("PYBENCH_RATIO {} {:.3f} {:.3f} {:.3f}".format(key, *RATIOS[key]))


def bench_calls(quick: bool) -> None:
    n, repeats = (20_000, 11) if quick else (200_000, 21)
    c = ra.Cluster(nodes=NAMES)
    h = c._h
    version = lib.racaffinity_version
    raw_pick, raw_release = lib.racaffinity_cluster_pick, lib.racaffinity_lease_release
    buf = ffi.new("racaffinity_lease *")

    def noop() -> None:
        version()

    def raw() -> None:
        raw_pick(h, buf)
        raw_release(h, buf, 0)

    count = ffi.new("uint32_t *")
    node_count = lib.racaffinity_cluster_node_count

    def handle_call() -> None:
        node_count(h, count)

    def pick_release() -> None:
        c.pick().release()

    def pick_with() -> None:
        with c.pick():
            pass

    pin = c.pin()
    pin.__enter__()  # pinned for the pinned cases only: they run inside this context
    import contextvars

    pinned_ctx = contextvars.copy_context()
    pin.__exit__(None, None, None)
    # re-enter inside the copied context so that only the pinned cases see it
    pinned_ctx.run(lambda: c.pin().__enter__())

    def pinned_pick_release() -> None:
        c.pick().release()

    def pinned_pick_with() -> None:
        with c.pick():
            pass

    def pinned_route() -> None:
        c.route()

    class FloorLease:
        """The least a Python lease can be: an object, a release() that checks a flag,
        and the finalizer that releases a lease dropped unreleased (without it, one
        dropped lease would count as in flight forever), with no bookkeeping at all
        (no in-flight count, no outcome): the floor of pick().release() for any
        design that hands Python a lease object."""

        __slots__ = ("route", "done")

        def __init__(self, route: object) -> None:
            self.route = route
            self.done = False

        def release(self) -> None:
            if self.done:
                raise RuntimeError("released twice")
            self.done = True

        def __del__(self) -> None:
            if not self.done:
                self.release()

    pin_var = c._pin_var

    class FloorRouter:
        """The least a cached route can do and stay correct per context: find
        this context's pin of this cluster (its ContextVar) and return its
        route, with no validity check and no count. A method,
        called as `c.route()` is."""

        __slots__ = ()

        def route(self) -> object:
            return pin_var.get().route

    floor_router = FloorRouter()

    def route_floor() -> None:
        floor_router.route()

    def floor_lease() -> None:
        FloorLease(c.route()).release()

    def unpinned_floor() -> None:
        # A balanced pick must ask the library (one crossing); a release kept
        # in host memory would make no second one. (The library counts these
        # picks as in flight forever: a benchmark-only shortcut.)
        raw_pick(h, buf)
        FloorLease(buf.node).release()

    cases = {
        "noop_call": loop(noop, n),
        "raw_cffi_node_count": loop(handle_call, n),
        "raw_cffi_pick_release": loop(raw, n),
        "pick_release": loop(pick_release, n),
        "pick_with": loop(pick_with, n),
        "pinned_pick_release": lambda: pinned_ctx.run(loop(pinned_pick_release, n)),
        "pinned_pick_with": lambda: pinned_ctx.run(loop(pinned_pick_with, n)),
        "pinned_route": lambda: pinned_ctx.run(loop(pinned_route, n)),
        "pinned_route_floor": lambda: pinned_ctx.run(loop(route_floor, n)),
        "pinned_floor_lease": lambda: pinned_ctx.run(loop(floor_lease, n)),
        "unpinned_floor": loop(unpinned_floor, n),
    }
    results = measure(cases, n, repeats)
    report(
        f"(a) call overhead, {n} ops x {repeats} rounds (median)",
        results,
        "noop_call",
        [
            ("noop_call", "no-op call (racaffinity_version)", "baseline"),
            ("raw_cffi_node_count", "raw cffi: a trivial call on the handle", ""),
            ("raw_cffi_pick_release", "raw cffi: cluster_pick + lease_release", "(floor)"),
            ("pick_release", "Cluster.pick().release(), unpinned", "<= 3x"),
            ("pick_with", "with Cluster.pick(): (unpinned)", ""),
            ("pinned_pick_release", "Cluster.pick().release() in a pin", "<= 2x"),
            ("pinned_pick_with", "with Cluster.pick(): in a pin", ""),
            ("pinned_route", "Cluster.route() in a pin (cached)", "<= 1x"),
            ("pinned_route_floor", "route floor: this context's pin, no check, no count", "(floor)"),
            ("pinned_floor_lease", "cached route + a bare Python lease object (with finalizer)", "(floor)"),
            ("unpinned_floor", "one raw cffi pick + a bare Python lease object (with finalizer)", "(floor)"),
        ],
    )
    c.close()


def start_nodes() -> bool:
    if os.environ.get("RACAFF_NODE1_DSN"):
        return False
    os.environ.setdefault("RACAFF_PG_BASE_PORT", "55441")
    h = hashlib.sha1(str(REPO).encode()).hexdigest()[:8]
    os.environ.setdefault("RACAFF_PG_DIR", f"/tmp/racaffinity-pg-python-{h}")
    script = str(REPO / "tests" / "cluster" / "pgnodes")
    subprocess.run([script, "start", "3"], check=True, stdout=subprocess.DEVNULL)
    env = subprocess.run([script, "env"], check=True, capture_output=True, text=True).stdout
    for line in env.splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export "):].partition("=")
            os.environ[k] = v.strip("'")
    return True


def stop_nodes() -> None:
    subprocess.run([str(REPO / "tests" / "cluster" / "pgnodes"), "stop"], stdout=subprocess.DEVNULL)


class PoolSubjects:
    """The pools both pool benchmarks borrow from (this script's timings and
    tools/borrow_instructions.py's instruction counts), so they measure the
    same borrows: `NodePools` over the three nodes with 2 connections each,
    a context pinned on one of them (`pinned`, node `node`), and a bare
    psycopg_pool pool of 2 on that node (`bare`), and the borrows
    (`_borrows`)."""

    def __init__(self, dsns: Dict[str, str]) -> None:
        import contextvars

        import psycopg_pool

        from racaffinity.pools import NodePools

        self.cluster = ra.Cluster(nodes=list(dsns))
        self.pools = NodePools(self.cluster, dsns, min_size=2, max_size=2)
        for p in self.pools._by_id:
            p.wait()
        # The pinned case runs in its own context; the bare pool, the key
        # case and the comparison all use the pinned node.
        self.pinned = contextvars.copy_context()
        self.node = self.pinned.run(lambda: self.cluster.pin().__enter__()).name
        self.bare = psycopg_pool.ConnectionPool(dsns[self.node], min_size=2, max_size=2, open=False, name="bare")
        self.bare.open(wait=True)
        self.bare_getconn, self.wrapper_floor, self.ra_borrow = _borrows(self.bare, self.pools)

    def close(self) -> None:
        self.bare.close()
        self.pools.close()
        self.cluster.close()


def _borrows(bare: Any, pools: Any) -> Tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """The borrows of `PoolSubjects`, as closures (a method would add an
    attribute load per call to every case): bare getconn + `with conn` +
    putconn (what `NodePools.connection()` calls inside its lease), the
    floor around those, and `NodePools.connection()` (pinned when run in the
    pinned context, else balanced)."""

    def bare_getconn() -> None:
        conn = bare.getconn()
        try:
            with conn:
                pass
        finally:
            bare.putconn(conn)

    class Floor:
        """The least a pool wrapper can be: a context manager around getconn,
        the connection's own `with` and putconn, with no routing, no lease and
        no alive check (what NodePools.connection() adds)."""

        __slots__ = ("conn",)

        def __enter__(self) -> object:
            self.conn = bare.getconn()
            return self.conn.__enter__()

        def __exit__(self, et: object, ev: object, tb: object) -> None:
            try:
                self.conn.__exit__(et, ev, tb)
            finally:
                bare.putconn(self.conn)

    def wrapper_floor() -> None:
        with Floor():
            pass

    def ra_borrow() -> None:
        with pools.connection():
            pass

    return bare_getconn, wrapper_floor, ra_borrow


def bench_pools(quick: bool) -> None:
    import psycopg_pool

    from racaffinity.pools import NodePools

    n, repeats = (500, 11) if quick else (3_000, 21)
    dsns = {name: os.environ[f"RACAFF_NODE{i + 1}_DSN"] for i, name in enumerate(NAMES)}
    subjects = PoolSubjects(dsns)
    c, pools, pinned, node, bare = subjects.cluster, subjects.pools, subjects.pinned, subjects.node, subjects.bare
    key = next(k for k in range(1000) if c.route_key(k).name == node)

    def bare_conn() -> None:
        with bare.connection():
            pass

    bare_getconn, wrapper_floor = subjects.bare_getconn, subjects.wrapper_floor
    ra_balanced = ra_pinned = subjects.ra_borrow

    def ra_key() -> None:
        with pools.connection(key=key):
            pass

    # Two floors of the missed targets: the pinned borrow whose node pools
    # check out as bare psycopg_pool does (no alive check: the anchor has
    # none), and the balanced borrow on a one-node cluster of the pinned node
    # (the anchor's one pool, not three).
    fc = ra.Cluster(nodes=NAMES)
    fpools = NodePools(fc, dsns, min_size=2, max_size=2)
    for p in fpools._by_id:
        p.wait()
        p._check = None
        p._check_connection = psycopg_pool.ConnectionPool._check_connection.__get__(p)
    fpinned = pinned_on(fc, node)
    oc = ra.Cluster(nodes=[node])
    opools = NodePools(oc, {node: dsns[node]}, min_size=2, max_size=2)
    for p in opools._by_id:
        p.wait()

    def ra_no_check() -> None:
        with fpools.connection():
            pass

    def ra_one_node() -> None:
        with opools.connection():
            pass

    cases = {
        "bare_pool_connection": loop(bare_conn, n),
        "bare_pool_getconn_putconn": loop(bare_getconn, n),
        "pool_wrapper_floor": loop(wrapper_floor, n),
        "pools_connection_pinned": lambda: pinned.run(loop(ra_pinned, n)),
        "pools_connection_key": loop(ra_key, n),
        "pools_connection_balanced": loop(ra_balanced, n),
        "pools_connection_pinned_no_check": lambda: fpinned.run(loop(ra_no_check, n)),
        "pools_connection_balanced_one_node": loop(ra_one_node, n),
    }
    before_pairs = []
    if BEFORE is not None:
        from racaffinity_before.pools import NodePools as BeforePools

        bc = BEFORE.Cluster(nodes=NAMES)
        bpools = BeforePools(bc, dsns, min_size=2, max_size=2)
        for p in bpools._by_id:
            p.wait()
        bpinned = pinned_on(bc, node)

        def before_borrow() -> None:
            with bpools.connection():
                pass

        cases["pools_connection_pinned_before"] = lambda: bpinned.run(loop(before_borrow, n))
        cases["pools_connection_balanced_before"] = loop(before_borrow, n)
        getconn_ = "psycopg_pool getconn + with conn + putconn"
        before_pairs = [
            ("pools_connection_pinned_before", "before: NodePools.connection() in a pin", "bare_pool_getconn_putconn",
             getconn_, ""),
            ("pools_connection_balanced_before", "before: NodePools.connection(), unpinned", "bare_pool_getconn_putconn",
             getconn_, ""),
        ]
    results = measure(cases, n, repeats)
    report(
        f"(b) pools, acquire + release, {n} ops x {repeats} rounds (median), all on node {node}"
        " (balanced: any node)",
        results,
        "bare_pool_connection",
        [
            ("bare_pool_connection", "psycopg_pool ConnectionPool.connection()", "baseline"),
            ("bare_pool_getconn_putconn", "psycopg_pool getconn; with conn; putconn", "(what we call)"),
            ("pool_wrapper_floor", "the floor: a bare context manager around those", "(floor)"),
            ("pools_connection_pinned", "NodePools.connection() in a pin", ""),
            ("pools_connection_key", "NodePools.connection(key=...)", ""),
            ("pools_connection_balanced", "NodePools.connection(), balanced", ""),
        ],
    )
    getconn, connection = "psycopg_pool getconn + with conn + putconn", "psycopg_pool pool.connection()"
    versus(
        [
            ("pools_connection_pinned", "NodePools.connection() in a pin", "bare_pool_getconn_putconn", getconn,
             "<= 1.35x"),
            ("pools_connection_balanced", "NodePools.connection(), unpinned (balanced)", "bare_pool_getconn_putconn",
             getconn, "<= 1.6x"),
            ("pools_connection_key", "NodePools.connection(key=...)", "bare_pool_getconn_putconn", getconn, ""),
            ("pool_wrapper_floor", "the floor: a bare context manager around those", "bare_pool_getconn_putconn",
             getconn, ""),
            ("pools_connection_pinned_no_check", "floor: in a pin, node pools without the alive check",
             "bare_pool_getconn_putconn", getconn, ""),
            ("pools_connection_balanced_one_node", "floor: unpinned, on a one-node cluster (one pool)",
             "bare_pool_getconn_putconn", getconn, ""),
            ("pools_connection_pinned", "NodePools.connection() in a pin", "bare_pool_connection", connection, ""),
            ("pools_connection_balanced", "NodePools.connection(), unpinned (balanced)", "bare_pool_connection",
             connection, ""),
        ]
        + before_pairs
    )
    if BEFORE is not None:
        bpools.close()
        bc.close()
    subjects.close()
    fpools.close()
    fc.close()
    opools.close()
    oc.close()


def bench_sqlalchemy(quick: bool) -> None:
    """(c) SQLAlchemy: `engine.connect()` + close of racaffinity's engine (its
    RoutingPool over one QueuePool per node) against a plain SQLAlchemy
    engine (QueuePool) on the same node, with the same pool size."""
    n, repeats = (500, 11) if quick else (3_000, 21)
    ports = {name: os.environ[f"RACAFF_NODE{i + 1}_PORT"] for i, name in enumerate(NAMES)}
    subjects = SqlAlchemySubjects(ports)
    pinned, node, urls = subjects.pinned, subjects.node, subjects.urls
    plain_connect, ra_connect = subjects.plain_connect, subjects.ra_connect

    cases = {
        "sqlalchemy_plain_connect": loop(plain_connect, n),
        "sqlalchemy_engine_pinned": lambda: pinned.run(loop(ra_connect, n)),
        "sqlalchemy_engine_balanced": loop(ra_connect, n),
    }
    before_pairs = []
    if BEFORE is not None:
        from racaffinity_before.sqlalchemy import create_engine as before_create_engine

        bc = BEFORE.Cluster(nodes=NAMES)
        bengine = before_create_engine(bc, urls, pool_size=2, max_overflow=0)
        bpinned = pinned_on(bc, node)

        def before_connect() -> None:
            with bengine.connect():
                pass

        cases["sqlalchemy_engine_pinned_before"] = lambda: bpinned.run(loop(before_connect, n))
        cases["sqlalchemy_engine_balanced_before"] = loop(before_connect, n)
        plain_ = "plain SQLAlchemy engine.connect() (QueuePool)"
        before_pairs = [
            ("sqlalchemy_engine_pinned_before", "before: racaffinity engine.connect() in a pin",
             "sqlalchemy_plain_connect", plain_, ""),
            ("sqlalchemy_engine_balanced_before", "before: racaffinity engine.connect(), unpinned",
             "sqlalchemy_plain_connect", plain_, ""),
        ]
    results = measure(cases, n, repeats)
    report(
        f"(c) SQLAlchemy engine.connect() + close, {n} ops x {repeats} rounds (median), on node {node}"
        " (balanced: any node)",
        results,
        "sqlalchemy_plain_connect",
        [
            ("sqlalchemy_plain_connect", "plain SQLAlchemy engine (QueuePool)", "baseline"),
            ("sqlalchemy_engine_pinned", "racaffinity engine in a pin", ""),
            ("sqlalchemy_engine_balanced", "racaffinity engine, unpinned (balanced)", ""),
        ],
    )
    plain_label = "plain SQLAlchemy engine.connect() (QueuePool)"
    versus(
        [
            ("sqlalchemy_engine_pinned", "racaffinity engine.connect() in a pin", "sqlalchemy_plain_connect",
             plain_label, "<= 1.15x"),
            ("sqlalchemy_engine_balanced", "racaffinity engine.connect(), unpinned", "sqlalchemy_plain_connect",
             plain_label, ""),
        ]
        + before_pairs
    )
    if BEFORE is not None:
        bengine.dispose()
        bc.close()
    subjects.close()


class SqlAlchemySubjects:
    """The engines both SQLAlchemy benchmarks use (this script's timings and
    tools/borrow_instructions.py's instruction counts): racaffinity's engine
    over the nodes on `ports` (2 connections per node), a context pinned on
    one of them (`pinned`, node `node`), and a plain SQLAlchemy engine
    (`QueuePool` of 2) on that node; `connect()` + close of each."""

    def __init__(self, ports: Dict[str, str]) -> None:
        import contextvars

        import sqlalchemy as sa

        from racaffinity.sqlalchemy import create_engine

        self.urls = {name: f"postgresql+psycopg://postgres@127.0.0.1:{p}/postgres" for name, p in ports.items()}
        self.cluster = ra.Cluster(nodes=list(ports))
        self.engine = create_engine(self.cluster, self.urls, pool_size=2, max_overflow=0)
        self.pinned = contextvars.copy_context()
        self.node = self.pinned.run(lambda: self.cluster.pin().__enter__()).name
        self.plain = sa.create_engine(self.urls[self.node], pool_size=2, max_overflow=0)
        assert isinstance(self.plain.pool, sa.pool.QueuePool)
        plain, engine = self.plain, self.engine

        # Closures, as `_borrows`: a method would add an attribute load per call.
        def plain_connect() -> None:
            with plain.connect():
                pass

        def ra_connect() -> None:
            with engine.connect():
                pass

        self.plain_connect, self.ra_connect = plain_connect, ra_connect

    def close(self) -> None:
        self.plain.dispose()
        self.engine.dispose()
        self.cluster.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    ap.add_argument("--no-pools", action="store_true", help="skip (b) and (c)")
    ap.add_argument("--no-calls", action="store_true", help="skip (a)")
    ap.add_argument("--before", metavar="DIR", help="also run (b) and (c) with the racaffinity package in DIR")
    args = ap.parse_args()
    if args.before:
        global BEFORE
        BEFORE = load_before(args.before)
    print(f"racaffinity {ra.version()} on Python {sys.version.split()[0]} ({ra.LIBRARY_PATH})")
    if not args.no_calls:
        bench_calls(args.quick)
    if not args.no_pools:
        started = start_nodes()
        try:
            bench_pools(args.quick)
            bench_sqlalchemy(args.quick)
        finally:
            if started:
                stop_nodes()
    return 0


if __name__ == "__main__":
    sys.exit(main())
