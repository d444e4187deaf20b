"""The node pools (`NodePools`, `AsyncNodePools`) and the SQLAlchemy pool
borrow in a pin through the pin's cached route and release through a host
lease, as `Cluster.pick()` does: no call into the library while the routing
epoch holds. Held to the cached route's guarantees by the stale-route
stress of test_route_cache.py, over real connections: no borrow gets a
connection to a node that was down, removed or ejected for the whole
borrow, and every lease is counted exactly (in flight, successes)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections import Counter
from typing import Callable, Dict, List, Tuple

import psycopg
import psycopg_pool
import pytest
import sqlalchemy as sa

import racaffinity as ra
from racaffinity._routes import HOST_LEASE_BASE, PoolHostLease
from racaffinity.pools import AsyncNodePools, NodePools
from racaffinity.sqlalchemy import create_engine

from conftest import NAMES
from test_route_cache import (
    DEADLINE_S,
    MIN_CHANGES,
    NODES,
    Crossings,
    Flipper,
    check,
    check_lease_totals,
    keep_routing,
    node_metrics,
    stress_cluster,
)


# Six cluster nodes over the three local servers: more nodes to flip.
def dsns(pg) -> Dict[str, str]:
    return {n: pg.dsn[NAMES[i % 3]] for i, n in enumerate(NODES)}


def urls(pg) -> Dict[str, str]:
    return {n: f"postgresql+psycopg://postgres@127.0.0.1:{pg.port[NAMES[i % 3]]}/postgres" for i, n in enumerate(NODES)}


# -- no crossing on a hit ------------------------------------------------------------


def test_a_pinned_borrow_crosses_only_on_a_miss_and_counts_like_a_library_lease(pg, cluster_factory, monkeypatch):
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=2)
    with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
        with c.pin() as pinned:
            crossings = Crossings(monkeypatch)
            with pools.connection():
                pass
            assert len(crossings.take()) == 1, "a miss: one call, which also caches the route"
            for _ in range(3):
                with pools.connection() as conn:
                    assert crossings.take() == [], "a hit stays in Python"
                    assert node_metrics(c, pinned.node)["in_flight"] == 1, "a host lease counts in flight"
                    crossings.take()
                    conn.execute("SELECT 1")
                assert crossings.take() == [], "its OK release too"
            with pytest.raises(ZeroDivisionError):
                with pools.connection():
                    1 / 0  # NEUTRAL: no verdict on the node, no crossing either
            assert crossings.take() == []
            c.set_node_state(pinned.name, "draining")  # never cacheable: its pin ends by the clock
            crossings.take()
            with pools.connection():
                pass
            assert [x for x in crossings.take() if "lease" in x or "pick" in x] != [], "a draining node asks the library"
        m = node_metrics(c, pinned.node)
        assert (m["in_flight"], m["successes"]) == (0, 5)
        assert c.metrics()["scopes"]["thread"]["hits"] >= 4


def test_a_pinned_borrow_ended_after_the_epoch_moved_reports_to_the_library(pg, cluster_factory, monkeypatch):
    # An OK end counts in the page only while the epoch read at the borrow's
    # begin holds. After it moved (the node may have been ejected meanwhile)
    # the end goes to the library, whose breaker discounts a stale lease
    # (test_route_cache: a host lease in flight at an ejection).
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, {n: f"postgresql+psycopg://postgres@127.0.0.1:{pg.port[n]}/postgres" for n in NAMES},
                           pool_size=1, max_overflow=1)
    try:
        with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
            with c.pin() as pinned:
                others = [n for n in NAMES if n != pinned.name]
                crossings = Crossings(monkeypatch)
                for other, borrow in zip(others, (pools.connection, engine.connect)):
                    with borrow():
                        pass  # a miss (the epoch moved), which caches the route again
                    crossings.take()
                    with borrow():
                        assert crossings.take() == [], "a hit"
                        c.set_node_state(other, "draining")  # moves the epoch
                        crossings.take()
                    assert crossings.take() == ["racaffinity_cluster_host_lease_end"], borrow
            m = node_metrics(c, pinned.node)
            assert (m["in_flight"], m["successes"]) == (0, 4)
    finally:
        engine.dispose()


def test_a_borrow_leaves_no_garbage_for_the_cycle_collector(pg, cluster_factory):
    # A borrow that is its own host lease must not refer to itself: each would
    # be freed only by the cycle collector (never, where the application
    # turned it off), holding its connection until then.
    c = cluster_factory(nodes=NAMES)

    def borrows(run: Callable[[], None]) -> int:
        gc.collect()
        gc.disable()
        try:
            for _ in range(50):
                run()
            return gc.collect()
        finally:
            gc.enable()

    with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
        def borrow() -> None:
            with pools.connection():
                pass

        assert borrows(borrow) == 0, "unpinned"
        with c.pin():
            assert borrows(borrow) == 0, "in a pin"

    async def main() -> None:
        async with AsyncNodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as apools:
            async def many() -> None:
                for _ in range(50):
                    async with apools.connection():
                        pass

            for pinned in (False, True):
                with c.pin() if pinned else contextlib.nullcontext():
                    gc.collect()
                    gc.disable()
                    try:
                        await many()
                        assert gc.collect() == 0, f"async, pinned={pinned}"
                    finally:
                        gc.enable()

    asyncio.run(main())


def test_a_pinned_borrow_that_fails_on_its_node_reaches_the_breaker(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=1, health_eject_backoff="1h",
                        health_eject_backoff_max="1h")
    with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
        with c.pin() as pinned:
            with pools.connection():
                pass
            cm = pools.connection()
            cm.__enter__()
            assert cm._buf is None and isinstance(cm, PoolHostLease), "the borrow is its own host lease"
            # The connection itself is lost (only its own failure blames its node).
            cm._conn.pgconn.finish()
            lost = psycopg.OperationalError("server closed the connection unexpectedly")
            cm.__exit__(type(lost), lost, None)
            assert c.node_state(pinned.node) == ra.NodeState.DOWN, "the FAILED outcome reached the library"
            with pools.connection():
                pass
            assert c.route().node != pinned.node
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


def test_a_pinned_sqlalchemy_checkout_crosses_only_on_a_miss(pg, cluster_factory, monkeypatch):
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, {n: f"postgresql+psycopg://postgres@127.0.0.1:{pg.port[n]}/postgres" for n in NAMES},
                           pool_size=1, max_overflow=1)
    try:
        with c.pin() as pinned:
            with engine.connect():
                pass
            crossings = Crossings(monkeypatch)
            for _ in range(3):
                with engine.connect() as conn:
                    assert crossings.take() == [], "a hit stays in Python"
                    assert isinstance(engine.pool._leases[conn.connection._connection_record], PoolHostLease)
                    assert node_metrics(c, pinned.node)["in_flight"] == 1
                    crossings.take()
                assert crossings.take() == [], "its OK release too"
        m = node_metrics(c, pinned.node)
        assert (m["in_flight"], m["successes"]) == (0, 4)
    finally:
        engine.dispose()


# -- unpinned borrows: one call, the lease in the page ------------------------------


def leasing(crossings: Crossings) -> List[str]:
    """The borrow's own calls (picks, leases), not a background thread's."""
    return [x for x in crossings.take() if "pick" in x or "lease" in x]


def test_an_unpinned_borrow_crosses_once_and_counts_like_a_library_lease(pg, cluster_factory, monkeypatch):
    # The pick hands an Up node's lease to Python (racaffinity_cluster_pick_host_begins):
    # the release is a page write, unless the epoch moved (then the library
    # hears the outcome) or the borrow failed on its node.
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=1, health_eject_backoff="1h",
                        health_eject_backoff_max="1h")
    with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
        crossings = Crossings(monkeypatch)
        for _ in range(6):
            with pools.connection():
                assert leasing(crossings) == ["racaffinity_cluster_pick_host_begins"]
                assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 1, "a host lease counts in flight"
                crossings.take()
            assert leasing(crossings) == [], "its OK release is a page write"
        assert sum(n["successes"] for n in c.metrics()["nodes"]) == 6
        # The epoch moves during the borrow: the end goes to the library.
        cm = pools.connection()
        cm.__enter__()
        assert cm._buf is None, "the borrow is its own host lease (None: no reference cycle)"
        other = next(n for n in NAMES if c.node_id(n) != cm.node)
        c.set_node_state(other, "draining")
        crossings.take()
        cm.__exit__(None, None, None)
        assert leasing(crossings) == ["racaffinity_cluster_host_lease_end"]
        c.set_node_state(other, "up")
        # A failure on the node reaches the breaker.
        cm = pools.connection()
        cm.__enter__()
        failed = cm.node
        cm._conn.pgconn.finish()  # the connection itself is lost
        lost = psycopg.OperationalError("server closed the connection unexpectedly")
        cm.__exit__(type(lost), lost, None)
        assert c.node_state(failed) == ra.NodeState.DOWN, "the FAILED outcome reached the library"
        # Every node Down: a panic pick onto a node that is not Up is the library's lease.
        for n in NAMES:
            c.set_node_state(n, "down")
        # The Downs handled now: the upkeep's own round, 0.2 s apart, could
        # retire the picked node's pool under the borrow, which then routes
        # again (two more calls: 3 runs in 80 failed so).
        pools._upkeep.round()
        crossings.take()
        with pools.connection():
            assert leasing(crossings) == ["racaffinity_cluster_pick_host_begins"]
        assert leasing(crossings) == ["racaffinity_lease_release"]
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0
        assert sum(n["successes"] for n in c.metrics()["nodes"]) == 8


@pytest.mark.asyncio
async def test_an_unpinned_async_borrow_crosses_once(pg, cluster_factory, monkeypatch):
    c = cluster_factory(nodes=NAMES)
    pools = AsyncNodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0)
    await pools.open()
    try:
        crossings = Crossings(monkeypatch)
        for _ in range(4):
            async with pools.connection():
                assert leasing(crossings) == ["racaffinity_cluster_pick_host_begins"]
                assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 1
                crossings.take()
            assert leasing(crossings) == []
        assert sum(n["successes"] for n in c.metrics()["nodes"]) == 4
    finally:
        await pools.close()


# Every success bit set and nothing in flight: the next OK end wraps the word to 0.
FULL = ((1 << 40) - 1) << 24


def test_an_ok_end_wraps_the_success_bits_at_every_end_site(pg, cluster_factory):
    # The page's words are unsigned 64-bit: an OK end past 2^40 successes
    # must wrap, not raise, wherever a host lease ends.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, {n: f"postgresql+psycopg://postgres@127.0.0.1:{pg.port[n]}/postgres" for n in NAMES},
                           pool_size=1, max_overflow=1)
    page = c._page

    def sqlalchemy_checkin() -> None:
        with engine.connect():
            pass

    def pools_exit() -> None:
        with pools.connection():
            pass

    def pools_acquire_path() -> None:  # a borrow with arguments: `end_lease` ends it
        with pools.connection(timeout=5.0):
            pass

    try:
        with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
            with c.pin() as pinned:
                i = HOST_LEASE_BASE + pinned.node
                for end in (lambda: c.pick().release(), pools_exit, pools_acquire_path, sqlalchemy_checkin):
                    end()  # a miss after the last one's epoch: cached again
                    page[i] = FULL
                    end()
                    assert page[i] == 0, end
            # Unpinned: the node balancing picks.
            for n in NAMES:
                page[HOST_LEASE_BASE + c.node_id(n)] = FULL
            with pools.connection():
                pass
            assert sorted(page[HOST_LEASE_BASE + c.node_id(n)] for n in NAMES) == [0, FULL, FULL]
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


# -- the stale-route stress over real connections -------------------------------------

TOLERATED = (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed, sa.exc.TimeoutError,
             sa.exc.OperationalError)
OKS_LOCK = threading.Lock()

# The pools' checkout timeout in these tests (seconds).
POOL_TIMEOUT = 5.0


class Borrows:
    """What the routers saw: (tick before, tick after, node) per borrow, the
    OK ends per node name, and the borrows that failed, by kind.

    A failure that came at once is the flipper's doing, tolerated and
    bounded: a Down aborts a borrowed connection, a retired pool refuses,
    reroutes run out. The bound keeps the check from passing on a few
    borrows, and it flags pools that fail borrows for no routing reason: a
    run under heavy load failed 599 of 5,401, the count and shape (all at
    once, before the borrow held a connection) of pools whose node was Up
    again while its Down was handled, reproduced with slowed borrows as
    PoolClosed "retired as it handed a connection out" and fixed
    (test_pools.py::test_a_borrow_on_a_node_up_again_while_its_down_is_handled_is_served).
    A failure that waited the whole pool timeout is the machine's (a starved
    process connects late), not the routing's: counted apart, unbounded;
    it cannot crowd the check out, as each costs a router 5 s of its
    test's 120."""

    def __init__(self, c: ra.Cluster) -> None:
        self.c = c
        self.seen: List[Tuple[int, int, int]] = []
        self.oks: Dict[str, int] = {}
        self.failed = 0
        self.timed_out = 0
        self.kinds: Counter = Counter()

    def fail(self, stage: str, e: BaseException, since: float) -> None:
        """A borrow begun at `since` (monotonic) failed with `e` at `stage`."""
        with OKS_LOCK:
            if time.monotonic() - since >= POOL_TIMEOUT:
                self.timed_out += 1
            else:
                self.failed += 1
                self.kinds[f"{stage}: {type(e).__name__}: {str(e)[:80]}"] += 1

    def ok(self, node: int) -> None:
        name = self.c.node_name(node)
        with OKS_LOCK:
            self.oks[name] = self.oks.get(name, 0) + 1

    def settle(self, f: Flipper, exact_oks: bool = True) -> None:
        assert f.changes >= MIN_CHANGES, f"the flipper made only {f.changes} changes in {DEADLINE_S} s"
        assert self.failed <= len(self.seen) // 10, (
            f"{self.failed} failed borrows of {len(self.seen)} (and {self.timed_out} timed out):"
            f" {self.kinds.most_common(5)}"
        )
        check(f, self.seen)
        if exact_oks:
            check_lease_totals(self.c, self.oks)
        else:  # SQLAlchemy invalidates a connection on a failed reset without telling the caller
            assert all(n["in_flight"] == 0 for n in self.c.metrics()["nodes"])


def threads_borrowing(
    c: ra.Cluster,
    borrow: Callable[[Flipper, Borrows], None],
    per_router: int = 1500,
    exact_oks: bool = True,
    pinned: bool = True,
) -> None:
    f = Flipper(c, grow=False)
    b = Borrows(c)
    errors: List[BaseException] = []
    deadline = time.monotonic() + DEADLINE_S

    def router() -> None:
        try:
            with c.pin() if pinned else contextlib.nullcontext():
                done = 0
                while keep_routing(f, done, per_router, deadline):
                    borrow(f, b)
                    done += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    flipper = threading.Thread(target=f.run)
    flipper.start()
    threads = [threading.Thread(target=router) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    f.stop.set()
    flipper.join()
    assert not errors, errors
    b.settle(f, exact_oks)


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_pooled_borrows_never_outlive_a_down_removal_or_ejection_threads(pg, cluster_factory, pinned):
    # Unpinned: balancing never hands out a node that was unavailable for
    # the whole pick, and the page's counts stay exact for borrows whose
    # release is a page write.
    c = stress_cluster(cluster_factory)
    with NodePools(c, dsns(pg), min_size=1, max_size=4, timeout=POOL_TIMEOUT, upkeep_interval=0.05) as pools:

        def borrow(f: Flipper, b: Borrows) -> None:
            begin = f.now
            since = time.monotonic()
            cm = pools.connection()
            try:
                cm.__enter__()
            except TOLERATED as e:
                b.fail("enter", e, since)
                return
            node = (cm if cm._buf is None else cm._buf).node
            b.seen.append((begin, f.now, node))
            try:
                cm.__exit__(None, None, None)
            except TOLERATED as e:
                b.fail("exit", e, since)
                return
            b.ok(node)

        threads_borrowing(c, borrow, pinned=pinned)


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_pooled_borrows_never_outlive_a_down_removal_or_ejection_asyncio(pg, cluster_factory, pinned):
    c = stress_cluster(cluster_factory)
    f = Flipper(c, grow=False)
    b = Borrows(c)
    deadline = time.monotonic() + DEADLINE_S

    flipper = threading.Thread(target=f.run)

    async def main() -> None:
        # The pools are built before the flipper starts: it removes nodes, and
        # a pool for a node the cluster no longer has is refused at build time.
        pools = AsyncNodePools(c, dsns(pg), min_size=1, max_size=4, timeout=POOL_TIMEOUT, upkeep_interval=0.05)
        await pools.open()
        flipper.start()
        try:

            async def router() -> None:
                with c.pin() if pinned else contextlib.nullcontext():
                    done = 0
                    while keep_routing(f, done, 400, deadline):
                        done += 1
                        begin = f.now
                        since = time.monotonic()
                        cm = pools.connection()
                        try:
                            await cm.__aenter__()
                        except TOLERATED as e:
                            b.fail("enter", e, since)
                            continue
                        node = (cm if cm._buf is None else cm._buf).node
                        b.seen.append((begin, f.now, node))
                        try:
                            await cm.__aexit__(None, None, None)
                        except TOLERATED as e:
                            b.fail("exit", e, since)
                            continue
                        b.ok(node)

            await asyncio.gather(*(router() for _ in range(8)))
        finally:
            await pools.close()

    try:
        asyncio.run(main())
    finally:
        f.stop.set()
        if flipper.is_alive():
            flipper.join()
    b.settle(f)


def test_pinned_sqlalchemy_checkouts_never_outlive_a_down_removal_or_ejection(pg, cluster_factory):
    c = stress_cluster(cluster_factory)
    engine = create_engine(c, urls(pg), pool_size=2, max_overflow=2, pool_timeout=POOL_TIMEOUT)
    host_leases_checked: List[bool] = []  # the check below is on host leases only: it must have run
    try:

        def borrow(f: Flipper, b: Borrows) -> None:
            begin = f.now
            since = time.monotonic()
            try:
                conn = engine.connect()
            except TOLERATED as e:
                b.fail("checkout", e, since)
                return
            lease = engine.pool._leases[conn.connection._connection_record]
            b.seen.append((begin, f.now, lease.node))
            try:
                conn.close()
            except TOLERATED as e:
                b.fail("checkin", e, since)
                return
            if lease.__class__ is PoolHostLease:
                assert lease.released, "a checkout's lease outlived its connection"
                host_leases_checked.append(True)

        threads_borrowing(c, borrow, per_router=1000, exact_oks=False)
        assert host_leases_checked, "no checkout took a pin's cached route: the released check never ran"
    finally:
        engine.dispose()


def test_reused_lease_buffers_stay_bounded_whatever_the_borrows(pg, cluster_factory):
    # The ended borrows' raw lease buffers are kept for the balanced borrow
    # to reuse; borrows that bring their own (a key, a replay's node) must
    # not grow that list without bound.
    c = cluster_factory(nodes=NAMES)
    with NodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0) as pools:
        for k in range(200):
            with pools.connection(key=k):
                pass
        with pools.connection():
            pass
        assert len(pools._lease_bufs) <= 16
