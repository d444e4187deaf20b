"""The node pools' behaviours over the 3 local nodes, written once for
AsyncNodePools; test_pools_sync.py (NodePools) is generated from this file by
tools/async_to_sync.py, so both APIs pass the same tests: routing on real
connections, commit/rollback, close() with a failing pool, ejection after a
real SIGKILL, credentials, a busy pool, a planned drain, the partition-map
loader and the heartbeat."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import psycopg_pool
import pytest

import racaffinity as ra
from racaffinity.pools import AsyncNodePools, is_node_failure

from racaffinity._acompat import AEvent, ais_alive, ajoin, await_event, aspawn

from conftest import NAMES, aport_of, fan_line, in_a_forked_child, wait_until_async

APP = "racaffinity-pools-suite"

_ASYNC = True


async def port(pools, **kw) -> int:
    async with pools.connection(**kw) as conn:
        return await aport_of(conn)


def key_on(c: ra.Cluster, name: str) -> int:
    return next(k for k in range(10_000) if c.route_key(k).name == name)


def server_conns(pg, node: str, app: str = APP) -> int:
    with psycopg.connect(pg.dsn[node], autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()[0]


def new_pools(c, dsns, **kwargs) -> AsyncNodePools:
    kwargs.setdefault("min_size", 1)
    kwargs.setdefault("max_size", 4)
    kwargs.setdefault("timeout", 5.0)
    return AsyncNodePools(c, dsns, **kwargs)


@pytest.mark.asyncio
async def test_a_connection_class_of_the_callers_is_entered_by_the_borrow(pg, cluster_factory):
    # The borrow skips psycopg's own __aenter__ (it returns the connection),
    # never a connection_class's override: pinned, balanced and keyed.
    entered = []

    class Entering(psycopg.AsyncConnection):
        async def __aenter__(self):
            entered.append(self)
            return await super().__aenter__()

    c = cluster_factory(nodes=NAMES)
    async with new_pools(c, pg.dsn, connection_class=Entering) as pools:
        async with pools.connection() as conn:
            assert entered == [conn]
        async with pools.connection(key=1) as conn:
            assert entered[-1] is conn
        with c.pin():
            for _ in range(3):  # a miss, then hits
                async with pools.connection() as conn:
                    assert entered[-1] is conn
        assert len(entered) == 5


@pytest.mark.asyncio
async def test_a_connection_class_whose_enter_fails_gives_the_connection_back(pg, cluster_factory):
    # psycopg_pool's connection() gives the connection back when the
    # connection's own context fails to enter: so must a borrow, with its
    # lease (keyed, balanced and pinned borrows).
    class Refusing(psycopg.AsyncConnection):
        refuse = True

        async def __aenter__(self):
            if Refusing.refuse:
                raise RuntimeError("refused on entry")
            return await super().__aenter__()

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    async with new_pools(c, pg.dsn, max_size=1, timeout=1.0, connection_class=Refusing) as pools:
        for _ in range(2):
            for name in NAMES:
                with pytest.raises(RuntimeError):
                    async with pools.connection(key=key_on(c, name)):
                        pass
            with pytest.raises(RuntimeError):
                async with pools.connection():
                    pass
            with c.pin():
                with pytest.raises(RuntimeError):
                    async with pools.connection():
                        pass
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0
        Refusing.refuse = False
        for name in NAMES:  # max_size=1: served only if it came back
            assert await port(pools, key=key_on(c, name)) == pg.port[name]


@pytest.mark.asyncio
async def test_balanced_connections_reach_every_node(pg, cluster_factory):
    async with new_pools(cluster_factory(nodes=NAMES), pg.dsn) as pools:
        seen = Counter()
        for _ in range(60):
            seen[pg.name_of_port(await port(pools))] += 1
        assert set(seen) == set(NAMES)
        m = pools.cluster.metrics()
        assert sum(n["successes"] for n in m["nodes"]) == 60
        assert sum(n["in_flight"] for n in m["nodes"]) == 0


@pytest.mark.asyncio
async def test_connection_commits_or_rolls_back_like_psycopg_pool(pg, cluster_factory):
    async with new_pools(cluster_factory(nodes=NAMES), pg.dsn) as pools:
        with pools.pin():
            async with pools.connection() as conn:
                await conn.execute("CREATE TABLE IF NOT EXISTS py_t (v int)")
                await conn.execute("DELETE FROM py_t")
            with pytest.raises(ZeroDivisionError):
                async with pools.connection() as conn:
                    await conn.execute("INSERT INTO py_t VALUES (1)")
                    1 / 0
            async with pools.connection() as conn:
                await conn.execute("INSERT INTO py_t VALUES (2)")
            async with pools.connection() as conn:
                cur = await conn.execute("SELECT v FROM py_t")
                assert [r[0] for r in await cur.fetchall()] == [2]
                await conn.execute("DROP TABLE py_t")
        # a ZeroDivisionError says nothing about the node
        assert sum(n["failures"] for n in pools.cluster.metrics()["nodes"]) == 0


@pytest.mark.asyncio
async def test_a_borrower_that_left_autocommit_on_never_commits_the_next_borrowers_rolled_back_work(
    pg, cluster_factory
):
    # psycopg_pool gives a connection back as its borrower left it: the next
    # borrow ran in autocommit, and its block's exception rolled nothing back.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    async with new_pools(c, pg.dsn, max_size=1) as pools:
        key = key_on(c, "RAC1")  # max_size=1: the next borrow gets this connection
        async with pools.connection(key=key) as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS py_left (v int)")
            await conn.execute("DELETE FROM py_left")
        async with pools.connection(key=key) as conn:
            await conn.set_autocommit(True)  # e.g. for a VACUUM
        with pytest.raises(ZeroDivisionError):
            async with pools.connection(key=key) as conn:
                await conn.execute("INSERT INTO py_left VALUES (1)")
                1 / 0
        async with pools.connection(key=key) as conn:
            cur = await conn.execute("SELECT count(*) FROM py_left")
            assert (await cur.fetchone())[0] == 0, "a block that raised left its row committed"
            assert not conn.autocommit
            await conn.execute("DROP TABLE py_left")


@pytest.mark.asyncio
async def test_a_connection_goes_back_with_the_settings_the_pool_made_it_with(pg, cluster_factory):
    # What `connect_kwargs` and `configure` set is the pool's: a borrower's
    # change of autocommit, read_only, isolation_level or deferrable ends
    # with its borrow (HikariCP's reset), before a `reset=` of the
    # caller's runs.
    resets = []

    async def configure(conn):
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)

    async def reset(conn):
        resets.append((conn.autocommit, conn.isolation_level, conn.read_only, conn.deferrable))

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    made = (False, psycopg.IsolationLevel.REPEATABLE_READ, None, None)
    async with new_pools(c, pg.dsn, max_size=1, configure=configure, reset=reset) as pools:
        key = key_on(c, "RAC2")
        async with pools.connection(key=key) as conn:
            await conn.set_isolation_level(psycopg.IsolationLevel.SERIALIZABLE)
            await conn.set_read_only(True)
            await conn.set_deferrable(True)
            await conn.set_autocommit(True)
        await wait_until_async(lambda: len(resets) == 1, 5.0)  # psycopg_pool runs `reset` in a worker
        async with pools.connection(key=key) as conn:
            assert (conn.autocommit, conn.isolation_level, conn.read_only, conn.deferrable) == made
            cur = await conn.execute(
                "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only'),"
                " current_setting('transaction_deferrable')"
            )
            assert await cur.fetchone() == ("repeatable read", "off", "off")
        assert resets[0] == made, "the caller's reset saw the borrower's settings"
        # A connection that cannot be put back is discarded, as psycopg_pool
        # discards one its rollback or `reset` fails on.
        async with pools.connection(key=key) as conn:
            await conn.set_read_only(True)
            pid = conn.info.backend_pid
            conn.pgconn.finish()  # closed under psycopg's feet
        async with pools.connection(key=key) as conn:
            assert conn.info.backend_pid != pid and conn.read_only is None
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


@pytest.mark.asyncio
async def test_pin_key_and_session_route_real_connections(pg, cluster_factory):
    async with new_pools(cluster_factory(nodes=NAMES), pg.dsn) as pools:
        c = pools.cluster
        for _ in range(5):
            with pools.pin() as route:
                assert {await port(pools) for _ in range(5)} == {pg.port[route.name]}
        for k in (4711, "customer:42", b"\x00\x01"):
            assert await port(pools, key=k) == pg.port[c.route_key(k).name]
        for s in ("JSESSIONID=1", "JSESSIONID=2", "JSESSIONID=3"):
            first = await port(pools, session=s)
            with pools.session(s):
                for _ in range(3):
                    assert await port(pools) == first
        with pytest.raises(TypeError):
            await pools.connection(key=1, session="s").__aenter__()


@pytest.mark.asyncio
async def test_an_empty_key_or_session_is_refused_not_ignored(pg, cluster_factory):
    # A zero length in the core's request means "none": an empty key was
    # routed as no key at all (load balancing), where route_key refuses it.
    async with new_pools(cluster_factory(nodes=NAMES), pg.dsn) as pools:
        c = pools.cluster
        for kw in ({"key": b""}, {"key": ""}, {"session": b""}, {"session": ""}):
            with pytest.raises(ra.InvalidArgumentError):
                async with pools.connection(**kw):
                    pass
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


@pytest.mark.asyncio
async def test_close_goes_on_after_a_failing_pool(pg, cluster_factory, caplog):
    pools = new_pools(cluster_factory(nodes=NAMES), pg.dsn)
    await pools.open()
    first = pools.node_pool("RAC1")
    real_close = first.close

    async def failing_close(*args, **kwargs):
        await real_close(*args, **kwargs)
        raise RuntimeError("closing RAC1 failed")

    first.close = failing_close
    await pools.close()
    assert pools.node_pool("RAC2").closed and pools.node_pool("RAC3").closed
    assert any("closing a node pool failed" in r.getMessage() for r in caplog.records)
    await pools.close()  # idempotent

if not _ASYNC:  # the async close runs as a task of its own (test_async.py: a cancelled close)

    @pytest.mark.parametrize("at", ["upkeep", "first pool"])
    def test_a_ctrl_c_during_close_still_closes_every_pool(pg, cluster_factory, at):
        # Ctrl-C while close() waits for the upkeep's threads or the first
        # node pool's workers: the close had marked the pools closed and
        # stopped there, the node pools after it kept their connections and
        # workers, and every later close() returned at once.
        app = f"{APP}-ctrl-c-close-{at}"
        pools = new_pools(cluster_factory(nodes=NAMES), pg.dsn, connect_kwargs={"application_name": app})
        pools.open()
        wait_until_async(lambda: all(server_conns(pg, n, app) == 1 for n in NAMES), 10)
        part = pools._upkeep if at == "upkeep" else pools.node_pool("RAC1")
        name = "stop" if at == "upkeep" else "close"
        real = getattr(part, name)

        def interrupted(*args, **kwargs):
            real(*args, **kwargs)
            raise KeyboardInterrupt  # as its wait ends

        setattr(part, name, interrupted)
        with pytest.raises(KeyboardInterrupt):
            pools.close()
        assert [pools.node_pool(n).closed for n in NAMES] == [True, True, True]
        wait_until_async(lambda: all(server_conns(pg, n, app) == 0 for n in NAMES), 10)
        pools.close()  # idempotent


@pytest.mark.asyncio
async def test_operational_errors_eject_a_killed_node(pg, cluster_factory, restart_after):
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=2, health_eject_backoff="60s",
                        health_eject_backoff_max="60s")
    async with new_pools(c, pg.dsn, timeout=1.0) as pools:
        for _ in range(30):  # warm every pool
            await port(pools)
        pg.kill(2)
        restart_after.append(2)
        counted = 0
        t0 = time.monotonic()
        while c.node_state("RAC2") != ra.NodeState.DOWN:
            assert time.monotonic() - t0 < 30, "RAC2 was never ejected"
            try:
                await port(pools)
            except psycopg.OperationalError as e:
                assert is_node_failure(e), e  # 57P01 from the dead postmaster's backend, or refused
                counted += 1
        assert counted >= 1
        assert c.metrics()["nodes"][1]["ejections"] == 1
        seen = Counter()
        for _ in range(60):
            seen[pg.name_of_port(await port(pools))] += 1
        assert seen["RAC2"] == 0
        pg.restart(2)
        restart_after.remove(2)
        c.report_probe("RAC2", True)  # a successful probe lifts an ejection
        assert c.node_state("RAC2") == ra.NodeState.UP


@pytest.mark.asyncio
async def test_credentials_never_show(pg, cluster_factory, restart_after, caplog):
    secret = "s3cret-Pa55"
    dsns = {n: d + f" password={secret}" for n, d in pg.dsn.items()}
    c = cluster_factory(nodes=NAMES)
    async with new_pools(c, dsns, connect_kwargs={"password": secret}, timeout=1.0, max_size=2) as pools:
        assert secret not in repr(pools) and "password" not in repr(pools)
        assert secret not in repr(pools.node_pool("RAC1"))
        async with pools.connection() as conn:
            assert secret not in repr(conn)
        caplog.set_level(logging.DEBUG)
        pg.kill(1)
        restart_after.append(1)
        key = key_on(c, "RAC1")
        errors = []
        for _ in range(3):
            try:
                await port(pools, key=key)
            except psycopg.OperationalError as e:
                errors.append(e)
        assert errors
        for e in errors:
            assert secret not in str(e) and secret not in repr(e)
        assert all(secret not in r.getMessage() for r in caplog.records)


@pytest.mark.asyncio
async def test_pool_timeout_on_a_busy_pool_is_not_a_node_failure(pg, cluster_factory):
    async with new_pools(cluster_factory(nodes=NAMES), pg.dsn, min_size=1, max_size=1, timeout=0.3) as pools:
        c = pools.cluster
        key = key_on(c, "RAC1")
        async with pools.connection(key=key):
            await wait_until_async(lambda: pools.node_pool("RAC1").get_stats().get("pool_size", 0) >= 1, 5)
            with pytest.raises(psycopg_pool.PoolTimeout):
                async with pools.connection(key=key):
                    pass
        assert c.metrics()["nodes"][0]["failures"] == 0


@pytest.mark.asyncio
async def test_a_planned_drain_closes_idle_connections_now_and_busy_ones_on_return(pg, cluster_factory):
    c = cluster_factory("policy = random\nthread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=2, connect_kwargs={"application_name": APP}, upkeep_interval=0.05)
    async with pools:
        await wait_until_async(lambda: all(server_conns(pg, n) >= 2 for n in NAMES), 10)
        node = "RAC2"
        holder = pools.connection(key=key_on(c, node))
        busy = await holder.__aenter__()  # in flight across the drain
        assert await aport_of(busy) == pg.port[node]
        await pools.apply_event(fan_line(node, "down", "USER", drain_timeout=30))
        assert c.node_state(node) is ra.NodeState.DRAINING
        await wait_until_async(lambda: server_conns(pg, node) == 1, 3)  # idle ones closed at once
        fresh = contextvars.Context().run(lambda: [c.route().name for _ in range(20)])
        assert node not in fresh  # no new work on a draining node
        await holder.__aexit__(None, None, None)  # retired as it is returned
        await wait_until_async(lambda: server_conns(pg, node) == 0, 3)
        await pools.apply_event(fan_line(node, "up"))
        await wait_until_async(lambda: server_conns(pg, node) >= 2, 10)  # back to min_size


@pytest.mark.asyncio
async def test_the_loader_runs_at_open_and_after_an_ha_event_and_a_failing_one_keeps_the_map(pg, cluster_factory):
    c = cluster_factory("data.partitions = 4", nodes=NAMES)
    maps = [{0: "RAC1", 1: "RAC1", 2: "RAC1", 3: "RAC1"}, {0: "RAC3", 1: "RAC3", 2: "RAC3", 3: "RAC3"}]
    calls = []

    def loader():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("map table unreachable")
        return maps[min(len(calls), 2) - 1]

    async with new_pools(c, pg.dsn, partition_map_loader=loader, upkeep_interval=0.05) as pools:
        assert pools.partition_map_loads == (1, 0, None)
        assert {await port(pools, key=k) for k in range(20)} == {pg.port["RAC1"]}
        await pools.apply_event(fan_line("RAC2", "down"))  # an HA event: reload
        assert pools.partition_map_loads[:2] == (2, 0)
        assert {await port(pools, key=k) for k in range(20)} == {pg.port["RAC3"]}
        assert await pools.reload_partition_map() is False
        assert "map table unreachable" in pools.partition_map_loads[2]
        assert {await port(pools, key=k) for k in range(20)} == {pg.port["RAC3"]}  # the last good map
        assert '"source":"loader"' in c.metrics_json()
        pm = c.metrics()["partition_map"]  # the core's metrics (JSON, Prometheus) count it too
        assert pm["load_failures"] == 1 and "map table unreachable" in pm["last_error"], pm


@pytest.mark.asyncio
async def test_an_open_interrupted_in_its_first_map_load_closes_the_pools(pg, cluster_factory):
    # The first map load runs in open(), once the node pools are open and
    # connecting: an interrupt there (Ctrl-C; in asyncio a cancel, as a
    # timeout around `async with` makes) must not leave them open, with no
    # exit to close them and a second open() that would return at once
    # without the upkeep.
    app = "racaffinity-interrupted-open"
    c = cluster_factory("data.partitions = 4", nodes=NAMES)

    def connected() -> int:
        return sum(server_conns(pg, node, app) for node in NAMES)

    async def interrupted():
        await wait_until_async(lambda: connected() == 3, 5)  # min_size=1 on each node
        raise KeyboardInterrupt

    made = []
    with pytest.raises(KeyboardInterrupt):
        made.append(new_pools(c, pg.dsn, partition_map_loader=interrupted, connect_kwargs={"application_name": app}))
        async with made[0]:
            pass
    await wait_until_async(lambda: connected() == 0, 5)
    if _ASYNC:
        assert made[0].closed
        with pytest.raises(psycopg_pool.PoolClosed):
            await made[0].open()

        async def stuck():
            await wait_until_async(lambda: connected() == 3, 5)
            await asyncio.sleep(60)

        pools = new_pools(c, pg.dsn, partition_map_loader=stuck, connect_kwargs={"application_name": app})
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.0):
                async with pools:
                    pass
        assert pools.closed
        await wait_until_async(lambda: connected() == 0, 5)


@pytest.mark.asyncio
async def test_heartbeat_downs_a_killed_idle_node_and_stops_on_close(pg, cluster_factory, restart_after):
    c = cluster_factory("heartbeat.interval = 200ms\nheartbeat.misses = 3", nodes=NAMES)
    pools = new_pools(c, pg.dsn, heartbeat=True)
    async with pools:
        assert pools.heartbeat_interval == 0.2
        await wait_until_async(lambda: all(n["probe_misses"] == 0 for n in c.metrics()["nodes"]), 5)
        pg.kill(3)
        restart_after.append(3)
        bound = pools.heartbeat_interval * (c.heartbeat_misses + 5) + 2.0
        await wait_until_async(lambda: c.node_state("RAC3") == ra.NodeState.DOWN, bound)  # no traffic
        assert c.metrics()["nodes"][2]["down_cause"] == "heartbeat"
        assert c.node_state("RAC1") == c.node_state("RAC2") == ra.NodeState.UP
        pg.restart(3)
        restart_after.remove(3)
        await wait_until_async(lambda: c.node_state("RAC3") == ra.NodeState.UP, bound + 5)
    assert not pools._heartbeat.is_alive()


@pytest.mark.asyncio
async def test_heartbeat_counts_a_node_refusing_connections_while_shutting_down_as_a_miss(pg, cluster_factory, restart_after):
    # The refusal is a server's FATAL, as a missing role's is, but the node
    # takes no new sessions: a probe that cannot connect to it is a miss.
    c = cluster_factory("heartbeat.misses = 2", nodes=NAMES)
    async with new_pools(c, pg.dsn, min_size=0) as pools:
        with psycopg.connect(pg.dsn["RAC3"], autocommit=True):  # keeps the smart shutdown waiting
            pg.smart_stop(3)
            restart_after.append(3)
            with pytest.raises(psycopg.OperationalError, match="shutting down"):
                psycopg.connect(pg.dsn["RAC3"], connect_timeout=5)
            await pools.check_heartbeat()
            m = c.metrics()["nodes"]
            assert [n["probe_misses"] for n in m] == [0, 0, 1], m
            await pools.check_heartbeat()
            assert c.node_state("RAC3") == ra.NodeState.DOWN
            assert c.metrics()["nodes"][2]["down_cause"] == "heartbeat"
            assert c.node_state("RAC1") == c.node_state("RAC2") == ra.NodeState.UP


# -- fast connection failover (docs/python-pools.md) ------------------------------


async def _queue_on(pools, key, n):
    """`n` tasks waiting for a connection by `key`; each records (port,
    monotonic time served) or its error."""
    served, errors = {}, {}

    async def one(i):
        try:
            async with pools.connection(key=key) as conn:
                served[i] = (await aport_of(conn), time.monotonic())
        except Exception as e:
            errors[i] = (repr(e), time.monotonic())

    tasks = [aspawn(one, (i,), f"waiter-{i}") for i in range(n)]
    await wait_until_async(lambda: pools.node_pool("RAC1").get_stats().get("requests_waiting", 0) == n, 5)
    return tasks, served, errors


@pytest.mark.asyncio
async def test_waiters_on_a_killed_node_are_served_elsewhere_at_once(pg, cluster_factory, restart_after):
    # Waiters queued on a node that is kill -9ed must not wait out the pool
    # timeout, nor the retired pool's close (psycopg_pool fails its waiters
    # only once its workers stopped): once the heartbeat takes the node
    # Down, its pool fails them over to another node at once. The timeout
    # is far beyond the joins and the close is held at a gate until they
    # are served, so neither can be what served them (no clock read).
    c = cluster_factory("heartbeat.interval = 100ms\nheartbeat.misses = 2\nthread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, heartbeat=True, min_size=1, max_size=1, timeout=120.0, upkeep_interval=0.05)
    async with pools:
        key = key_on(c, "RAC1")
        holder = pools.connection(key=key)
        held = await holder.__aenter__()  # RAC1's only connection
        assert await aport_of(held) == pg.port["RAC1"]
        old = pools.node_pool("RAC1")
        gate = AEvent()
        real_close = old.close

        async def gated_close(timeout: float = 5.0) -> None:
            await await_event(gate, 60)
            await real_close(timeout)

        old.close = gated_close
        tasks, served, errors = await _queue_on(pools, key, 4)
        pg.kill(1)
        restart_after.append(1)
        try:
            await wait_until_async(lambda: not any(ais_alive(t) for t in tasks), 20)
            assert not old.closed  # still held at the gate
            assert not errors and sorted(served) == [0, 1, 2, 3], (errors, served)
        finally:
            gate.set()
        assert all(p != pg.port["RAC1"] for p, _at in served.values()), served
        try:
            await held.execute("SELECT 1")
        except psycopg.OperationalError as e:
            await holder.__aexit__(type(e), e, e.__traceback__)
        else:
            pytest.fail("a connection to a killed node still answered")


@pytest.mark.asyncio
async def test_an_operator_down_closes_idle_aborts_borrowed_and_up_refills_at_once(pg, cluster_factory):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=2, connect_kwargs={"application_name": APP}, upkeep_interval=0.05)
    async with pools:
        await wait_until_async(lambda: all(server_conns(pg, n) >= 2 for n in NAMES), 10)
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        assert await aport_of(held) == pg.port["RAC1"]
        c.set_node_state("RAC1", "down")
        # idle ones closed and the borrowed one aborted: no session left
        await wait_until_async(lambda: server_conns(pg, "RAC1") == 0, 1.0)
        with pytest.raises(psycopg.OperationalError) as info:
            await held.execute("SELECT 1")  # the node is alive: only an abort ends it
        assert is_node_failure(info.value)
        await holder.__aexit__(type(info.value), info.value, None)
        c.set_node_state("RAC1", "up")
        # Refilled by the pools themselves: nothing borrows from RAC1 here,
        # and psycopg_pool alone never grows a pool without a borrow.
        await wait_until_async(lambda: server_conns(pg, "RAC1") >= 2, 10)


@pytest.mark.asyncio
async def test_a_planned_drain_does_not_abort_borrowed_connections(pg, cluster_factory):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=0.05)
    async with pools:
        async with pools.connection(key=key_on(c, "RAC1")) as held:
            c.set_node_state("RAC1", "draining")
            await wait_until_async(lambda: pools.node_pool("RAC1")._racaffinity_draining, 2)
            c.set_node_state("RAC1", "down")  # the drain's end
            await asyncio.sleep(0.3)  # several upkeep rounds
            assert await aport_of(held) == pg.port["RAC1"]  # finishes its request


@pytest.mark.asyncio
async def test_a_failure_during_a_drain_aborts_borrowed_connections(pg, cluster_factory):
    # A FAN failure reaching the cluster by any path (the topology feed, a
    # relay, Cluster.apply_event), not through the pools' own apply_event,
    # while the node drains: a hard Down, so the connection in use is
    # aborted as at any crash. Before, every Down after a drain counted as
    # the drain's end and the connection went on.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=0.05)
    async with pools:
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        assert await aport_of(held) == pg.port["RAC1"]
        c.apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC1 status=down reason=USER")
        await wait_until_async(lambda: pools.node_pool("RAC1")._racaffinity_draining, 2)
        c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=RAC1 host=h1 status=down reason=FAILURE")
        await asyncio.sleep(0.3)  # several upkeep rounds
        with pytest.raises(psycopg.OperationalError) as info:
            await held.execute("SELECT 1")  # the node is alive: only an abort ends it
        await holder.__aexit__(type(info.value), info.value, None)


@pytest.mark.asyncio
async def test_a_failure_after_a_drain_ended_aborts_the_connections_still_finishing(pg, cluster_factory):
    # The drain's end let the connection in use finish; the node then fails
    # (a FAN failure: the instance was shut down abort, or crashed) and the
    # connection, which would hang on a blackholed node, is aborted as at
    # any hard Down. Before, a Down that stayed Down was never looked at again.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=0.05)
    async with pools:
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        assert await aport_of(held) == pg.port["RAC1"]
        c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=1))
        await wait_until_async(lambda: c.node_state("RAC1") is ra.NodeState.DOWN, 5)
        await asyncio.sleep(0.3)  # several upkeep rounds past the drain's end
        await held.execute("SELECT 1")  # finishing its request
        c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=RAC1 host=h1 status=down reason=FAILURE")
        await asyncio.sleep(0.3)
        with pytest.raises(psycopg.OperationalError):
            await held.execute("SELECT 1")  # the node is alive: only an abort ends it
        await holder.__aexit__(None, None, None)


@pytest.mark.asyncio
async def test_a_drain_that_ended_between_two_upkeep_rounds_lets_borrowed_connections_finish(pg, cluster_factory):
    # The upkeep never saw the node Draining (the drain's deadline passed
    # between two rounds): the core says the Down ended a planned drain, so
    # the connection in use goes on. Before, the pools read Up -> Down as a
    # failure and aborted it.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=600)
    async with pools:
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        assert await aport_of(held) == pg.port["RAC1"]
        c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=1))
        await wait_until_async(lambda: c.node_state("RAC1") is ra.NodeState.DOWN, 5)
        await pools._upkeep.round()  # the first round since the drain began
        await held.execute("SELECT 1")  # not aborted
        await holder.__aexit__(None, None, None)
        assert await port(pools) != pg.port["RAC1"], "new work goes elsewhere"


@pytest.mark.asyncio
async def test_a_drain_undone_closes_its_retired_pool_once_its_connection_returns(pg, cluster_factory):
    # RAC1 drains while a connection is borrowed from its pool, then is Up
    # again before the drain ends. The drain's retired pool must not
    # outlive that connection: returned, it closes (not pooled again), and
    # the node keeps the successor's connections only.
    app = f"{APP}-{AsyncNodePools.__name__}-undrain"  # its own: the sync twin's count is apart
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, connect_kwargs={"application_name": app}, upkeep_interval=0.05)
    async with pools:
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        retired = pools.node_pool("RAC1")
        c.set_node_state("RAC1", "draining")
        await wait_until_async(lambda: pools.node_pool("RAC1")._racaffinity_draining, 2)
        c.set_node_state("RAC1", "up")
        await wait_until_async(lambda: not pools.node_pool("RAC1")._racaffinity_draining, 2)
        assert pools.node_pool("RAC1") is not retired
        assert await aport_of(held) == pg.port["RAC1"]  # the drain let it finish
        await holder.__aexit__(None, None, None)
        assert held.closed and retired.closed
        await wait_until_async(lambda: server_conns(pg, "RAC1", app) == 1, 5)  # the successor's min_size


@pytest.mark.asyncio
async def test_a_hard_down_after_a_drain_was_undone_aborts_the_drained_pools_borrowed_connection(pg, cluster_factory):
    # A connection borrowed before a drain that was undone (Up again) is
    # still on the node: a hard Down of the node later must abort it as it
    # aborts the current pool's. The Up forgot the drain's retired pools,
    # and their connections in use then hung on the failed node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=0.05)
    async with pools:
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        c.set_node_state("RAC1", "draining")
        await wait_until_async(lambda: pools.node_pool("RAC1")._racaffinity_draining, 2)
        c.set_node_state("RAC1", "up")
        await wait_until_async(lambda: not pools.node_pool("RAC1")._racaffinity_draining, 2)
        c.set_node_state("RAC1", "down")  # from Up: a hard Down
        await asyncio.sleep(0.3)  # several upkeep rounds
        with pytest.raises(psycopg.OperationalError) as info:
            await held.execute("SELECT 1")  # the node is alive: only an abort ends it
        await holder.__aexit__(type(info.value), info.value, None)


@pytest.mark.asyncio
async def test_a_hard_down_after_a_drains_end_and_an_up_aborts_a_connection_borrowed_before_the_drain(
    pg, cluster_factory
):
    # The drain's end (Down) lets a connection in use finish; the node is
    # Up again and later fails while that connection is still in use: it
    # is on the node, so the hard Down aborts it. The drain's end forgot
    # the retired pools, and the connection hung on the failed node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=0.05)
    async with pools:
        holder = pools.connection(key=key_on(c, "RAC1"))
        held = await holder.__aenter__()
        c.set_node_state("RAC1", "draining")
        await wait_until_async(lambda: pools.node_pool("RAC1")._racaffinity_draining, 2)
        retired = pools.node_pool("RAC1")
        c.set_node_state("RAC1", "down")  # the drain's end
        await wait_until_async(lambda: pools.node_pool("RAC1") is not retired, 2)
        assert await aport_of(held) == pg.port["RAC1"]  # it finishes its request
        c.set_node_state("RAC1", "up")
        await wait_until_async(lambda: not pools.node_pool("RAC1")._racaffinity_draining, 2)
        c.set_node_state("RAC1", "down")  # from Up: a hard Down
        await asyncio.sleep(0.3)  # several upkeep rounds
        with pytest.raises(psycopg.OperationalError) as info:
            await held.execute("SELECT 1")  # the node is alive: only an abort ends it
        await holder.__aexit__(type(info.value), info.value, None)


@pytest.mark.asyncio
async def test_a_slow_loader_holds_neither_a_downs_abort_nor_the_loop(pg, cluster_factory):
    # A state change makes the upkeep load the partition map, and the
    # loader takes its time (a map table behind a slow link). It ran under
    # the upkeep's lock, in the upkeep's round, so a Down meanwhile was not
    # acted on (its borrowed connection not aborted) until the loader
    # returned; in AsyncNodePools it also ran on the event loop, which
    # nothing else could use meanwhile.
    c = cluster_factory("data.partitions = 4", nodes=NAMES)
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()
    calls = []

    def loader():
        calls.append(1)
        if len(calls) > 1:
            entered.set()
            release.wait(3)
            returned.set()
        return {0: "RAC1", 1: "RAC1", 2: "RAC1", 3: "RAC1"}

    pools = new_pools(c, pg.dsn, partition_map_loader=loader, upkeep_interval=0.05)
    async with pools:
        try:
            holder = pools.connection(key=1)
            held = await holder.__aenter__()
            assert await aport_of(held) == pg.port["RAC1"]
            c.apply_event(fan_line("RAC3", "down"))  # a state change: the map loads
            await wait_until_async(entered.is_set, 5)
            assert not returned.is_set(), "the loader held the event loop"
            old = pools.node_pool("RAC1")
            c.apply_event(fan_line("RAC1", "down"))
            # Its retirement's refusal comes after the abort.
            await wait_until_async(lambda: "_getconn_unchecked" in old.__dict__, 2)
            assert not returned.is_set(), "the Down waited for the loader"
            with pytest.raises(psycopg.OperationalError) as info:
                await held.execute("SELECT 1")  # the node is alive: only an abort ends it
            await holder.__aexit__(type(info.value), info.value, None)
        finally:
            release.set()


@pytest.mark.asyncio
async def test_a_borrow_whose_pool_retires_under_it_routes_again(pg, cluster_factory):
    # RAC1's pool is retired by a hard Down after psycopg_pool handed a
    # connection to a borrow and before the borrow marked it borrowed
    # (what the Down aborts): the connection was handed out from the
    # retired pool, on the Down node, and not aborted. The Down runs right
    # after psycopg_pool's checkout.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = new_pools(c, pg.dsn, min_size=1, upkeep_interval=600)
    async with pools:
        key = key_on(c, "RAC1")
        assert await port(pools, key=key) == pg.port["RAC1"]
        pool = pools.node_pool("RAC1")
        unchecked = pool._getconn_unchecked
        ran = []

        async def then_down(timeout):
            conn = await unchecked(timeout)
            del pool._getconn_unchecked  # once
            ran.append(conn)
            await pools.apply_event(fan_line("RAC1", "down"))
            return conn

        pool._getconn_unchecked = then_down
        async with pools.connection(key=key) as conn:
            assert ran, "the checkout did not reach RAC1's pool"
            assert await aport_of(conn) != pg.port["RAC1"], "handed out from RAC1's retired pool"
        assert pools.node_pool("RAC1") is not pool


@pytest.mark.asyncio
async def test_a_connection_whose_node_failed_since_its_last_use_is_checked(pg, cluster_factory, proxies):
    # Both of RAC1's connections were used just now (inside the alive-check
    # bypass window) when the node drops every connection. The first
    # checkout finds out the hard way; the next one must be checked, not
    # handed out dead because it is young.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    dsns = dict(pg.dsn, RAC1=proxies["RAC1"].dsn(pg.dsn["RAC1"]))
    async with new_pools(c, dsns, min_size=2, max_size=2) as pools:
        key = key_on(c, "RAC1")
        await wait_until_async(lambda: pools.node_pool("RAC1").get_stats().get("pool_available", 0) == 2, 5)
        first, second = pools.connection(key=key), pools.connection(key=key)
        for conn in (await first.__aenter__(), await second.__aenter__()):
            await aport_of(conn)
        await first.__aexit__(None, None, None)
        await second.__aexit__(None, None, None)
        proxies["RAC1"].refuse()  # every connection closed
        proxies["RAC1"].heal()  # and the node answers again
        with pytest.raises(psycopg.OperationalError):
            await port(pools, key=key)  # young: handed out unchecked, fails
        assert await port(pools, key=key) == pg.port["RAC1"]
        assert c.node_state("RAC1") is ra.NodeState.UP


@pytest.mark.asyncio
async def test_a_hard_down_after_a_renewal_aborts_the_renewed_pools_borrowed_connection(pg, cluster_factory, proxies):
    # RAC1 refuses new sessions while one of its connections is borrowed:
    # its pool backs off, and a replay sent there renews it (a fresh pool
    # connects at once; the old one retires). The node then fails (the
    # operator's Down): the connection still borrowed from the old pool is
    # on it and must be aborted, as at any hard Down.
    c = cluster_factory("thread.auto_pin = false\nhealth.eject_after_failures = 0", nodes=NAMES)
    px = proxies["RAC1"]
    dsns = dict(pg.dsn, RAC1=px.dsn(pg.dsn["RAC1"]))
    async with new_pools(c, dsns, min_size=1, max_size=2, upkeep_interval=0.05) as pools:
        key, node = key_on(c, "RAC1"), c.node_id("RAC1")
        await wait_until_async(lambda: pools.node_pool("RAC1").get_stats().get("pool_available", 0) == 1, 5)
        holder = pools.connection(key=key)
        held = await holder.__aenter__()
        assert await aport_of(held) == pg.port["RAC1"]
        px.refuse_new()
        with pytest.raises(psycopg_pool.PoolTimeout):
            await port(pools, key=key, timeout=0.5)  # the pool grows: its connect is refused
        old = pools.node_pool("RAC1")
        assert old._racaffinity_connects.backing_off
        await pools._renew_if_backing_off(node)  # what a replay sent to RAC1 does first
        assert pools.node_pool("RAC1") is not old
        c.set_node_state("RAC1", "down")
        await asyncio.sleep(0.3)  # several upkeep rounds
        with pytest.raises(psycopg.OperationalError) as info:
            await held.execute("SELECT 1")  # its session is alive: only an abort ends it
        await holder.__aexit__(type(info.value), info.value, None)


@pytest.mark.asyncio
async def test_a_down_and_up_between_two_upkeep_rounds_checks_the_nodes_young_connections(pg, cluster_factory, proxies):
    # RAC1 drops every connection (a restart) and the cluster hears of it
    # Down, then Up again, both before the upkeep's next round (the operator,
    # a FAN relay, the topology feed: nothing that wakes the pools). The
    # round sees Up as before; the pool's connections, used just now (inside
    # the alive-check bypass window), must be checked all the same: their
    # node failed since their last use.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    dsns = dict(pg.dsn, RAC1=proxies["RAC1"].dsn(pg.dsn["RAC1"]))
    async with new_pools(c, dsns, min_size=2, max_size=2, upkeep_interval=0.05) as pools:
        key = key_on(c, "RAC1")
        await wait_until_async(lambda: pools.node_pool("RAC1").get_stats().get("pool_available", 0) == 2, 5)
        await asyncio.sleep(0.15)  # upkeep rounds
        first, second = pools.connection(key=key), pools.connection(key=key)
        for conn in (await first.__aenter__(), await second.__aenter__()):
            await aport_of(conn)
        await first.__aexit__(None, None, None)
        await second.__aexit__(None, None, None)
        proxies["RAC1"].refuse()  # every connection closed
        c.set_node_state("RAC1", "down")
        c.set_node_state("RAC1", "up")
        proxies["RAC1"].heal()  # and the node answers again
        await asyncio.sleep(0.15)  # upkeep rounds, inside the bypass window
        assert await port(pools, key=key) == pg.port["RAC1"]
        assert await port(pools, key=key) == pg.port["RAC1"]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_down_does_not_hold_its_caller_while_a_silent_nodes_pool_closes(pg, cluster_factory, proxies):
    # RAC1 stops answering while its pool grows: the pool's workers are in
    # connects the node never answers (connect timeout 10 s). Closing that
    # pool waits up to 1 s for each of them; the caller of apply_event must
    # not (the chaos soak saw it held 1.35 s, docs/soak.md), and the pool's
    # connections must close all the same. The close is held at a gate that
    # opens only once apply_event returned: a caller that waited for the
    # close would find it still shut when the close gave up waiting (no
    # clock read in the test).
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    px = proxies["RAC1"]
    dsns = dict(pg.dsn, RAC1=px.dsn(pg.dsn["RAC1"]))
    pools = new_pools(c, dsns, min_size=2, max_size=4, connect_kwargs={"connect_timeout": 10})
    async with pools:
        old = pools.node_pool("RAC1")
        await wait_until_async(lambda: old.get_stats().get("pool_available", 0) == 2, 5)
        idle = list(old._pool)  # psycopg_pool's idle connections
        px.blackhole()
        await old.resize(4)  # two more connects, into the blackhole
        await wait_until_async(lambda: px.connections == 4, 5)
        gate = AEvent()
        gate_open: list = []  # whether the gate was open when the close went on
        real_close = old.close

        async def gated_close(timeout: float = 5.0) -> None:
            gate_open.append(await await_event(gate, 10))
            await real_close(timeout)

        old.close = gated_close
        await pools.apply_event(fan_line("RAC1", "down"))
        gate.set()
        assert c.node_state("RAC1") is ra.NodeState.DOWN and pools.node_pool("RAC1") is not old
        await wait_until_async(lambda: old.closed and all(conn.closed for conn in idle), 15)
        assert gate_open == [True], "apply_event waited for the retired pool's close"
    assert all(conn.closed for conn in idle)
    px.heal()


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_retired_pools_close_that_raises_is_logged_with_its_node_and_leaks_nothing(
    pg, cluster_factory, caplog
):
    # A retired pool closes in the background, where nobody sees its error
    # but the log. psycopg_pool's close() stops at the first idle
    # connection whose close raises: the ones after it would stay open on
    # the server. The log must name the node, the rest must close all the
    # same, and later retirements and close() must still run.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-{AsyncNodePools.__name__}-retire"  # its own: the sync twin's count is apart
    pools = new_pools(c, pg.dsn, min_size=2, max_size=4, connect_kwargs={"application_name": app})
    async with pools:
        first, second = pools.node_pool("RAC1"), pools.node_pool("RAC2")
        for pool in (first, second):
            await wait_until_async(lambda: pool.get_stats().get("pool_available", 0) == 2, 5)
        assert server_conns(pg, "RAC1", app) == 2
        failing = first._pool[0]  # psycopg_pool's idle connections, closed in this order
        real_close = failing.close

        async def close_then_raise() -> None:
            await real_close()
            raise RuntimeError("a connection failed to close")

        failing.close = close_then_raise
        with caplog.at_level(logging.ERROR, logger="racaffinity.pools"):
            await pools.apply_event(fan_line("RAC1", "down"))
            await wait_until_async(lambda: any(r.levelno >= logging.ERROR for r in caplog.records), 10)
            await pools.apply_event(fan_line("RAC2", "down"))
            await wait_until_async(lambda: second.closed, 10)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "RAC1" in errors[0].getMessage(), [r.getMessage() for r in errors]
        await wait_until_async(lambda: server_conns(pg, "RAC1", app) == 0, 10)
        await wait_until_async(lambda: server_conns(pg, "RAC2", app) == 0, 10)
    assert not any(ais_alive(h) for h in pools._retiring)  # close() waited for every retirement


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_borrow_checking_a_connection_of_a_node_gone_down_routes_again_within_its_wait(
    pg, cluster_factory, proxies
):
    # The borrow's checkout check runs on RAC1's idle connection when RAC1
    # stops answering; RAC1 then goes Down. The check's bound is the whole
    # pool timeout, and a hard Down aborted only borrowed connections: the
    # borrow waited out its timeout (PoolTimeout) though other nodes had
    # idle connections.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    dsns = dict(pg.dsn, RAC1=proxies["RAC1"].dsn(pg.dsn["RAC1"]))
    async with new_pools(c, dsns, min_size=1, max_size=1, timeout=8.0, upkeep_interval=0.05) as pools:
        key = key_on(c, "RAC1")
        assert await port(pools, key=key) == pg.port["RAC1"]
        await asyncio.sleep(0.7)  # past the alive-check bypass: the next checkout checks
        proxies["RAC1"].blackhole()
        got: dict = {}

        async def borrow() -> None:
            try:
                got["port"] = await port(pools, key=key)
            except Exception as e:  # noqa: BLE001
                got["error"] = e
            got["at"] = time.monotonic()

        task = aspawn(borrow, (), "borrow")
        await asyncio.sleep(0.5)  # the check is waiting on the silent node
        c.set_node_state("RAC1", "down")
        down_at = time.monotonic()
        await ajoin(task, 20)
        assert "error" not in got, f"the borrow failed {got['at'] - down_at:.2f} s after the Down: {got['error']!r}"
        assert got["port"] != pg.port["RAC1"]
        assert got["at"] - down_at < 4.0
    proxies["RAC1"].heal()


@pytest.mark.asyncio
async def test_a_connection_context_entered_twice_is_refused_and_leaks_nothing(pg, cluster_factory):
    # A second entry borrowed a second connection into the same context: the
    # first was never returned (its pool stayed one short) and the lease was
    # ended twice.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    async with new_pools(c, pg.dsn, min_size=1, max_size=1, timeout=1.0) as pools:
        key = key_on(c, "RAC1")
        for cm in (pools.connection(), pools.connection(key=key)):
            conn = await cm.__aenter__()
            with pytest.raises(RuntimeError, match="already entered"):
                await cm.__aenter__()
            await aport_of(conn)
            await cm.__aexit__(None, None, None)
            with pytest.raises(RuntimeError, match="already entered"):
                await cm.__aenter__()  # nor once it is done
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
        for name in NAMES:  # every connection back (min_size=max_size=1: one each)
            pool = pools.node_pool(name)
            await wait_until_async(lambda: pool.get_stats().get("pool_available", 0) == 1, 5)
        assert await port(pools, key=key) == pg.port["RAC1"]


@pytest.mark.asyncio
async def test_a_connection_context_left_twice_gives_its_connection_back_once(pg, cluster_factory):
    # A second exit gave the connection to its pool a second time (two
    # borrowers then shared one session) and ended the lease again.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    async with new_pools(c, pg.dsn, min_size=1, max_size=1, timeout=1.0) as pools:
        key = key_on(c, "RAC1")
        for cm in (pools.connection(), pools.connection(key=key)):
            await aport_of(await cm.__aenter__())
            await cm.__aexit__(None, None, None)
            await cm.__aexit__(None, None, None)  # as psycopg_pool's connection(): nothing more
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
        async with pools.connection(key=key) as held:  # RAC1's only connection
            with pytest.raises(psycopg_pool.PoolTimeout):
                async with pools.connection(key=key, timeout=0.5) as other:
                    assert other is not held, "two borrowers were handed one connection"
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
        assert await port(pools, key=key) == pg.port["RAC1"]


@pytest.mark.parametrize("probe_timeout", [0, -1.0, float("nan")])
def test_a_probe_timeout_not_above_zero_is_refused(pg, cluster_factory, probe_timeout):
    # 0 or less failed every probe at once: healthy nodes went Down.
    with pytest.raises(ValueError, match="probe_timeout"):
        AsyncNodePools(cluster_factory(nodes=NAMES), pg.dsn, probe_timeout=probe_timeout)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_drains_end_routes_its_waiters_again_and_keeps_no_idle_connection(pg, cluster_factory):
    # RAC1 drains while a pinned borrow holds its draining pool's only
    # connection and another waits on that pool. At the drain's end (Down)
    # the pool, with no idle connection, was never retired: the waiter was
    # served on the Down node once the connection came back, which then
    # stayed idle in a Down node's pool.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-{AsyncNodePools.__name__}-drain-end"  # its own: the sync twin's count is apart
    pools = new_pools(
        c, pg.dsn, min_size=1, max_size=1, timeout=8.0, upkeep_interval=0.05, connect_kwargs={"application_name": app}
    )
    async with pools:
        await wait_until_async(lambda: all(server_conns(pg, n, app) >= 1 for n in NAMES), 10)
        while True:
            scope = pools.pin()
            if scope.__enter__().name == "RAC1":
                break
            scope.__exit__(None, None, None)
        try:
            c.set_node_state("RAC1", "draining")
            await wait_until_async(lambda: pools.node_pool("RAC1")._racaffinity_draining, 2)
            got: dict = {}

            async def waiter() -> None:  # under the same pin
                got["port"] = await port(pools)

            async with pools.connection() as held:
                assert await aport_of(held) == pg.port["RAC1"]
                task = aspawn(contextvars.copy_context().run, (waiter,), "waiter")  # a thread's too
                await wait_until_async(lambda: pools.node_pool("RAC1").get_stats().get("requests_waiting", 0) == 1, 2)
                c.set_node_state("RAC1", "down")  # the drain's end
                await wait_until_async(lambda: "port" in got, 3)  # routed again, not held by this borrow
                assert got["port"] != pg.port["RAC1"]
            await ajoin(task, 5)
            await asyncio.sleep(0.3)  # several upkeep rounds
            assert server_conns(pg, "RAC1", app) == 0
        finally:
            scope.__exit__(None, None, None)


@pytest.mark.asyncio
async def test_only_the_borrowed_connections_own_failure_blames_its_node(pg, cluster_factory, proxies):
    # A node-failure-shaped error leaving a borrow's block failed the
    # borrow's node whoever raised it: a nested borrow's lost connection,
    # or a connect to some other service refused, ejected a healthy node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES, health_eject_after_failures=2)
    dsns = dict(pg.dsn, RAC1=proxies["RAC1"].dsn(pg.dsn["RAC1"]))
    async with new_pools(c, dsns, min_size=1, max_size=2, timeout=3.0) as pools:
        k1, k2, k3 = (key_on(c, n) for n in NAMES)
        for _ in range(2):
            with pytest.raises(psycopg.OperationalError):
                async with pools.connection(key=k2) as outer:
                    await outer.execute("SELECT 1")
                    async with pools.connection(key=k1) as inner:
                        await inner.execute("SELECT 1")
                        proxies["RAC1"].reset()  # RAC1's connections reset
                        await asyncio.sleep(0.2)
                        await inner.execute("SELECT 1")
            proxies["RAC1"].heal()
            with pytest.raises(psycopg.OperationalError):
                async with pools.connection(key=k3) as conn:
                    await conn.execute("SELECT 1")
                    await psycopg.AsyncConnection.connect("host=127.0.0.1 port=1 connect_timeout=2")
        failures = {n["name"]: n["failures"] for n in c.metrics()["nodes"]}
        assert failures == {"RAC1": 2, "RAC2": 0, "RAC3": 0}
        assert c.node_state("RAC2") is ra.NodeState.UP and c.node_state("RAC3") is ra.NodeState.UP


@pytest.mark.asyncio
async def test_a_node_down_when_the_pools_open_keeps_no_connection_and_refills_when_up(pg, cluster_factory):
    # Every pool opened with min_size whatever its node's state: a Down
    # node's pool kept min_size idle connections to it, and when it came Up
    # it refilled only at psycopg_pool's reconnect back-off.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    app = f"{APP}-{AsyncNodePools.__name__}-down-at-open"  # its own: the sync twin's count is apart
    c.set_node_state("RAC1", "down")
    pools = new_pools(c, pg.dsn, min_size=2, max_size=2, upkeep_interval=0.05, connect_kwargs={"application_name": app})
    async with pools:
        await wait_until_async(lambda: all(server_conns(pg, n, app) >= 2 for n in ("RAC2", "RAC3")), 10)
        await asyncio.sleep(0.5)  # the upkeep's rounds too
        assert server_conns(pg, "RAC1", app) == 0
        c.set_node_state("RAC1", "up")
        await wait_until_async(lambda: server_conns(pg, "RAC1", app) >= 2, 3)


@pytest.mark.asyncio
async def test_closed_pools_refuse_to_open_or_probe_again(pg, cluster_factory):
    # open() after close() opened every pool and started the upkeep and the
    # heartbeat again, which no later close() stopped; check_heartbeat()
    # opened probe connections nobody closed.
    c = cluster_factory(nodes=NAMES)
    app = f"{APP}-{AsyncNodePools.__name__}-closed"  # its own: the sync twin's count is apart
    for opened in (False, True):
        pools = new_pools(c, pg.dsn, min_size=1, connect_kwargs={"application_name": app})
        if opened:
            await pools.open()
        await pools.close()
        try:
            with pytest.raises(psycopg_pool.PoolClosed):
                await pools.open()
            with pytest.raises(psycopg_pool.PoolClosed):
                await pools.check_heartbeat()
            await asyncio.sleep(0.3)
            assert all(server_conns(pg, n, app) == 0 for n in NAMES)
            assert all(pool.closed for _node, pool in pools.items())
        finally:
            if not all(pool.closed for _node, pool in pools.items()):  # reopened: a failed test must not hang
                pools._closed = False
                await pools.close()


@pytest.mark.asyncio
async def test_a_session_scope_entered_twice_is_refused_and_the_outer_session_kept(pg, cluster_factory):
    # A scope entered again inside itself restored its own session at the
    # inner exit and the session before it was lost at the outer one: the
    # enclosing session's borrows went elsewhere.
    c = cluster_factory(nodes=NAMES)
    async with new_pools(c, pg.dsn) as pools:
        with pools.session("outer") as route:
            inner = next(f"inner-{i}" for i in range(1000) if c.route_session(f"inner-{i}").name != route.name)
            s = pools.session(inner)
            with s:
                with pytest.raises(RuntimeError, match="already entered"):
                    s.__enter__()
                assert await port(pools) != pg.port[route.name]
            assert await port(pools) == pg.port[route.name]
            with s:  # once exited, it may be entered again
                assert await port(pools) != pg.port[route.name]
            assert await port(pools) == pg.port[route.name]


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_stuck_heartbeat_probe_is_abandoned_and_the_next_one_connects_afresh(pg, cluster_factory):
    # The probe's own session hangs (its backend stopped) while the node
    # answers new sessions at once. The probe's query had no time limit: it
    # stayed stuck, every round counted a miss, and the node stayed Down.
    import os
    import signal

    c = cluster_factory("thread.auto_pin = false\nheartbeat.interval = 200ms\nheartbeat.misses = 2", nodes=NAMES)
    app = f"{APP}-{AsyncNodePools.__name__}-stuck-probe"  # its own: the sync twin's sessions are apart

    def probe_pids() -> list:
        with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as conn:
            rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()
        return [r[0] for r in rows]

    pools = new_pools(c, pg.dsn, min_size=0, max_size=2, heartbeat=True, connect_kwargs={"application_name": app})
    async with pools:
        await wait_until_async(lambda: len(probe_pids()) == 1, 5)  # min_size=0: the probe's session alone
        (stuck,) = probe_pids()
        os.kill(stuck, signal.SIGSTOP)
        try:
            # Abandoned at probe_timeout: the next probe opens its own session,
            # and one stuck session is no run of misses.
            await wait_until_async(lambda: len(probe_pids()) == 2, 5)
            await asyncio.sleep(1.0)  # five rounds
            assert c.node_state("RAC1") is ra.NodeState.UP
        finally:
            os.kill(stuck, signal.SIGCONT)


@pytest.mark.asyncio
async def test_a_probe_that_connects_after_close_keeps_no_session(pg, cluster_factory, monkeypatch):
    # A probe still connecting when the pools close (a slow node: its round
    # gave up on it at probe_timeout) must not keep the session its connect
    # makes afterwards: the close has closed the probes' connections by then.
    c = cluster_factory("thread.auto_pin = false\nheartbeat.interval = 200ms", nodes=NAMES)
    app = f"{APP}-{AsyncNodePools.__name__}-late-probe"
    entered, release, ended = threading.Event(), AEvent(), threading.Event()
    real = psycopg.AsyncConnection.__dict__["connect"].__func__

    async def slow_connect(cls, *args, **kwargs):
        if not (kwargs.get("autocommit") and args[0] == pg.dsn["RAC1"]) or entered.is_set():
            return await real(cls, *args, **kwargs)
        entered.set()  # RAC1's first probe: held until the pools are closed
        try:
            await await_event(release, 10)
            return await real(cls, *args, **kwargs)
        finally:
            ended.set()

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(slow_connect))
    pools = new_pools(c, pg.dsn, min_size=0, max_size=2, heartbeat=True, connect_kwargs={"application_name": app})
    async with pools:
        await wait_until_async(entered.is_set, 5)
    release.set()
    await wait_until_async(ended.is_set, 5)
    await wait_until_async(lambda: server_conns(pg, "RAC1", app) == 0, 3)


def _in_the_child(run: Any) -> str:
    """`run()`'s verdict, in a forked child."""
    if _ASYNC:
        # The fork copied this thread inside the parent's running loop, which
        # older Pythons still count as running in the child (asyncio.run
        # refuses there): a thread of the child's own runs a new loop.
        verdict = ["the child's loop never answered"]

        def loop() -> None:
            try:
                verdict[0] = asyncio.run(run())
            except BaseException as e:
                verdict[0] = f"{type(e).__name__}: {e}"

        t = threading.Thread(target=loop)
        t.start()
        t.join(10)
        return verdict[0]
    else:
        return run()


@pytest.mark.asyncio
async def test_a_forked_child_never_borrows_or_closes_the_parents_connections(pg, cluster_factory):
    # A forked child's copy of the pools holds the parent's sockets, and no
    # pool worker, upkeep or heartbeat: a borrow there would take the
    # parent's idle connection (two processes on one session), and a close()
    # would send Terminate on each (the parent's next borrow would find its
    # connection gone). In the child those pools are closed without a word
    # to the server, and a borrow says why; the child makes its own.
    c = cluster_factory(nodes=NAMES)
    async with new_pools(c, pg.dsn, min_size=1, max_size=1) as pools:
        with c.pin():
            async with pools.connection() as conn:
                parents = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()

            async def child() -> str:
                try:
                    async with pools.connection() as conn:
                        if await (await conn.execute("SELECT pg_backend_pid()")).fetchone() == parents:
                            return "the child borrowed the parent's connection"
                        return "the child's borrow was served"
                except psycopg_pool.PoolClosed as e:
                    if "fork" not in str(e):
                        return f"no word of the fork: {e}"
                try:
                    async with pools.global_transaction("forked-child") as gtx:
                        async with gtx.branch():
                            return "the child's branch was served"
                except psycopg_pool.PoolClosed as e:
                    if "fork" not in str(e):
                        return f"no word of the fork from a branch: {e}"
                await pools.close()
                async with new_pools(c, pg.dsn, min_size=0, max_size=1) as own:  # the child's own sessions
                    async with own.connection() as conn:
                        if await (await conn.execute("SELECT pg_backend_pid()")).fetchone() == parents:
                            return "the child's own pools took the parent's session"
                return "ok"

            assert in_a_forked_child(lambda: _in_the_child(child)) == "ok"
            async with pools.connection() as conn:  # its pool has one connection: the parent's, still open
                assert await (await conn.execute("SELECT pg_backend_pid()")).fetchone() == parents
