"""Seed 002 (UCP) parity over the 3 local PostgreSQL nodes: the connection
affinity callback (UCP's sample in snake_case), planned drains with a
timeout, and the partition-map loader. Each connection's node is the
server's own port."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import psycopg
import pytest

import racaffinity as ra
from racaffinity import AffinityPolicy, ConnectionAffinityContext, StrictAffinityError
from racaffinity.pools import AsyncNodePools, NodePools

from conftest import NAMES, wait_until

pytestmark = pytest.mark.usefixtures("pg")


class AffinityCallbackSample:
    """The seed's AffinityCallbackSample (§10.4.2.1), in snake_case."""

    def __init__(self) -> None:
        self.app_affinity_context = None
        self.affinity_policy = AffinityPolicy.TRANSACTION_BASED_AFFINITY
        self.lock_obj = threading.Lock()

    def set_affinity_policy(self, policy):
        self.affinity_policy = policy

    def get_affinity_policy(self):
        return self.affinity_policy

    def set_connection_affinity_context(self, aff_cxt):
        with self.lock_obj:
            self.app_affinity_context = aff_cxt
        return True

    def get_connection_affinity_context(self):
        with self.lock_obj:
            return self.app_affinity_context


CONFIG = "database = orcl\nservice = svc\nnodes = RAC1, RAC2, RAC3\npolicy = random\n"


def down(node: str, extra: str = "reason=FAILURE") -> str:
    return f"SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={node} host=h status=down {extra}"


def up(node: str) -> str:
    return f"SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={node} host=h status=up"


def advisory(no_affinity: str) -> str:
    body = "".join(
        f"{{instance={n} percent=33 flag=GOOD aff={'FALSE' if n == no_affinity else 'TRUE'}}}" for n in NAMES
    )
    return f"VERSION=1.0 database=orcl service=svc {{ {body} }}"


def port(pools, **kw) -> int:
    with pools.connection(**kw) as conn:
        return conn.execute("SELECT inet_server_port()").fetchone()[0]


@pytest.fixture
def make(pg, cluster_factory):
    made = []

    def make(extra: str = "", **kwargs):
        c = cluster_factory(CONFIG + extra)
        kwargs.setdefault("min_size", 0)
        kwargs.setdefault("max_size", 4)
        p = NodePools(c, pg.dsn, **kwargs)
        made.append(p)
        return c, p

    yield make
    for p in made:
        p.close()


def sticks(pg, pools, cb) -> int:
    """Every connection of the callback's context lands on its instance."""
    first = port(pools)
    ctx = cb.get_connection_affinity_context()
    assert isinstance(ctx, ConnectionAffinityContext)
    assert pg.port[ctx.instance] == first, ctx
    for _ in range(15):
        assert port(pools) == first
    assert cb.get_connection_affinity_context() is ctx
    return first


def test_the_seed_sample_keeps_connections_on_one_instance_and_moves_on_fan_down(pg, make):
    cb = AffinityCallbackSample()
    c, pools = make(affinity_callback=cb)
    first = sticks(pg, pools, cb)
    ctx = cb.get_connection_affinity_context()
    assert ctx.policy is AffinityPolicy.TRANSACTION_BASED_AFFINITY
    text = repr(ctx)
    assert f"instance={ctx.instance}" in text and "TRANSACTION_BASED_AFFINITY" in text and "since=" in text
    pools.apply_event(down(ctx.instance))
    moved = sticks(pg, pools, cb)
    assert moved != first
    fresh = cb.get_connection_affinity_context()
    assert fresh is not ctx and fresh.instance != ctx.instance
    cb.set_connection_affinity_context(None)
    sticks(pg, pools, cb)
    assert cb.get_connection_affinity_context() is not fresh


class _RefusesMoves(AffinityCallbackSample):
    """Takes the first context; raises when handed a moved one."""

    def set_connection_affinity_context(self, aff_cxt):
        if self.app_affinity_context is not None and aff_cxt is not None:
            raise RuntimeError("the application refuses the moved context")
        return super().set_connection_affinity_context(aff_cxt)


def test_a_callback_raising_during_a_soft_move_leaks_no_lease(pg, make):
    cb = _RefusesMoves()
    c, pools = make(affinity_callback=cb)
    port(pools)
    ctx = cb.get_connection_affinity_context()
    pools.apply_event(down(ctx.instance))
    with pytest.raises(RuntimeError, match="refuses the moved context"):
        with pools.connection():
            pass
    import gc

    gc.collect()
    assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


@pytest.mark.parametrize(
    "policy,strict",
    [
        (AffinityPolicy.TRANSACTION_BASED_AFFINITY, "transaction.strict = true"),
        (AffinityPolicy.WEBSESSION_BASED_AFFINITY, "session.strict = true"),
    ],
)
def test_strict_modes_refuse_instead_of_moving(pg, make, policy, strict):
    cb = AffinityCallbackSample()
    cb.set_affinity_policy(policy)
    c, pools = make(strict, affinity_callback=cb)
    sticks(pg, pools, cb)
    ctx = cb.get_connection_affinity_context()
    assert ctx.policy is policy
    pools.apply_event(down(ctx.instance))
    with pytest.raises(StrictAffinityError):
        port(pools)
    assert cb.get_connection_affinity_context() is ctx
    cb.set_connection_affinity_context(None)
    assert sticks(pg, pools, cb) != pg.port[ctx.instance]


def test_aff_false_moves_web_session_contexts_only(pg, make, cluster_factory):
    web = AffinityCallbackSample()
    web.set_affinity_policy(AffinityPolicy.WEBSESSION_BASED_AFFINITY)
    c, pools = make(affinity_callback=web)
    web_port = sticks(pg, pools, web)
    instance = web.get_connection_affinity_context().instance
    tx = AffinityCallbackSample()
    tx_pools = NodePools(c, pg.dsn, min_size=0, max_size=2, affinity_callback=tx)
    try:
        for _ in range(200):
            tx.set_connection_affinity_context(None)
            if port(tx_pools) == web_port:
                break
        assert tx.get_connection_affinity_context().instance == instance
        pools.apply_event(advisory(instance))
        assert sticks(pg, pools, web) != web_port, "aff=FALSE released the web-session context"
        assert sticks(pg, tx_pools, tx) == web_port, "a transaction context stays"
    finally:
        tx_pools.close()


def test_an_object_without_the_four_methods_is_refused(pg, cluster_factory):
    with pytest.raises(TypeError, match="get_connection_affinity_context"):
        NodePools(cluster_factory(CONFIG), pg.dsn, affinity_callback=object())


def test_the_callback_works_with_the_async_pools(pg, cluster_factory):
    async def main():
        cb = AffinityCallbackSample()
        async with AsyncNodePools(cluster_factory(CONFIG), pg.dsn, min_size=0, max_size=2, affinity_callback=cb) as pools:
            ports = set()
            for _ in range(10):
                async with pools.connection() as conn:
                    ports.add((await (await conn.execute("SELECT inet_server_port()")).fetchone())[0])
            assert ports == {pg.port[cb.get_connection_affinity_context().instance]}

    asyncio.run(main())


# ---- planned drain with a timeout (real time, short) ------------------------------

APP = "racaff-ucp-drain"


def server_conns(pg, node: str) -> int:
    with psycopg.connect(pg.dsn[node], autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP,)).fetchone()[0]


def test_a_planned_drain_empties_the_node_pool_by_its_timeout(pg, make):
    c, pools = make(min_size=2, connect_kwargs={"application_name": APP}, upkeep_interval=0.05)
    wait_until(lambda: all(server_conns(pg, n) >= 2 for n in NAMES), 10)
    with c.pin() as route:
        node = route.name
        holder = pools.connection()
        busy = holder.__enter__()  # in flight across the drain
        assert busy.execute("SELECT inet_server_port()").fetchone()[0] == pg.port[node]
        t0 = time.monotonic()
        pools.apply_event(down(node, "reason=USER drain_timeout=2"))
        assert c.node_state(node) is ra.NodeState.DRAINING
        # Idle connections close at once; the busy one stays.
        wait_until(lambda: server_conns(pg, node) == 1, 2)
        assert time.monotonic() - t0 < 2
        # Existing affinity runs on during the drain; new work goes elsewhere.
        assert port(pools) == pg.port[node]
        fresh = contextvars.Context().run(lambda: [port(pools) for _ in range(10)])
        assert pg.port[node] not in fresh
        holder.__exit__(None, None, None)  # retired as it is returned
        wait_until(lambda: server_conns(pg, node) == 0, 2)
        # When the timeout ends the pin moves; the last connections it used on
        # the instance are retired within one upkeep round.
        wait_until(lambda: port(pools) != pg.port[node], 5)
        assert time.monotonic() - t0 >= 2.0
        wait_until(lambda: server_conns(pg, node) == 0, 1)
    pools.apply_event(up(node))
    wait_until(lambda: server_conns(pg, node) >= 2, 10)  # the pool grows back to min_size


# ---- the partition-map loader ---------------------------------------------------

PARTS = 6


def loader_result(kind, loader, pg, make, cluster_factory):
    """Opens `kind` ("sync" or "async") pools with `loader` and routes key 1:
    the cluster, the pools' partition_map_loads and the port that served."""
    if kind == "sync":
        c, pools = make(f"data.partitions = {PARTS}", partition_map_loader=loader)
        return c, pools.partition_map_loads, port(pools, key=1)
    c = cluster_factory(CONFIG + f"data.partitions = {PARTS}")

    async def run():
        async with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, partition_map_loader=loader) as ap:
            async with ap.connection(key=1) as conn:
                cur = await conn.execute("SELECT inet_server_port()")
                return ap.partition_map_loads, (await cur.fetchone())[0]

    return (c, *asyncio.run(run()))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_loader_error_with_a_nul_in_its_text_keeps_routing(pg, make, cluster_factory, kind, caplog):
    # The error's text goes to the core as a C string: a NUL in it must not
    # turn the documented "keep the last good map, go on" into a failed open.
    def loader():
        raise ValueError("bad\0map")

    c, loads, served = loader_result(kind, loader, pg, make, cluster_factory)
    assert served in pg.port.values()
    assert loads[0] == 0 and loads[1] == 1 and loads[2] == "ValueError: bad\\0map", loads
    m = c.metrics()["partition_map"]
    assert m["load_failures"] == 1 and m["last_error"] == "loader: ValueError: bad\\0map", m
    # the warning carries the loader's exception, traceback included
    rec = next(r for r in caplog.records if "partition map load failed" in r.getMessage())
    assert rec.exc_info is not None and rec.exc_info[0] is ValueError



@pytest.mark.parametrize("text", ["x" * (2 << 20), "x \udcff"], ids=["2MiB", "lone-surrogate"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_loader_error_no_c_string_can_hold_keeps_routing(pg, make, cluster_factory, kind, text):
    # The error's text goes to the core as a UTF-8 C string of at most 1 MiB
    # (the core keeps 512 bytes of it): a longer one (an exception quoting
    # the whole result) or one with a lone surrogate (a file name decoded
    # with surrogateescape) must not turn "keep the last good map, go on"
    # into a failed open.
    def loader():
        raise ValueError(text)

    c, loads, served = loader_result(kind, loader, pg, make, cluster_factory)
    assert served in pg.port.values()
    assert loads[0] == 0 and loads[1] == 1 and loads[2] == f"ValueError: {text}", loads[:2]
    m = c.metrics()["partition_map"]
    assert m["load_failures"] == 1 and m["last_error"].startswith("loader: ValueError: x"), m["load_failures"]

def test_the_loader_follows_a_map_table_changed_by_sql_with_no_request_failing(pg, make):
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS ucp_partition_map")
        admin.execute("CREATE TABLE ucp_partition_map (part int PRIMARY KEY, node text NOT NULL)")
        admin.execute(
            "INSERT INTO ucp_partition_map SELECT p, 'RAC' || (p %% 3 + 1) FROM generate_series(0, %s) p", (PARTS - 1,)
        )
        broken = threading.Event()

        def loader():
            if broken.is_set():
                raise RuntimeError("map table unreachable")
            with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as conn:
                return dict(conn.execute("SELECT part, node FROM ucp_partition_map").fetchall())

        c, pools = make(f"data.partitions = {PARTS}", partition_map_loader=loader, partition_map_reload=0.1)
        keys = list(range(60))

        def owner(k):
            return admin.execute(
                "SELECT node FROM ucp_partition_map WHERE part = %s", (c.partition_of(k),)
            ).fetchone()[0]

        def all_on_owner():
            return all(port(pools, key=k) == pg.port[owner(k)] for k in keys)

        assert all_on_owner()
        assert '"source":"loader"' in c.metrics_json()
        failures, served, stop = [], [0], threading.Event()

        def traffic():
            while not stop.is_set():
                for k in keys:
                    try:
                        port(pools, key=k)
                        served[0] += 1
                    except Exception as e:  # noqa: BLE001 - every failure counts
                        failures.append(e)

        t = threading.Thread(target=traffic)
        t.start()
        try:
            admin.execute("UPDATE ucp_partition_map SET node = 'RAC' || ((part + 1) % 3 + 1)")
            wait_until(all_on_owner, 5)
            # A failing loader keeps the last good map and is counted.
            loads, fails, _ = pools.partition_map_loads
            broken.set()
            wait_until(lambda: pools.partition_map_loads[1] > fails, 5)
            assert "map table unreachable" in pools.partition_map_loads[2]
            assert all_on_owner()
            broken.clear()
            wait_until(lambda: pools.partition_map_loads[2] is None, 5)
        finally:
            stop.set()
            t.join()
        assert failures == [] and served[0] > 0
        admin.execute("DROP TABLE ucp_partition_map")


# ---- the cffi wrappers ----------------------------------------------------------


def test_the_whole_partition_map_is_replaced_or_nothing_changes(cluster_factory):
    c = cluster_factory("nodes = A, B, C\ndata.partitions = 4")
    assert c.replace_partition_map({0: "A", 1: "B", 2: "C", 3: "A"}, "loader:test") == 1
    for bad, err in [({0: "A", 1: "NOPE"}, ra.UnknownNodeError), ({-1: "A"}, ra.InvalidArgumentError), ({9: "A"}, ra.InvalidArgumentError)]:
        with pytest.raises(err):
            c.replace_partition_map(bad, "loader:test")
    with pytest.raises(ra.InvalidArgumentError):
        c.replace_partition_map({0: "A"}, "bad source!")
    assert c.metrics()["partition_map"] == {"epoch": 1, "source": "loader:test", "load_failures": 0, "last_error": None}
    # A loader's failure keeps the map and is counted by the core.
    c.partition_map_load_failed("loader:test", 'relation "pm" does not exist')
    with pytest.raises(ra.InvalidArgumentError):
        c.partition_map_load_failed("bad source!", "x")
    with pytest.raises(ra.InvalidUtf8Error):
        c.partition_map_load_failed("loader:test", "\ud800")
    assert c.metrics()["partition_map"] == {
        "epoch": 1, "source": "loader:test", "load_failures": 1,
        "last_error": 'loader:test: relation "pm" does not exist'}


def test_a_context_follows_its_scopes_strict_switch(cluster_factory):
    c = cluster_factory("nodes = A, B\ntransaction.strict = true\npolicy = round_robin")
    tx = c.affinity_context("transaction")
    placed = tx.pin()
    assert placed.kind is ra.RouteKind.PLACED
    c.set_node_state(placed.name, "down")
    with pytest.raises(StrictAffinityError):
        tx.pin()
    web = c.affinity_context(ra.Scope.SESSION)
    assert web.pin().node != placed.node
    tx.close()
    with pytest.raises(ra.InvalidArgumentError):
        c.affinity_context("data").pin()


def _live_pins(c) -> int:
    return sum(s["live"] for s in c.metrics()["scopes"].values() if isinstance(s, dict) and "live" in s)


@pytest.mark.parametrize("scope", ["transaction", "session"])
def test_closing_a_context_pinned_twice_releases_every_level(cluster_factory, scope):
    c = cluster_factory("nodes = A, B")
    ctx = c.affinity_context(scope)
    ctx.pin()
    ctx.pin()
    assert _live_pins(c) == 1
    ctx.close()
    assert _live_pins(c) == 0
    ctx.close()  # idempotent
    assert _live_pins(c) == 0


def test_collecting_an_unclosed_context_pinned_twice_releases_every_level(cluster_factory):
    import gc

    c = cluster_factory("nodes = A, B")
    ctx = c.affinity_context("transaction")
    ctx.pin()
    ctx.pin()
    assert _live_pins(c) == 1
    del ctx
    gc.collect()
    assert _live_pins(c) == 0
