"""Which failures count against a node (issue 11, P1 and the Python minor
list): one failure per failed node operation for a dead, refused or
blackholed node, whatever the pool sizes; none for errors of one user or
one session. Checked on the core's failure and ejection counters."""

from __future__ import annotations

import asyncio
import time

import psycopg
import psycopg_pool
import pytest

import racaffinity as ra
from racaffinity.pools import AsyncNodePools, NodePools
from racaffinity.tpc import recover_all

from conftest import NAMES, prepared_xacts
from faultproxy import FaultProxy
from faults import key_on, node_metrics, within
from test_tpc_faults import prepare_directly

EJECT_AFTER = 5  # health.eject_after_failures, the default


def use(pools: NodePools, key: int) -> object:
    """One unit of work routed by `key`: the server port, or the error's type."""
    try:
        with pools.connection(key=key, timeout=1.0) as conn:
            return conn.execute("SELECT inet_server_port()").fetchone()[0]
    except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
        return type(e).__name__


def assert_ejected_after_five(pg, cluster: ra.Cluster, pools: NodePools) -> None:
    key = key_on(cluster, "RAC2")
    seen = [within(20, use, pools, key) for _ in range(8)]
    m = node_metrics(cluster, "RAC2")
    assert seen[:EJECT_AFTER] == ["PoolTimeout"] * EJECT_AFTER, seen
    assert m["failures"] == EJECT_AFTER and m["ejections"] == 1, (m, seen)
    assert cluster.node_state("RAC2") == ra.NodeState.DOWN
    # the key has moved to a healthy node
    assert all(p in (pg.port["RAC1"], pg.port["RAC3"]) for p in seen[EJECT_AFTER:]), seen


@pytest.mark.timeout(90)
@pytest.mark.parametrize("max_size", [None, 4])
def test_a_killed_node_is_ejected_whatever_the_pool_sizes(pg, cluster_factory, max_size):
    c = cluster_factory(nodes=NAMES)
    pg.kill(2)
    try:
        with NodePools(c, pg.dsn, max_size=max_size, timeout=1.0) as pools:
            assert_ejected_after_five(pg, c, pools)
    finally:
        pg.restart(2)


@pytest.mark.timeout(90)
def test_a_blackholed_node_is_ejected_with_the_default_pool_sizes(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    with FaultProxy(pg.port["RAC2"]) as px:
        px.blackhole()
        dsns = dict(pg.dsn, RAC2=px.dsn(pg.dsn["RAC2"]))
        with NodePools(c, dsns, timeout=1.0) as pools:
            assert_ejected_after_five(pg, c, pools)
            px.heal()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_warm_pool_whose_node_is_blackholed_is_bounded_and_ejected(pg, cluster_factory, kind):
    # The pool holds an idle connection to RAC2 when RAC2 stops answering:
    # its first use must not hang on that connection, and the failed uses
    # count against RAC2 (5, then ejected), as for a pool that was cold.
    c = cluster_factory(nodes=NAMES)
    with FaultProxy(pg.port["RAC2"]) as px:
        dsns = dict(pg.dsn, RAC2=px.dsn(pg.dsn["RAC2"]))
        key = key_on(c, "RAC2")
        if kind == "sync":
            with NodePools(c, dsns, timeout=1.0) as pools:
                assert within(20, use, pools, key) == pg.port["RAC2"]  # warm
                time.sleep(0.6)  # idle for a while
                px.blackhole()
                assert_ejected_after_five(pg, c, pools)
                px.heal()
            return

        async def ause(pools):
            try:
                async with pools.connection(key=key, timeout=1.0) as conn:
                    return (await (await conn.execute("SELECT inet_server_port()")).fetchone())[0]
            except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
                return type(e).__name__

        async def run():
            async with AsyncNodePools(c, dsns, timeout=1.0) as pools:
                assert await ause(pools) == pg.port["RAC2"]
                await asyncio.sleep(0.6)
                px.blackhole()
                seen = [await asyncio.wait_for(ause(pools), 20) for _ in range(8)]
                px.heal()
                return seen

        seen = asyncio.run(run())
        m = node_metrics(c, "RAC2")
        assert seen[:EJECT_AFTER] == ["PoolTimeout"] * EJECT_AFTER, seen
        assert m["failures"] == EJECT_AFTER and m["ejections"] == 1, (m, seen)
        assert all(p in (pg.port["RAC1"], pg.port["RAC3"]) for p in seen[EJECT_AFTER:]), seen


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", ["blackhole", "refuse", "reset"])
def test_a_node_behind_a_toxiproxy_fault_is_ejected_with_the_default_pool_sizes(pg, cluster_factory, toxi, fault):
    c = cluster_factory(nodes=NAMES)
    getattr(toxi, fault)("RAC2")
    dsns = dict(pg.dsn, RAC2=toxi.dsn["RAC2"])
    with NodePools(c, dsns, timeout=1.0) as pools:
        assert_ejected_after_five(pg, c, pools)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("max_size", [None, 4])
def test_a_role_that_does_not_exist_never_counts_as_a_node_failure(pg, cluster_factory, max_size):
    c = cluster_factory(nodes=NAMES)
    dsns = {n: d.replace("user=postgres", "user=no_such_role") for n, d in pg.dsn.items()}
    with NodePools(c, dsns, max_size=max_size, timeout=0.5) as pools:
        key = key_on(c, "RAC2")
        seen = [within(20, use, pools, key) for _ in range(EJECT_AFTER + 2)]
    assert seen == ["PoolTimeout"] * (EJECT_AFTER + 2)
    for name in NAMES:
        m = node_metrics(c, name)
        assert m["failures"] == 0 and m["ejections"] == 0, (name, m)


@pytest.mark.timeout(60)
def test_terminating_one_session_is_not_a_node_failure(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    key = key_on(c, "RAC2")
    with NodePools(c, pg.dsn, max_size=2, timeout=5.0) as pools, psycopg.connect(
        pg.dsn["RAC2"], autocommit=True, connect_timeout=5
    ) as admin:
        seen = []
        for _ in range(EJECT_AFTER + 1):
            try:
                with pools.connection(key=key, timeout=5.0) as conn:
                    seen.append(conn.info.port)
                    admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
                    conn.execute("SELECT 1")
            except psycopg.errors.AdminShutdown:
                seen.append("AdminShutdown")
    m = node_metrics(c, "RAC2")
    # every session was RAC2's and every one was terminated
    assert seen == [pg.port["RAC2"], "AdminShutdown"] * (EJECT_AFTER + 1), seen
    assert m["failures"] == 0 and m["ejections"] == 0 and c.node_state("RAC2") == ra.NodeState.UP


@pytest.mark.timeout(90)
def test_recover_all_after_a_restart_does_not_call_the_node_unreachable(pg, cluster_factory, tables):
    c = cluster_factory(nodes=NAMES)
    with NodePools(c, pg.dsn, min_size=2, max_size=4, timeout=5.0) as pools:
        pools.node_pool("RAC2").wait(timeout=10.0)  # idle pooled connections
        prepare_directly(pg.dsn["RAC2"], "restarted", "b0")
        pg.kill(2)
        pg.restart(2)  # the pool's connections to RAC2 are now stale
        report = within(30, pools.recover_all, "rollback", timeout=5.0)
    assert report.unreachable == {} and report.ok
    assert [(r.node_name, r.gtrid) for r in report.resolved] == [("RAC2", "restarted")]
    assert prepared_xacts(pg) == {n: [] for n in NAMES}


@pytest.mark.asyncio
async def test_recover_all_refuses_async_pools_with_a_clear_error(pg, cluster_factory):
    async with AsyncNodePools(cluster_factory(nodes=NAMES), pg.dsn, timeout=2.0) as apools:
        with pytest.raises(TypeError, match="AsyncNodePools"):
            recover_all(apools)


@pytest.mark.asyncio
async def test_a_global_transaction_refuses_async_pools_with_a_clear_error(pg, cluster_factory):
    from racaffinity.tpc import GlobalTransaction

    async with AsyncNodePools(cluster_factory(nodes=NAMES), pg.dsn, timeout=2.0) as apools:
        with pytest.raises(TypeError, match="AsyncNodePools"):
            GlobalTransaction(apools, "async-gtx")


@pytest.mark.timeout(60)
def test_heartbeat_probes_answered_with_a_missing_role_keep_the_nodes_up(pg, cluster_factory):
    # The server answers the probe's connect with FATAL 28000: it is alive.
    # probe_timeout: the default is min(1 s, the interval), 100 ms here,
    # which a loaded CI machine's connect and ping can overrun: a miss by
    # the clock, not by the answer this test is about.
    c = cluster_factory("heartbeat.interval = 100ms\nheartbeat.misses = 2", nodes=NAMES)
    dsns = {n: d.replace("user=postgres", "user=no_such_role") for n, d in pg.dsn.items()}
    with NodePools(c, dsns, timeout=0.5, probe_timeout=5.0) as pools:
        for _ in range(4):
            pools.check_heartbeat()
    for name in NAMES:
        m = node_metrics(c, name)
        assert m["probe_misses"] == 0 and m["state"] == "up", (name, m)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_async_heartbeat_probes_answered_with_a_missing_role_keep_the_nodes_up(pg, cluster_factory):
    c = cluster_factory("heartbeat.interval = 100ms\nheartbeat.misses = 2", nodes=NAMES)
    dsns = {n: d.replace("user=postgres", "user=no_such_role") for n, d in pg.dsn.items()}
    async with AsyncNodePools(c, dsns, timeout=0.5, probe_timeout=5.0) as apools:
        for _ in range(4):
            await apools.check_heartbeat()
    for name in NAMES:
        m = node_metrics(c, name)
        assert m["probe_misses"] == 0 and m["state"] == "up", (name, m)
