"""A node removed from the cluster (`Cluster.remove_node`; the fleet feed's
`removed` record applies the same removal) while the node pools hold
connections on it, over the 3 local nodes, for `NodePools` and
`AsyncNodePools`. The pools follow the core's `node_down_is_planned`:
removed while it drained is a planned end (the connection in use finishes,
the pool keeps no connection, waiters go elsewhere); removed while Up is
not (nothing told its work to finish), and the connection in use is
aborted as at any hard Down."""

from __future__ import annotations

import contextvars

import psycopg
import pytest

import racaffinity as ra
from racaffinity.pools import AsyncNodePools, NodePools, is_node_failure
from racaffinity._acompat import ajoin, aspawn, join, spawn

from conftest import NAMES, aport_of, port_of, wait_until, wait_until_async
from faults import key_on

APP = "racaffinity-node-removal"


def server_conns(pg, node: str, app: str) -> int:
    with psycopg.connect(pg.dsn[node], autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()[0]



def waiting(pools, node: int) -> int:
    return pools._by_id[node].get_stats().get("requests_waiting", 0)


def pinned_to(pools, name: str):
    while True:
        scope = pools.pin()
        if scope.__enter__().name == name:
            return scope
        scope.__exit__(None, None, None)


@pytest.mark.timeout(60)
def test_sync_a_node_removed_while_draining_lets_its_connection_finish_and_sends_its_waiter_elsewhere(
        pg, cluster_factory):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-sync-drain"
    rac1 = c.node_id("RAC1")
    key = key_on(c, "RAC1")
    pools = NodePools(c, pg.dsn, min_size=1, max_size=1, timeout=30.0, upkeep_interval=0.05,
                      connect_kwargs={"application_name": app})
    with pools:
        wait_until(lambda: all(server_conns(pg, n, app) >= 1 for n in NAMES), 10)
        scope = pinned_to(pools, "RAC1")
        try:
            c.set_node_state("RAC1", "draining")
            wait_until(lambda: pools._by_id[rac1]._racaffinity_draining, 2)
            got: dict = {}

            def waiter() -> None:
                try:
                    with pools.connection() as conn:
                        got["port"] = port_of(conn)
                except Exception as e:  # the test reads it
                    got["error"] = repr(e)

            with pools.connection() as held:
                held.execute("BEGIN")
                assert port_of(held) == pg.port["RAC1"]
                # Pinned work goes on during the drain: it waits on the drained node's pool.
                task = spawn(contextvars.copy_context().run, (waiter,), "waiter")
                wait_until(lambda: waiting(pools, rac1) == 1, 5)
                c.remove_node("RAC1")
                assert c.node_state(rac1) == ra.NodeState.DOWN
                assert c.node_down_is_planned(rac1), "the core: removed while draining is planned"
                wait_until(lambda: "port" in got or "error" in got, 10)
                assert got.get("port") not in (None, pg.port["RAC1"]), got
                assert port_of(held) == pg.port["RAC1"], "the connection in use finishes its request"
                held.execute("COMMIT")
                for _ in range(10):
                    with pools.connection(key=key) as conn:
                        assert port_of(conn) != pg.port["RAC1"], "new borrows go elsewhere"
            join(task, 5)
            wait_until(lambda: server_conns(pg, "RAC1", app) == 0, 10)
        finally:
            scope.__exit__(None, None, None)


@pytest.mark.timeout(60)
@pytest.mark.asyncio
async def test_async_a_node_removed_while_draining_lets_its_connection_finish_and_sends_its_waiter_elsewhere(
        pg, cluster_factory):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-async-drain"
    rac1 = c.node_id("RAC1")
    key = key_on(c, "RAC1")
    pools = AsyncNodePools(c, pg.dsn, min_size=1, max_size=1, timeout=30.0, upkeep_interval=0.05,
                           connect_kwargs={"application_name": app})
    async with pools:
        await wait_until_async(lambda: all(server_conns(pg, n, app) >= 1 for n in NAMES), 10)
        scope = pinned_to(pools, "RAC1")
        try:
            c.set_node_state("RAC1", "draining")
            await wait_until_async(lambda: pools._by_id[rac1]._racaffinity_draining, 2)
            got: dict = {}

            async def waiter() -> None:
                try:
                    async with pools.connection() as conn:
                        got["port"] = await aport_of(conn)
                except Exception as e:  # the test reads it
                    got["error"] = repr(e)

            async with pools.connection() as held:
                await held.execute("BEGIN")
                assert await aport_of(held) == pg.port["RAC1"]
                task = aspawn(waiter, (), "waiter")
                await wait_until_async(lambda: waiting(pools, rac1) == 1, 5)
                c.remove_node("RAC1")
                assert c.node_down_is_planned(rac1), "the core: removed while draining is planned"
                await wait_until_async(lambda: "port" in got or "error" in got, 10)
                assert got.get("port") not in (None, pg.port["RAC1"]), got
                assert await aport_of(held) == pg.port["RAC1"], "the connection in use finishes its request"
                await held.execute("COMMIT")
                for _ in range(10):
                    async with pools.connection(key=key) as conn:
                        assert await aport_of(conn) != pg.port["RAC1"], "new borrows go elsewhere"
            await ajoin(task, 5)
            await wait_until_async(lambda: server_conns(pg, "RAC1", app) == 0, 10)
        finally:
            scope.__exit__(None, None, None)


@pytest.mark.timeout(60)
def test_sync_a_node_removed_while_up_has_its_connection_in_use_aborted(pg, cluster_factory):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-sync-up"
    rac1 = c.node_id("RAC1")
    key = key_on(c, "RAC1")
    pools = NodePools(c, pg.dsn, min_size=2, max_size=4, upkeep_interval=0.05,
                      connect_kwargs={"application_name": app})
    with pools:
        wait_until(lambda: server_conns(pg, "RAC1", app) >= 2, 10)
        holder = pools.connection(key=key)
        held = holder.__enter__()
        assert port_of(held) == pg.port["RAC1"]
        c.remove_node("RAC1")
        assert not c.node_down_is_planned(rac1), "the core: removed while taking work is not planned"
        wait_until(lambda: server_conns(pg, "RAC1", app) == 0, 10)
        with pytest.raises(psycopg.OperationalError) as info:
            held.execute("SELECT 1")
        assert is_node_failure(info.value)
        holder.__exit__(type(info.value), info.value, None)
        for _ in range(10):
            with pools.connection(key=key) as conn:
                assert port_of(conn) != pg.port["RAC1"], "new borrows go elsewhere"


@pytest.mark.timeout(60)
@pytest.mark.asyncio
async def test_async_a_node_removed_while_up_has_its_connection_in_use_aborted(pg, cluster_factory):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-async-up"
    rac1 = c.node_id("RAC1")
    key = key_on(c, "RAC1")
    pools = AsyncNodePools(c, pg.dsn, min_size=2, max_size=4, upkeep_interval=0.05,
                           connect_kwargs={"application_name": app})
    async with pools:
        await wait_until_async(lambda: server_conns(pg, "RAC1", app) >= 2, 10)
        holder = pools.connection(key=key)
        held = await holder.__aenter__()
        assert await aport_of(held) == pg.port["RAC1"]
        c.remove_node("RAC1")
        assert not c.node_down_is_planned(rac1), "the core: removed while taking work is not planned"
        await wait_until_async(lambda: server_conns(pg, "RAC1", app) == 0, 10)
        with pytest.raises(psycopg.OperationalError) as info:
            await held.execute("SELECT 1")
        assert is_node_failure(info.value)
        await holder.__aexit__(type(info.value), info.value, None)
        for _ in range(10):
            async with pools.connection(key=key) as conn:
                assert await aport_of(conn) != pg.port["RAC1"], "new borrows go elsewhere"
