"""AsyncNodePools: pins and transactions follow asyncio tasks on one thread;
the heartbeat is an asyncio task."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import psycopg
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



@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_real_limit_of_cancelling_a_query_on_a_node_that_stopped_answering(pg, cluster_factory):
    # docs/python.md states it: a task cancelled (asyncio.timeout, wait_for)
    # inside a query whose node stopped answering ends up to about 10 s
    # later, psycopg's own cancellation (a cancel request, up to 5 s, then
    # up to 5 s for the query to end); cancelling it a second time ends it
    # at once (psycopg closes the connection). Nothing leaks either way.
    from faultproxy import FaultProxy
    from faults import in_flight, key_on

    c = cluster_factory(nodes=NAMES)
    with FaultProxy(pg.port["RAC2"]) as px:
        dsns = dict(pg.dsn, RAC2=px.dsn(pg.dsn["RAC2"]))
        async with AsyncNodePools(c, dsns, min_size=1, max_size=2, timeout=2.0) as pools:
            key = key_on(c, "RAC2")

            async def query():
                async with pools.connection(key=key) as conn:
                    await aport_of(conn)  # answered: the node is there
                    px.blackhole()
                    await conn.execute("SELECT 1")

            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.0):
                    await query()
            once = time.monotonic() - t0
            px.heal()

            task = asyncio.ensure_future(query())
            await asyncio.sleep(1.0)
            task.cancel()
            await asyncio.sleep(0.2)
            t1 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            twice = time.monotonic() - t1
            px.heal()
        assert 9.0 < once < 12.5, once
        assert twice < 1.0, twice
        assert in_flight(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_cancelled_close_still_closes_every_pool(pg, cluster_factory):
    # A close() cancelled part way (an asyncio.timeout around a shutdown, a
    # server's lifespan cancelled) set the pools closed and stopped there:
    # the node pools after the one it was closing kept their connections and
    # workers, and a second close() returned at once, closing nothing.
    c = cluster_factory(nodes=NAMES)
    pools = AsyncNodePools(c, pg.dsn, heartbeat=True, min_size=1, max_size=2, timeout=5.0)
    await pools.open()
    first = pools._by_id[0]
    entered, release = asyncio.Event(), asyncio.Event()
    real_close = first.close

    async def slow_close(timeout=5.0):
        entered.set()
        await release.wait()
        await real_close(timeout)

    first.close = slow_close
    task = asyncio.ensure_future(pools.close())
    await asyncio.wait_for(entered.wait(), 20)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.wait_for(pools.close(), 30)
    assert [p.closed for p in pools._by_id] == [True, True, True]
    assert not pools._heartbeat.is_alive()


class _CancelledAsAutocommitSwitches(psycopg.AsyncConnection):
    """psycopg's `set_autocommit` may yield to the loop once the switch is
    made (`waiting.wait_async` does after a busy stretch): a cancel there
    finds autocommit already switched. This one yields there each time it
    is armed, and cancels its task at that point."""

    armed = False

    async def set_autocommit(self, value):
        await super().set_autocommit(value)
        if value and _CancelledAsAutocommitSwitches.armed:
            _CancelledAsAutocommitSwitches.armed = False
            asyncio.current_task().cancel()
            await asyncio.sleep(0)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_cancel_during_the_checkout_check_leaves_the_connection_out_of_autocommit(pg, cluster_factory):
    # psycopg_pool's check turns autocommit on for its empty query and off
    # again in a `finally` it enters only after the switch returned: a task
    # cancelled as the switch returned left the connection in autocommit,
    # and the pool took it back so. The next borrower's statements then
    # committed one by one (its rollback undid nothing) and a two-phase
    # branch failed "can't use two-phase transactions in autocommit mode".
    from faults import in_flight

    cls = _CancelledAsAutocommitSwitches
    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(c, pg.dsn, min_size=1, max_size=1, timeout=5.0, connection_class=cls) as pools:

        async def borrow():
            async with pools.connection(key="one-key") as conn:
                await conn.execute("SELECT 1")

        cls.armed = True  # a pooled connection's first checkout is always checked
        with pytest.raises(asyncio.CancelledError):
            await asyncio.ensure_future(borrow())
        assert not cls.armed  # the cancel came where it should
        assert in_flight(c) == 0
        async with pools.connection(key="one-key") as conn:
            assert conn.autocommit is False


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_cancelled_check_heartbeat_closes_its_probe_connections(pg, cluster_factory, monkeypatch):
    # check_heartbeat() without a running heartbeat probes with connections
    # of its own and closed them only after the round: cancelled while a
    # probe hung (a node that does not answer), it left the probes that had
    # answered with their connections open, and the hung one running.
    from racaffinity import _pools_async

    real_probe = _pools_async._AsyncHeartbeat._probe
    hung, ended = asyncio.Event(), asyncio.Event()

    async def probe(self, node, dsn):
        if node == 0:
            hung.set()
            try:
                await asyncio.Event().wait()  # never answers
            finally:
                ended.set()
        await real_probe(self, node, dsn)

    monkeypatch.setattr(_pools_async._AsyncHeartbeat, "_probe", probe)
    app = "racaffinity-probe-test"

    def probe_sessions():
        n = 0
        for name in ("RAC2", "RAC3"):
            with psycopg.connect(pg.dsn[name], autocommit=True, connect_timeout=5) as admin:
                n += admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
                ).fetchone()[0]
        return n

    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(
        c, pg.dsn, probe_timeout=30.0, min_size=0, max_size=1, connect_kwargs={"application_name": app}
    ) as pools:
        task = asyncio.ensure_future(pools.check_heartbeat())
        await asyncio.wait_for(hung.wait(), 20)
        await wait_until_async(lambda: probe_sessions() == 2, 20)  # RAC2's and RAC3's probes answered
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until_async(lambda: probe_sessions() == 0, 10)
        await asyncio.wait_for(ended.wait(), 10)  # the hung probe does not outlive the call


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_an_ha_event_whose_map_load_was_cancelled_still_loads_the_map(pg, cluster_factory):
    # apply_event() acts on the new states, then awaits the map load the
    # event calls for. Cancelled in that load (the caller's timeout), it had
    # recorded the states as seen: no upkeep round saw a change to load
    # after, and without partition_map_reload the map of before the event
    # stayed in force until the next HA event.
    from conftest import fan_line

    c = cluster_factory("data.partitions = 4", nodes=NAMES)
    maps = [{p: "RAC1" for p in range(4)}, {p: "RAC3" for p in range(4)}]
    calls = []
    held, release = asyncio.Event(), asyncio.Event()

    async def loader():
        calls.append(1)
        if len(calls) == 2:  # the event's load: held until cancelled
            held.set()
            await release.wait()
        return maps[min(len(calls), 2) - 1]

    async with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, partition_map_loader=loader) as pools:
        assert pools.partition_map_loads == (1, 0, None)
        task = asyncio.ensure_future(pools.apply_event(fan_line("RAC2", "down")))
        await asyncio.wait_for(held.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until_async(lambda: pools.partition_map_loads[0] == 2, 10)
        assert {c.route_key(k).name for k in range(20)} == {"RAC3"}


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_cancelled_recover_all_leaves_no_gtrid_it_resolved_on_record(pg, cluster_factory, tables, monkeypatch):
    # recover_all() records each prepared gtrid it finds in the core's
    # registry and forgets those it resolved once the scans end. Cancelled
    # while one node's scan hung, it returned with the other scans still
    # running: the gtrids they resolved stayed on record for good (no later
    # run finds them prepared), and the hung scan ran on.
    from conftest import prepare_directly, prepared_xacts
    from faults import live
    from racaffinity import _tpc_async

    real_finish = _tpc_async._AsyncRecovery.finish
    hung, ended, finished_elsewhere = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def finish(self, conn, node, xid):
        if node == 0:
            hung.set()
            try:
                await asyncio.Event().wait()  # never answers
            finally:
                ended.set()
        await real_finish(self, conn, node, xid)
        # Set after the answer came back: the scan records the gtrid as
        # resolved before it next yields. The server's view (no prepared
        # branch on RAC2) comes earlier, while the scan still awaits that
        # answer, and a cancel there is another case (the outcome unknown).
        finished_elsewhere.set()

    monkeypatch.setattr(_tpc_async._AsyncRecovery, "finish", finish)
    prepare_directly(pg.dsn["RAC1"], "cancelled-recovery-RAC1", "b0")
    prepare_directly(pg.dsn["RAC2"], "cancelled-recovery-RAC2", "b0")
    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, timeout=5.0) as pools:
        task = asyncio.ensure_future(pools.recover_all("rollback", scope="node"))
        await asyncio.wait_for(hung.wait(), 20)
        await asyncio.wait_for(finished_elsewhere.wait(), 20)  # RAC2's scan resolved its branch
        assert prepared_xacts(pg)["RAC2"] == []
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(ended.wait(), 10)  # the hung scan does not outlive the call
        monkeypatch.undo()
        report = await pools.recover_all("rollback", scope="node")
        assert [r.gtrid for r in report.resolved] == ["cancelled-recovery-RAC1"]
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert live(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_recover_all_cancelled_while_its_rollback_is_answered_leaves_no_gtrid_on_record(
    pg, cluster_factory, tables, monkeypatch
):
    # The server carried out the scan's ROLLBACK PREPARED, and the call was
    # cancelled before the scan had the answer: the gtrid, recorded in the
    # core's registry, stayed there for good (no later run finds it
    # prepared). Its outcome is unknown to the run; a branch still prepared
    # is found and recorded again by the next run.
    from conftest import prepare_directly, prepared_xacts
    from faults import live
    from racaffinity import _tpc_async

    real_finish = _tpc_async._AsyncRecovery.finish
    answered = asyncio.Event()

    async def finish(self, conn, node, xid):
        await real_finish(self, conn, node, xid)
        answered.set()
        await asyncio.Event().wait()  # the answer never reaches the scan

    monkeypatch.setattr(_tpc_async._AsyncRecovery, "finish", finish)
    prepare_directly(pg.dsn["RAC2"], "cut-off-recovery-RAC2", "b0")
    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, timeout=5.0) as pools:
        task = asyncio.ensure_future(pools.recover_all("rollback", scope="node"))
        await asyncio.wait_for(answered.wait(), 20)
        assert prepared_xacts(pg)["RAC2"] == []
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        report = await pools.recover_all("rollback", scope="node")
        assert report.ok and report.resolved == [], report
        assert live(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_recover_all_cancelled_before_its_rollback_is_sent_resolves_the_branch_next_time(
    pg, cluster_factory, tables, monkeypatch
):
    # The other side of the decision above: the branch the cancelled run
    # did not finish is still prepared, and the next run resolves it.
    from conftest import prepare_directly, prepared_xacts
    from faults import live
    from racaffinity import _tpc_async

    real_finish = _tpc_async._AsyncRecovery.finish
    reached = asyncio.Event()

    async def finish(self, conn, node, xid):
        reached.set()
        await asyncio.Event().wait()  # never sends it
        await real_finish(self, conn, node, xid)

    monkeypatch.setattr(_tpc_async._AsyncRecovery, "finish", finish)
    prepare_directly(pg.dsn["RAC2"], "unsent-recovery-RAC2", "b0")
    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, timeout=5.0) as pools:
        task = asyncio.ensure_future(pools.recover_all("rollback", scope="node"))
        await asyncio.wait_for(reached.wait(), 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(prepared_xacts(pg)["RAC2"]) == 1
        monkeypatch.undo()
        report = await pools.recover_all("rollback", scope="node")
        assert [r.gtrid for r in report.resolved] == ["unsent-recovery-RAC2"], report
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert live(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_recover_all_whose_rollback_answer_was_lost_leaves_no_gtrid_on_record(
    pg, cluster_factory, proxies, tables
):
    # The server ran the scan's ROLLBACK PREPARED and the answer was lost
    # (the connection reset): the run cannot know the outcome, and no later
    # run finds the branch prepared, so its recorded gtrid stayed live.
    from conftest import prepare_directly, prepared_xacts
    from faults import live

    prepare_directly(pg.dsn["RAC2"], "lost-recovery-RAC2", "b0")
    px = proxies["RAC2"]
    dsns = dict(pg.dsn, RAC2=px.dsn(pg.dsn["RAC2"]))
    c = cluster_factory(nodes=NAMES)
    async with AsyncNodePools(c, dsns, min_size=0, max_size=2, timeout=5.0) as pools:
        px.lose_reply_after(b"ROLLBACK PREPARED")
        report = await pools.recover_all("rollback", scope="node")
        assert px.reply_lost
        assert [r.gtrid for r in report.failed] == ["lost-recovery-RAC2"], report
        assert "RAC2" in report.unreachable, report
        assert prepared_xacts(pg)["RAC2"] == []  # the server carried it out
        assert list(pools.in_doubt) == ["lost-recovery-RAC2"]
        report = await pools.recover_all("rollback", scope="node")
        assert report.ok and report.completed == ["lost-recovery-RAC2"], report
        assert pools.in_doubt == {}
        assert live(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_close_in_a_child_forked_during_a_close_returns_at_once(pg, cluster_factory):
    # The child's pools are the parent's (closed there without a word), and
    # the close under way at the fork is the parent's task, of a loop the
    # child does not run: awaiting it would hang the child's close().
    from racaffinity import _pools_base

    c = cluster_factory(nodes=NAMES)
    pools = AsyncNodePools(c, pg.dsn, min_size=1, max_size=2, timeout=5.0)
    await pools.open()
    first = pools._by_id[0]
    entered, release = asyncio.Event(), asyncio.Event()
    real_close = first.close

    async def slow_close(timeout=5.0):
        entered.set()
        await release.wait()
        await real_close(timeout)

    first.close = slow_close
    parents = asyncio.ensure_future(pools.close())
    await asyncio.wait_for(entered.wait(), 20)
    saved = [(p, p._forked, p._closed, [q._closed for q in p._by_id if q is not None]) for p in _pools_base.LIVE_NODE_POOLS]
    _pools_base._forked_child()  # as os.fork() runs it in the child
    try:
        await asyncio.wait_for(pools.close(), 10)
    finally:
        for p, forked, closed, pool_closed in saved:  # back to the parent
            p._forked, p._closed = forked, closed
            for q, was in zip([q for q in p._by_id if q is not None], pool_closed):
                q._closed = was
        release.set()
        await asyncio.wait_for(parents, 30)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_cancelled_connect_is_no_failure_of_its_node(pg, cluster_factory, proxies):
    # A pool's connects run in psycopg_pool's worker tasks; one cancelled
    # there (the loop shutting down, an application cancelling its tasks)
    # was counted as a failed connect: the pool was taken as backing off,
    # so a replay to the node renewed it (`_renew_if_backing_off`), and
    # `last_error` named the cancel. The cancel says nothing of the node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    px = proxies["RAC1"]
    dsns = dict(pg.dsn, RAC1=px.dsn(pg.dsn["RAC1"]))
    pools = AsyncNodePools(c, dsns, min_size=0, max_size=2, timeout=5.0, connect_kwargs={"connect_timeout": 30})
    async with pools:
        pool = pools.node_pool("RAC1")
        attempts = pool._racaffinity_connects
        px.blackhole()  # the connect waits for an answer that never comes
        task = asyncio.ensure_future(pool.connection_class.connect(pool.conninfo, **pool.kwargs))
        await wait_until_async(lambda: px.connections == 1 and len(attempts._running) == 1, 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        px.heal()
        assert (attempts.backing_off, attempts.last_failed, attempts.last_error) == (False, False, None)
        assert attempts._running == {}
        await pools._renew_if_backing_off(c.node_id("RAC1"))
        assert pools.node_pool("RAC1") is pool, "the pool was renewed for a cancel"
