"""racaffinity.otel against the 3 local PostgreSQL nodes: the OpenTelemetry
database-client connection metrics of each node pool and the affinity
counters, read through the SDK's in-memory reader after real connections,
a real pool timeout and a real SIGKILL of a node."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Tuple

import psycopg_pool
import pytest

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import racaffinity as ra
from racaffinity.otel import instrument
from racaffinity.pools import NodePools

from conftest import NAMES, fan_line, wait_until


def points(reader: InMemoryMetricReader) -> dict:
    """metric name -> [(attributes, point)] of one collection."""
    out: dict = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend((dict(p.attributes), p) for p in m.data.data_points)
    return out


def value(pts: dict, name: str, **attrs) -> float:
    matches = [p for a, p in pts.get(name, []) if all(a.get(k) == v for k, v in attrs.items())]
    assert len(matches) == 1, f"{name} {attrs}: {len(matches)} points in {pts.get(name)}"
    p = matches[0]
    return p.count if hasattr(p, "count") and not hasattr(p, "value") else p.value


@pytest.fixture
def setup(pg):
    cluster = ra.Cluster("name = otel\nnodes = RAC1, RAC2, RAC3")
    pools = NodePools(cluster, pg.dsn, min_size=1, max_size=2, timeout=5.0)
    for _node, pool in pools.items():
        pool.wait(10.0)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(pools, meter_provider=provider)
    yield cluster, pools, reader
    handle.uninstrument()
    provider.shutdown()
    pools.close()
    cluster.close()


def test_connection_metrics_per_node_pool(setup) -> None:
    cluster, pools, reader = setup
    with pools.pin() as pin:
        name = f"otel-{pin.name}"
        with pools.connection() as conn:
            conn.execute("SELECT 1")
            pts = points(reader)
            assert value(pts, "db.client.connection.count", **{"db.client.connection.pool.name": name,
                                                                "db.client.connection.state": "used"}) == 1
            assert value(pts, "db.client.connection.max", **{"db.client.connection.pool.name": name}) == 2
            assert value(pts, "db.client.connection.idle.min", **{"db.client.connection.pool.name": name}) == 1
        pts = points(reader)
    assert value(pts, "db.client.connection.count", **{"db.client.connection.pool.name": name,
                                                        "db.client.connection.state": "used"}) == 0
    assert value(pts, "db.client.connection.count", **{"db.client.connection.pool.name": name,
                                                        "db.client.connection.state": "idle"}) >= 1
    # One histogram point per pool that served: count 1 each for wait and use.
    assert value(pts, "db.client.connection.wait_time", **{"db.client.connection.pool.name": name}) == 1
    assert value(pts, "db.client.connection.use_time", **{"db.client.connection.pool.name": name}) == 1
    # Every node pool reports, named <cluster>-<node> as Java's node pools are.
    assert {a["db.client.connection.pool.name"] for a, _ in pts["db.client.connection.max"]} == {
        f"otel-{n}" for n in NAMES}
    # The affinity counters are the core's own.
    m = cluster.metrics()
    for n in m["nodes"]:
        assert value(pts, "racaffinity.node.picks", **{"racaffinity.node": n["name"]}) == n["picks"]
        assert value(pts, "racaffinity.node.status", **{"racaffinity.node": n["name"],
                                                         "racaffinity.node.state": "up"}) == 1
        # The name before 0.3, kept one release (deprecated).
        assert value(pts, "racaffinity.node.state", **{"racaffinity.node": n["name"],
                                                        "racaffinity.node.state.value": "up"}) == 1
    assert value(pts, "racaffinity.scope.placements", **{"racaffinity.scope": "thread"}) == m["scopes"]["thread"]["placements"]


# Names that coincide with a namespace of other names, left as they are (docs/java-ecosystem.md,
# "Metrics"): the node and scope attributes, whose rename would move every node and scope series.
KNOWN_NAMESPACE_CLASHES = {"racaffinity.node", "racaffinity.scope"}


def test_no_name_is_also_a_namespace(setup) -> None:
    """OpenTelemetry's naming rule (semantic conventions, General naming considerations,
    for attribute and metric names alike): names SHOULD NOT coincide with namespaces. Before,
    the instrument racaffinity.node.state was also the namespace of its own attribute
    racaffinity.node.state.value. Instruments whose description says they are deprecated
    (served one release more under their old names) are not counted."""
    _cluster, _pools, reader = setup
    names = set()
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.description.startswith("Deprecated"):
                    continue
                names.add(m.name)
                names.update(k for p in m.data.data_points for k in p.attributes)
    namespaces = {n.rsplit(".", i)[0] for n in names for i in range(1, n.count(".") + 1)}
    clashes = (names & namespaces) - KNOWN_NAMESPACE_CLASHES
    assert not clashes, f"names that are also namespaces: {sorted(clashes)}"
    assert {"racaffinity.node.picks", "racaffinity.node.status", "racaffinity.node.state"} <= names


def test_pending_requests_and_timeouts(setup) -> None:
    _cluster, pools, reader = setup
    with pools.pin() as pin:
        name = {"db.client.connection.pool.name": f"otel-{pin.name}"}
        with pools.connection(), pools.connection():      # the pool's max_size
            got = threading.Event()

            def waiter() -> None:
                try:
                    with pools.node_pool(pin.node).connection(timeout=3.0):
                        got.set()
                except psycopg_pool.PoolTimeout:
                    pass

            t = threading.Thread(target=waiter)
            t.start()
            wait_until(lambda: pools.node_pool(pin.node).get_stats().get("requests_waiting", 0) == 1, 5.0)
            assert value(points(reader), "db.client.connection.pending_requests", **name) == 1
            with pytest.raises(psycopg_pool.PoolTimeout):
                with pools.connection(timeout=0.2):
                    pass
        t.join(10)
        assert got.is_set()
    pts = points(reader)
    assert value(pts, "db.client.connection.timeouts", **name) == 1
    assert value(pts, "db.client.connection.pending_requests", **name) == 0


def test_a_killed_node_shows_as_down_and_failed(setup, pg) -> None:
    cluster, pools, reader = setup
    victim = "RAC2"
    pg.kill(2)
    try:
        cluster.apply_event(fan_line(victim, "down"))
        pts = points(reader)
        assert value(pts, "racaffinity.node.status", **{"racaffinity.node": victim,
                                                         "racaffinity.node.state": "down"}) == 1
        with pools.connection(key=b"otel") as conn:        # routed elsewhere while RAC2 is down
            conn.execute("SELECT 1")
        pts = points(reader)
        assert value(pts, "racaffinity.node.picks", **{"racaffinity.node": victim}) == 0
    finally:
        pg.restart(2)


@contextlib.contextmanager
def otel_cluster() -> Iterator[Tuple[ra.Cluster, InMemoryMetricReader, MeterProvider]]:
    """A three-node cluster named otel and a meter provider with an in-memory
    reader; both shut on leaving."""
    cluster = ra.Cluster("name = otel\nnodes = RAC1, RAC2, RAC3")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        yield cluster, reader, provider
    finally:
        provider.shutdown()
        cluster.close()


@pytest.mark.asyncio
async def test_async_node_pools_are_measured_too(pg) -> None:
    from racaffinity.pools import AsyncNodePools

    with otel_cluster() as (cluster, reader, provider):
        async with AsyncNodePools(cluster, pg.dsn, min_size=1, max_size=1, timeout=5.0) as pools:
            handle = instrument(pools, meter_provider=provider)
            with pools.pin() as pin:
                name = {"db.client.connection.pool.name": f"otel-{pin.name}"}
                async with pools.connection() as conn:
                    await conn.execute("SELECT 1")
                    assert value(points(reader), "db.client.connection.count",
                                 **name, **{"db.client.connection.state": "used"}) == 1
                    with pytest.raises(psycopg_pool.PoolTimeout):
                        async with pools.connection(timeout=0.2):
                            pass
            pts = points(reader)
            assert value(pts, "db.client.connection.wait_time", **name) == 1
            assert value(pts, "db.client.connection.use_time", **name) == 1
            assert value(pts, "db.client.connection.timeouts", **name) == 1
            handle.uninstrument()


@pytest.mark.asyncio
async def test_async_node_pools_instrumented_before_they_open_are_measured_from_the_start(pg) -> None:
    # `AsyncNodePools(...)` opens in `async with`: instrumented before (the
    # natural order), its pools were not hooked, psycopg_pool calls a pool
    # that has not opened closed, until the first collection: every borrow
    # before it went unmeasured.
    from racaffinity.pools import AsyncNodePools

    with otel_cluster() as (cluster, reader, provider):
        pools = AsyncNodePools(cluster, pg.dsn, min_size=1, max_size=1, timeout=5.0)
        handle = instrument(pools, meter_provider=provider)
        async with pools:
            for _ in range(5):
                async with pools.connection() as conn:
                    await conn.execute("SELECT 1")
            pts = points(reader)
            assert sum(p.count for _a, p in pts.get("db.client.connection.wait_time", [])) == 5
            assert sum(p.count for _a, p in pts.get("db.client.connection.use_time", [])) == 5
            handle.uninstrument()

@pytest.mark.parametrize("first_out", ["older", "newer"])
def test_uninstrumenting_one_instrumentation_keeps_the_others_hooks(setup, first_out) -> None:
    # Two instrumentations of the same pools (two meter providers, say):
    # removing either one leaves the other counting, and removing both
    # leaves the pools' own methods.
    _cluster, pools, reader = setup  # the fixture's instrumentation is the older
    reader2 = InMemoryMetricReader()
    provider2 = MeterProvider(metric_readers=[reader2])
    second = instrument(pools, meter_provider=provider2)
    try:
        with pools.pin() as pin:
            name = f"otel-{pin.name}"
            attrs = {"db.client.connection.pool.name": name}
            with pools.connection() as conn:
                conn.execute("SELECT 1")
            if first_out == "newer":
                second.uninstrument()
                kept = reader
            else:
                kept = reader2
                # the fixture's handle: undone here, again (idempotent) at teardown
                setup_handle = [h for h in _instrumentations(pools) if h is not second]
                assert len(setup_handle) == 1
                setup_handle[0].uninstrument()
            with pools.connection() as conn:
                conn.execute("SELECT 1")
            assert value(points(kept), "db.client.connection.wait_time", **attrs) == 2
    finally:
        second.uninstrument()
        provider2.shutdown()


def _instrumentations(pools):
    import gc

    from racaffinity.otel import Instrumentation

    return [o for o in gc.get_objects() if isinstance(o, Instrumentation) and o._pools is pools and not o._closed]


def test_closed_node_pools_report_no_pool_points(pg) -> None:
    # A closed pool has no connections, limits or waiters: reporting its
    # last `max`/`idle.min` (and 0 idle, 0 used) for as long as the meter
    # provider lives would show a pool that no longer exists. Java's meters
    # of a closed data source read NaN (no point) for the same reason.
    cluster = ra.Cluster("name = otel\nnodes = RAC1, RAC2, RAC3")
    pools = NodePools(cluster, pg.dsn, min_size=1, max_size=2, timeout=5.0)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(pools, meter_provider=provider)
    try:
        assert len(points(reader)["db.client.connection.max"]) == 3
        pools.close()
        cluster.close()
        pts = points(reader)
        for name in ("db.client.connection.count", "db.client.connection.max",
                     "db.client.connection.idle.min", "db.client.connection.pending_requests",
                     "racaffinity.node.picks", "racaffinity.scope.live"):
            assert pts.get(name, []) == [], f"{name} after close: {pts.get(name)}"
    finally:
        handle.uninstrument()
        provider.shutdown()
        pools.close()
        cluster.close()


def test_uninstrument_lets_go_of_the_pools_and_the_cluster(pg) -> None:
    # OpenTelemetry's API cannot unregister an observable instrument: its
    # callbacks live as long as the meter provider (the global one: the
    # process). Whatever they reach stays alive with them.
    import gc
    import weakref

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    cluster = ra.Cluster("name = otel\nnodes = RAC1, RAC2, RAC3")
    pools = NodePools(cluster, pg.dsn, min_size=0, max_size=1, timeout=5.0)
    handle = instrument(pools, meter_provider=provider)
    points(reader)
    handle.uninstrument()
    pools.close()
    cluster.close()
    gone_cluster, gone_pools = weakref.ref(cluster), weakref.ref(pools)
    del cluster, pools
    gc.collect()
    try:
        assert gone_pools() is None, "the meter provider keeps the closed NodePools alive"
        assert gone_cluster() is None, "the meter provider keeps the closed Cluster alive"
        assert all(v == [] for k, v in points(reader).items() if not k.endswith(("wait_time", "use_time")))
    finally:
        provider.shutdown()


def test_connections_being_made_are_not_counted_as_used(pg, proxies) -> None:
    # psycopg_pool's `pool_size` counts the connections it is still making;
    # `used` was `pool_size - idle`, so a pool still connecting (here to a
    # node that answers nothing) reported connections in use that nobody
    # had borrowed. `used` counts the connections the application holds.
    proxies["RAC1"].blackhole()
    cluster = ra.Cluster("name = otelc\nnodes = RAC1, RAC2, RAC3")
    pools = NodePools(cluster, dict(pg.dsn, RAC1=proxies["RAC1"].dsn(pg.dsn["RAC1"])), min_size=2, max_size=2,
                      timeout=5.0)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(pools, meter_provider=provider)
    try:
        stats = pools.node_pool("RAC1").get_stats()
        assert stats.get("pool_size", 0) == 2 and stats.get("pool_available", 0) == 0, stats  # connecting
        with pools.connection(key=next(k for k in range(1000) if cluster.route_key(k).name == "RAC2")):
            pts = points(reader)
        for node, used in (("RAC1", 0), ("RAC2", 1)):
            assert value(pts, "db.client.connection.count", **{"db.client.connection.pool.name": f"otelc-{node}",
                                                                "db.client.connection.state": "used"}) == used, node
        assert value(pts, "db.client.connection.count", **{"db.client.connection.pool.name": "otelc-RAC1",
                                                            "db.client.connection.state": "idle"}) == 0
    finally:
        proxies["RAC1"].heal()
        handle.uninstrument()
        provider.shutdown()
        pools.close()
        cluster.close()


def test_a_replaced_node_pool_is_not_kept_by_the_instrumentation(pg) -> None:
    # Every Down, drain and reconnect back-off replaces a node's pool, and
    # the collections hook the successor. The table of hooked pools kept
    # every pool it had ever hooked until uninstrument(): a process that
    # lives with its meter provider kept the retired pools of every
    # failover for good.
    import gc
    import weakref

    cluster = ra.Cluster("name = otel\nnodes = RAC1, RAC2, RAC3")
    pools = NodePools(cluster, pg.dsn, min_size=0, max_size=1, timeout=5.0, upkeep_interval=0.05)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(pools, meter_provider=provider)
    try:
        points(reader)
        old = weakref.ref(pools.node_pool("RAC1"))
        cluster.set_node_state("RAC1", "down")
        wait_until(lambda: pools.node_pool("RAC1") is not old(), 5)
        cluster.set_node_state("RAC1", "up")
        assert len(points(reader)["db.client.connection.max"]) == 3  # the successor is measured

        def collected() -> bool:
            gc.collect()
            return old() is None

        # Its close runs on a thread of its own, which holds it until it ends.
        try:
            wait_until(collected, 10)
        except BaseException:
            kept = [r for r in gc.get_referrers(old()) if isinstance(r, tuple)]
            raise AssertionError(f"the instrumentation keeps the retired pool: {kept}") from None
    finally:
        handle.uninstrument()
        provider.shutdown()
        pools.close()
        cluster.close()
