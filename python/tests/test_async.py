"""AsyncNodePools: pins and transactions follow asyncio tasks on one thread;
the heartbeat is an asyncio task."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

import racaffinity as ra
from racaffinity.pools import AsyncNodePools

from conftest import NAMES, aport_of, wait_until_async


@pytest.mark.asyncio
async def test_concurrent_tasks_keep_their_own_pins_on_real_connections(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES, policy="round_robin")
    async with AsyncNodePools(c, pg.dsn, min_size=1, max_size=10, timeout=5.0) as pools:
        errors = []
        used = Counter()

        async def task(i):
            with pools.pin() as route:
                for _ in range(4):
                    async with pools.connection() as conn:
                        p = await aport_of(conn)
                        await asyncio.sleep(0)  # interleave
                    if p != pg.port[route.name]:
                        errors.append((i, route.name, p))
                used[route.name] += 1

        await asyncio.gather(*(task(i) for i in range(30)))
        assert errors == []
        assert set(used) == set(NAMES)  # independent pins spread over the nodes
        assert c.metrics()["scopes"]["thread"]["live"] == 0
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


@pytest.mark.asyncio
async def test_transaction_branches_in_concurrent_tasks_share_one_node(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(c, pg.dsn, min_size=1, max_size=10, timeout=5.0) as pools:
        ports = {}

        async def branch(g):
            with pools.transaction(g):
                async with pools.connection(key="ignored-inside-a-transaction") as conn:
                    ports.setdefault(g, set()).add(await aport_of(conn))

        await asyncio.gather(*(branch(f"atx-{i % 6}") for i in range(30)))
        for g, ps in ports.items():
            assert ps == {pg.port[c.tx_begin(g).name]}
            c.tx_end(g)
        assert c.metrics()["scopes"]["transaction"]["live"] == 0


@pytest.mark.asyncio
async def test_async_heartbeat_downs_a_killed_node(pg, cluster_factory):
    c = cluster_factory("heartbeat.interval = 200ms", nodes=NAMES)
    pools = AsyncNodePools(c, pg.dsn, heartbeat=True, min_size=1, max_size=2, timeout=2.0)
    await pools.open()
    try:
        await wait_until_async(lambda: c.metrics()["nodes"][0]["probe_misses"] == 0, 5)
        pg.kill(3)
        try:
            bound = 0.2 * (c.heartbeat_misses + 5) + 2.0
            await wait_until_async(lambda: c.node_state("RAC3") == ra.NodeState.DOWN, bound)
            assert c.metrics()["nodes"][2]["down_cause"] == "heartbeat"
        finally:
            pg.restart(3)
        await wait_until_async(lambda: c.node_state("RAC3") == ra.NodeState.UP, 10)
    finally:
        await pools.close()
    assert not pools._heartbeat.is_alive()

