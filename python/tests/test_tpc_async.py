"""Two-phase commit over psycopg's tpc_* API routed by the core, and
recovery after a real crash between prepare and commit; written once for
AsyncNodePools. test_tpc_sync.py (NodePools) is generated from this file by
tools/async_to_sync.py, so both APIs pass the same tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Tuple

import psycopg
import pytest

import racaffinity as ra
from racaffinity._acompat import aspawn, await_all
from racaffinity._deadline import CallTimeout, abounded
from racaffinity.pools import AsyncNodePools
from racaffinity.tpc import DEFAULT_FORMAT_ID, InDoubtError, transaction_key

from conftest import NAMES, aport_of, fan_line, prepare_directly, prepared_xacts, tokens_by_node, tpc_rows, wait_until
from faults import gtrid_on, in_flight, live, node_metrics

rows = tpc_rows

_ASYNC = True


def new_pools(pg, cluster_factory, **kwargs) -> AsyncNodePools:
    kwargs.setdefault("min_size", 1)
    kwargs.setdefault("max_size", 8)
    kwargs.setdefault("timeout", 5.0)
    return AsyncNodePools(cluster_factory(nodes=NAMES), pg.dsn, **kwargs)


@pytest.mark.asyncio
async def test_commit_two_concurrent_branches_on_one_node(pg, cluster_factory, tables):
    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        gtrids = [f"order-{i}" for i in range(9)]
        for g in gtrids:
            ports = []
            async with pools.global_transaction(g) as gtx:

                async def branch(b):
                    async with gtx.branch() as conn:
                        cur = await conn.execute("SELECT inet_server_port()")
                        ports.append((await cur.fetchone())[0])
                        await conn.execute("INSERT INTO py_tpc VALUES (%s, %s)", (g, b))

                await await_all([aspawn(branch, (f"b{i}",), f"branch-{i}") for i in range(2)], 30)
                assert [b.state for b in gtx.branches] == ["prepared", "prepared"]
                owner = c.tx_route(transaction_key(g)).name
                assert len(prepared_xacts(pg)[owner]) == 2
            assert set(ports) == {pg.port[owner]}
            assert [b.state for b in gtx.branches] == ["committed", "committed"]
        r = rows(pg)
        for g in gtrids:
            owner = c.tx_begin(transaction_key(g)).name
            c.tx_end(transaction_key(g))
            assert (g, "b0") in r[owner] and (g, "b1") in r[owner]
            assert all(not any(row[0] == g for row in r[n]) for n in NAMES if n != owner)
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert c.metrics()["scopes"]["transaction"]["live"] == 0
        assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


@pytest.mark.asyncio
async def test_rollback_on_error(pg, cluster_factory, tables):
    async with new_pools(pg, cluster_factory) as pools:
        with pytest.raises(RuntimeError):
            async with pools.global_transaction("rb-1") as gtx:
                async with gtx.branch() as conn:
                    await conn.execute("INSERT INTO py_tpc VALUES ('rb-1', 'b0')")
                async with gtx.branch() as conn:
                    await conn.execute("INSERT INTO py_tpc VALUES ('rb-1', 'b1')")
                raise RuntimeError("the application changed its mind")
        assert [b.state for b in gtx.branches] == ["rolled back", "rolled back"]
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert all(r == [] for r in rows(pg).values())
        # a failing branch body rolls back that branch and then the others
        with pytest.raises(psycopg.errors.UndefinedTable):
            async with pools.global_transaction("rb-2") as gtx:
                async with gtx.branch() as conn:
                    await conn.execute("INSERT INTO py_tpc VALUES ('rb-2', 'b0')")
                async with gtx.branch() as conn:
                    await conn.execute("INSERT INTO no_such_table VALUES (1)")
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert pools.cluster.metrics()["scopes"]["transaction"]["live"] == 0
        assert sum(n["in_flight"] for n in pools.cluster.metrics()["nodes"]) == 0


@pytest.mark.asyncio
async def test_a_branch_scope_entered_again_while_entered_is_refused_and_leaks_nothing(pg, cluster_factory, tables):
    # A second entry began a second branch into the same scope: the first
    # one's connection and lease were never given back (the scope's exit
    # prepared the second branch, twice), and the commit refused to run
    # while the first branch stayed active.
    async with new_pools(pg, cluster_factory) as pools:
        async with pools.global_transaction("twice-1") as gtx:
            scope = gtx.branch()
            async with scope as conn:
                with pytest.raises(RuntimeError, match="already entered"):
                    await scope.__aenter__()
                await conn.execute("INSERT INTO py_tpc VALUES ('twice-1', 'b0')")
            async with scope as conn:  # once exited, it begins another branch
                await conn.execute("INSERT INTO py_tpc VALUES ('twice-1', 'b1')")
        assert [b.state for b in gtx.branches] == ["committed", "committed"]
        owner = gtx.branches[0].node_name
        assert gtx.branches[1].node_name == owner
        assert sorted(rows(pg)[owner]) == [("twice-1", "b0"), ("twice-1", "b1")]
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert in_flight(pools.cluster) == 0

CRASHER = r"""
import json, os, sys, time
import racaffinity as ra
from racaffinity.pools import NodePools
names = ["RAC1", "RAC2", "RAC3"]
dsns = {n: os.environ[f"RACAFF_NODE{i + 1}_DSN"] for i, n in enumerate(names)}
cluster = ra.Cluster(nodes=names)
pools = NodePools(cluster, dsns, min_size=1, max_size=24)
gtxs = []
for i in range(int(sys.argv[1])):
    g = f"crash-{i}"
    gtx = pools.global_transaction(g)
    for b in ("b0", "b1"):
        with gtx.branch() as conn:
            conn.execute("INSERT INTO py_tpc VALUES (%s, %s)", (g, b))
    gtxs.append(gtx)
print(json.dumps({g.gtrid: cluster.tx_route(g.tx_key).name for g in gtxs}), flush=True)
time.sleep(600)  # killed here: between prepare and commit
"""


def crash_after_prepare(n: int) -> dict:
    p = subprocess.Popen([sys.executable, "-c", CRASHER, str(n)], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line, "the crasher died before preparing"
        owners = json.loads(line)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    assert p.returncode == -signal.SIGKILL
    return owners


@pytest.mark.asyncio
@pytest.mark.parametrize("action", ["rollback", "commit"])
async def test_recover_all_after_a_crash_between_prepare_and_commit(pg, cluster_factory, tables, action):
    owners = crash_after_prepare(10)
    # the crash left 20 in-doubt branches, each gtrid's two on its owner node
    left = prepared_xacts(pg)
    assert sum(len(v) for v in left.values()) == 20
    for g, owner in owners.items():
        assert sum(1 for gid in left[owner] if psycopg.Xid.from_string(gid).gtrid == g) == 2
    # a restarted TM (a fresh cluster knows nothing) recovers
    async with new_pools(pg, cluster_factory) as pools:
        report = await pools.recover_all(action)
        assert report.ok and not report.split
        assert len(report.resolved) == 20
        assert all(r.node_name == owners[r.gtrid] for r in report.resolved)
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert pools.cluster.metrics()["scopes"]["transaction"]["live"] == 0
    r = rows(pg)
    for g, owner in owners.items():
        want = [(g, "b0"), (g, "b1")] if action == "commit" else []
        assert [row for row in r[owner] if row[0] == g] == want


@pytest.mark.asyncio
async def test_recover_all_reports_a_split_transaction_and_still_resolves_it(pg, cluster_factory, tables, caplog):
    # Bypass the routing: one gtrid prepared on two nodes (what affinity prevents).
    def prepare(name, xid):
        conn = psycopg.connect(pg.dsn[name])
        conn.tpc_begin(xid)
        conn.execute("INSERT INTO py_tpc VALUES (%s, %s)", (xid.gtrid, xid.bqual))
        conn.tpc_prepare()
        conn.close()  # the prepared branch outlives the session

    prepare("RAC1", psycopg.Xid.from_parts(DEFAULT_FORMAT_ID, "split-1", "x1"))
    prepare("RAC2", psycopg.Xid.from_parts(DEFAULT_FORMAT_ID, "split-1", "x2"))
    # a foreign xid (another format id) is left alone by default
    prepare("RAC3", psycopg.Xid.from_parts(7, "foreign-1", "b"))
    async with new_pools(pg, cluster_factory) as pools:
        with caplog.at_level(logging.WARNING, logger="racaffinity.tpc"):
            report = await pools.recover_all()
        assert report.split == ["split-1"]
        # The span is counted by the core and logged once ([agreement] item 5).
        spans = [r for r in caplog.records if "split-1" in r.getMessage() and r.levelno == logging.WARNING]
        assert len(spans) == 1, [r.getMessage() for r in caplog.records]
        assert pools.cluster.metrics()["tx_spans"] == 1
        assert sorted(r.node_name for r in report.resolved) == ["RAC1", "RAC2"]
        left = prepared_xacts(pg)
        assert left["RAC1"] == left["RAC2"] == [] and len(left["RAC3"]) == 1
        report = await pools.recover_all(format_id=None)
        assert [r.gtrid for r in report.resolved] == ["foreign-1"]
        assert prepared_xacts(pg) == {n: [] for n in NAMES}


@pytest.mark.asyncio
async def test_phase_two_on_a_dead_node_leaves_the_branch_in_doubt_then_recovery(pg, cluster_factory, tables):
    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        g = gtrid_on(c, "RAC2", "dead")
        gtx = pools.global_transaction(g, timeout=1.0)
        async with gtx.branch() as conn:
            await conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
        assert gtx.branches[0].node_name == "RAC2"
        pg.kill(2)
        try:
            with pytest.raises(InDoubtError) as e:
                await gtx.commit()
            assert [b.node_name for b in e.value.branches] == ["RAC2"]
            assert list(pools.in_doubt) == [g]
            # the core still routes the prepared gtrid to RAC2 (it never moves)
            assert c.tx_route(transaction_key(g)).name == "RAC2"
            c.set_node_state("RAC2", "down")
            assert c.tx_route(transaction_key(g)).name == "RAC2"  # never refused for routing reasons
            c.set_node_state("RAC2", "up")
        finally:
            pg.restart(2)
    # prepared transactions survive the crash; recovery commits it on RAC2
    wait_until(lambda: len(prepared_xacts(pg)["RAC2"]) == 1, 10)
    async with new_pools(pg, cluster_factory, max_size=2) as fresh:
        report = await fresh.recover_all("commit")
    assert [r.node_name for r in report.resolved] == ["RAC2"] and report.ok
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert rows(pg)["RAC2"] == [(g, "b0")]


@pytest.mark.asyncio
async def test_gtrid_type_and_size(pg, cluster_factory):
    async with new_pools(pg, cluster_factory) as pools:
        with pytest.raises(TypeError):
            pools.global_transaction(b"bytes-gtrid")
        gtx = pools.global_transaction("g" * 65)
        with pytest.raises((ra.InvalidArgumentError, ValueError)):
            async with gtx.branch():
                pass
        assert sum(n["in_flight"] for n in pools.cluster.metrics()["nodes"]) == 0


async def _branch_ports(gtx, g: str, n: int = 2) -> list:
    """Runs `n` branches of `gtx` (one row each); returns the port of each branch's node."""
    ports = []
    for i in range(n):
        async with gtx.branch() as conn:
            ports.append(await aport_of(conn))
            await conn.execute("INSERT INTO py_tpc VALUES (%s, %s)", (g, f"b{i}"))
    return ports


async def _in_a_request(cluster, token: str, body) -> Any:
    """`await body()` inside a request the token middleware routed by the cookie `token`."""
    got = []
    if _ASYNC:
        from racaffinity.web import AsgiTokenMiddleware

        async def app(scope, receive, send) -> None:
            got.append(await body())

        scope = {"type": "http", "headers": [(b"cookie", f"RACAFFINITY_ROUTE={token}".encode())]}
        await AsgiTokenMiddleware(app, cluster)(scope, None, None)
    else:
        from racaffinity.web import WsgiTokenMiddleware

        def app(environ, start_response) -> list:
            got.append(body())
            return []

        WsgiTokenMiddleware(app, cluster)({"HTTP_COOKIE": f"RACAFFINITY_ROUTE={token}"}, None)
    return got[0]


@pytest.mark.asyncio
async def test_a_new_gtrid_follows_the_requests_token_over_the_pin(pg, cluster_factory, tables):
    # The request's session work goes where its token routes it; its global
    # transaction must go there too, not where the context is pinned.
    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        tokens = tokens_by_node(c)
        with pools.pin() as pinned:
            others = [n for n in NAMES if n != pinned.name]
            for name in others:
                token = tokens[name]
                g = f"token-{name}"
                async with pools.global_transaction(g, token=token) as gtx:
                    assert await _branch_ports(gtx, g) == [pg.port[name]] * 2
                    assert c.tx_route(transaction_key(g)).name == name == c.route_token(token).route.name

                # No token= given: the one the middleware decided for the request.
                async def in_request(g: str = f"request-{name}") -> list:
                    async with pools.global_transaction(g) as gtx:
                        return await _branch_ports(gtx, g)

                assert await _in_a_request(c, token, in_request) == [pg.port[name]] * 2
        for name in others:
            assert sorted(rows(pg)[name]) == sorted((f"{k}-{name}", b) for k in ("request", "token") for b in ("b0", "b1"))
        assert prepared_xacts(pg) == {n: [] for n in NAMES}
        assert live(c) == 0 and in_flight(c) == 0


@pytest.mark.asyncio
async def test_a_new_gtrids_data_key_wins_over_the_token(pg, cluster_factory, tables):
    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        tokens = tokens_by_node(c)
        keys = {c.route_key(k).name: k for k in range(200)}
        for name in NAMES:
            other = next(n for n in NAMES if n != name)
            g = f"key-{name}"
            async with pools.global_transaction(g, key=keys[name], token=tokens[other]) as gtx:
                assert await _branch_ports(gtx, g, 1) == [pg.port[name]]

            async def in_request(g: str = f"key-request-{name}") -> list:
                async with pools.global_transaction(g, key=keys[name]) as gtx:
                    return await _branch_ports(gtx, g, 1)

            assert await _in_a_request(c, tokens[other], in_request) == [pg.port[name]]
        assert live(c) == 0 and in_flight(c) == 0


@pytest.mark.asyncio
async def test_a_malformed_token_refuses_the_first_branch_and_registers_nothing(pg, cluster_factory, tables):
    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        for bad in ["garbage", "abc!ra1.zz.none", ""]:
            with pytest.raises(ra.InvalidArgumentError, match="token"):
                async with pools.global_transaction("bad-token", token=bad, key="k") as gtx:
                    async with gtx.branch() as conn:
                        await conn.execute("INSERT INTO py_tpc VALUES ('bad-token', 'b0')")
            assert gtx.branches == []
            with pytest.raises(ra.UnknownTransactionError):
                c.tx_route(transaction_key("bad-token"))
        with pytest.raises(TypeError):
            pools.global_transaction("bad-token", token=b"abc!ra1.00000000.none")
        with pytest.raises(TypeError):
            pools.global_transaction("bad-token", key=1.5)
        assert live(c) == 0 and in_flight(c) == 0
        assert rows(pg) == {n: [] for n in NAMES} and prepared_xacts(pg) == {n: [] for n in NAMES}


@pytest.mark.asyncio
async def test_the_same_gtrid_of_another_format_id_is_another_transaction(pg, cluster_factory, tables):
    # XA names a global transaction by format id and gtrid together: one TM's
    # gtrid may be another's, and neither may be joined to, or refused
    # because of, the other's node.
    pools = AsyncNodePools(cluster_factory(nodes=NAMES, transaction_strict=True, transaction_settle=0),
                      pg.dsn, min_size=1, max_size=8, timeout=5.0)
    async with pools:
        c = pools.cluster
        mine = pools.global_transaction("same-gtrid")
        theirs = pools.global_transaction("same-gtrid", format_id=DEFAULT_FORMAT_ID + 1)
        async with mine.branch() as conn:
            await conn.execute("INSERT INTO py_tpc VALUES ('same-gtrid', 'mine')")
        owner = mine.branches[0].node_name
        c.set_node_state(owner, ra.NodeState.DOWN)
        async with theirs.branch() as conn:  # strict mode refuses only a branch of the same transaction
            await conn.execute("INSERT INTO py_tpc VALUES ('same-gtrid', 'theirs')")
        assert theirs.branches[0].node_name != owner
        assert live(c) == 2
        await theirs.rollback()
        await mine.rollback()
        assert live(c) == 0
        assert prepared_xacts(pg) == {n: [] for n in NAMES}


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_commit_on_a_blackholed_node_is_bounded_and_leaves_the_branch_in_doubt(
    pg, cluster_factory, tables, proxies
):
    # The deadline shuts the socket down under the waiting call, whether
    # libpq blocks on it or the event loop waits for it to be readable.
    dsns = {n: proxies[n].dsn(pg.dsn[n]) for n in NAMES}
    async with AsyncNodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=4, timeout=2.0) as pools:
        c = pools.cluster
        g = gtrid_on(c, "RAC2", "hole")
        gtx = pools.global_transaction(g)
        async with gtx.branch() as conn:
            await conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
        proxies["RAC2"].blackhole()
        t0 = time.monotonic()
        with pytest.raises(InDoubtError):
            await gtx.commit()
        assert time.monotonic() - t0 < 15
        assert [b.state for b in gtx.branches] == ["in doubt"]
        assert len(prepared_xacts(pg)["RAC2"]) == 1 and live(c) == 1 and in_flight(c) == 0
        assert pools.in_doubt == {g: [str(gtx.branches[0].xid)]}
        proxies["RAC2"].heal()
        report = await pools.recover_all("commit", timeout=2.0)
        assert report.ok
        # resolved by the scan, or by the held-back COMMIT arriving after the heal
        assert [r.node_name for r in report.resolved] == ["RAC2"] or report.completed == [g]
        assert rows(pg)["RAC2"] == [(g, "b0")] and prepared_xacts(pg) == {n: [] for n in NAMES}
        assert live(c) == 0 and pools.in_doubt == {}


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_an_interrupt_during_a_failed_branchs_rollback_is_not_swallowed(pg, cluster_factory, tables, proxies):
    # The body failed and its branch's ROLLBACK hangs (a blackholed node):
    # a cancel (Ctrl-C) there ends the wait, and must reach the caller as
    # itself, not turn into the body's error (a task that goes on running
    # after its cancel; a Ctrl-C that an `except` of the body's error eats).
    dsns = {n: proxies[n].dsn(pg.dsn[n]) for n in NAMES}
    async with AsyncNodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=4, timeout=2.0) as pools:
        c = pools.cluster
        gtx = pools.global_transaction(gtrid_on(c, "RAC1", "interrupted"))

        async def body():
            async with gtx.branch() as conn:
                await conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (gtx.gtrid,))
                proxies["RAC1"].blackhole()
                raise ValueError("the body failed")

        if _ASYNC:
            task = asyncio.ensure_future(body())
            await asyncio.sleep(1.0)  # in the branch's ROLLBACK
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            def ctrl_c(*_):
                raise KeyboardInterrupt

            old = signal.signal(signal.SIGALRM, ctrl_c)
            try:
                signal.setitimer(signal.ITIMER_REAL, 1.0)  # in the branch's ROLLBACK
                with pytest.raises(KeyboardInterrupt):
                    body()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        proxies["RAC1"].heal()
        assert [b.state for b in gtx.branches] == ["rolled back"]
        wait_until(lambda: rows(pg)["RAC1"] == [], 10)  # its session ended: rolled back
        assert live(c) == 0 and in_flight(c) == 0 and pools.in_doubt == {}


@asynccontextmanager
async def _a_branch_on_rac1(pools, tag: str) -> AsyncIterator[Tuple[Any, Any]]:
    """The hard-Down and drain tests' global transaction: one branch on
    RAC1 that has inserted its row (gtrid, 'b0'). The block runs inside the
    branch, which prepares as it ends (rolls back on an error); yields the
    transaction and the branch's connection."""
    gtx = pools.global_transaction(gtrid_on(pools.cluster, "RAC1", tag))
    async with gtx.branch() as conn:
        await conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (gtx.gtrid,))
        yield gtx, conn


def _left_behind(pg, pools, gtx, state: str) -> None:
    """What `_a_branch_on_rac1`'s transaction leaves: its branch `state`,
    its row on RAC1 only if committed, no prepared branch anywhere, no
    lease live or in flight."""
    c = pools.cluster
    assert [b.state for b in gtx.branches] == [state]
    assert rows(pg)["RAC1"] == ([(gtx.gtrid, "b0")] if state == "committed" else [])
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert live(c) == 0 and in_flight(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_a_hard_down_aborts_an_open_branchs_connection_on_a_blackholed_node(
    pg, cluster_factory, tables, proxies
):
    # Fast connection failover covers a branch as any borrow: its connection
    # came from the node pool unmarked, so a FAN failure left it alone and
    # its next statement on the blackholed node waited for a TCP or
    # statement timeout (here the test's own bound).
    dsns = {n: proxies[n].dsn(pg.dsn[n]) for n in NAMES}
    async with AsyncNodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=4, timeout=2.0) as pools:
        waited = math.inf
        with pytest.raises(psycopg.OperationalError) as info:
            async with _a_branch_on_rac1(pools, "fcf") as (gtx, conn):
                proxies["RAC1"].blackhole()
                await pools.apply_event(fan_line("RAC1", "down"))
                t0 = time.monotonic()
                try:
                    async with abounded(conn, 8.0):
                        await conn.execute("SELECT 1")
                finally:
                    waited = time.monotonic() - t0
        assert waited < 2.0, f"the branch's statement waited {waited:.1f} s: its connection was not aborted"
        assert not isinstance(info.value, CallTimeout)
        # Recovered as any branch whose session ended before PREPARE.
        assert pools.in_doubt == {}
        proxies["RAC1"].heal()
        _left_behind(pg, pools, gtx, "rolled back")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_hard_down_leaves_a_prepared_branchs_connection_to_phase_two(pg, cluster_factory, tables):
    # Once prepared, phase two's calls on the connection are bounded and
    # fall back to a new one: an abort by the Down would only count a
    # second failure for the node (the failure matrix's prepare/stall
    # cells counted 2 where 1 happened).
    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        async with _a_branch_on_rac1(pools, "prepared-down") as (gtx, _conn):
            pass
        await pools.apply_event(fan_line("RAC1", "down"))
        assert c.node_state("RAC1").name == "DOWN"
        await gtx.commit()
        _left_behind(pg, pools, gtx, "committed")
        assert node_metrics(c, "RAC1")["failures"] == 0


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_a_planned_drain_lets_an_open_branch_prepare_and_commit_on_its_node(pg, cluster_factory, tables):
    # A drain is planned: work in progress finishes on the node, a branch
    # as a borrow; the drain's end (a planned Down) aborts nothing.
    async with new_pools(pg, cluster_factory, upkeep_interval=0.05) as pools:
        c = pools.cluster
        async with _a_branch_on_rac1(pools, "drain") as (gtx, conn):
            await pools.apply_event(fan_line("RAC1", "down", reason="USER", drain_timeout=1))
            assert c.node_state("RAC1").name == "DRAINING"
            wait_until(lambda: c.node_state("RAC1").name == "DOWN", 10)  # the core ends it by the clock
            await pools._upkeep.round()  # the drain's end acted on
            cur = await conn.execute("SELECT inet_server_port()")
            assert (await cur.fetchone())[0] == pg.port["RAC1"]
        assert [b.state for b in gtx.branches] == ["prepared"]
        await gtx.commit()
        _left_behind(pg, pools, gtx, "committed")


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_recover_all_resolves_the_healthy_nodes_while_another_hangs(pg, cluster_factory, tables, proxies):
    dsns = {n: proxies[n].dsn(pg.dsn[n]) for n in NAMES}
    for name in ("RAC1", "RAC3"):
        prepare_directly(pg.dsn[name], f"healthy-{name}", "b0")
    prepare_directly(pg.dsn["RAC2"], "hung-RAC2", "b0")
    async with AsyncNodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=2, timeout=2.0) as pools:
        proxies["RAC2"].blackhole()  # from now on nothing answers through it
        t0 = time.monotonic()
        report = await pools.recover_all("rollback", timeout=2.0)
        assert time.monotonic() - t0 < 20, "every call to the hung node is bounded"
        assert sorted(r.node_name for r in report.resolved) == ["RAC1", "RAC3"]
        assert list(report.unreachable) == ["RAC2"] and not report.ok
        left = prepared_xacts(pg)
        assert left["RAC1"] == left["RAC3"] == [] and len(left["RAC2"]) == 1
        proxies["RAC2"].heal()
        report = await pools.recover_all("rollback", timeout=2.0)
        assert report.ok and [r.gtrid for r in report.resolved] == ["hung-RAC2"]
        assert prepared_xacts(pg) == {n: [] for n in NAMES}


@pytest.mark.asyncio
@pytest.mark.parametrize("scope", ["node", "database"])
async def test_recover_all_settles_an_xid_another_resolver_completed_after_the_scan(pg, cluster_factory, tables, scope):
    # Another resolver (a second TM, an operator) commits the xid between
    # this scan and this process's own COMMIT PREPARED, which then answers
    # UndefinedObject: the branch is resolved, elsewhere, and nothing of it
    # may stay on record.
    prepare_directly(pg.dsn["RAC1"], "raced-1", "b0")

    def other_resolver_first(xid) -> bool:
        if xid.gtrid == "raced-1":  # called per scanned xid, after the scan
            with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as other:
                other.tpc_commit(xid)
        return True

    async with new_pools(pg, cluster_factory) as pools:
        c = pools.cluster
        report = await pools.recover_all("commit", predicate=other_resolver_first, timeout=2.0, scope=scope)
        assert report.failed == [] and report.resolved == [], report
        assert [(r.node_name, r.gtrid) for r in report.resolved_elsewhere] == [("RAC1", "raced-1")]
        assert live(c) == 0 and in_flight(c) == 0
        with pytest.raises(ra.UnknownTransactionError):
            c.tx_complete(transaction_key("raced-1"))  # no entry left to complete
    assert prepared_xacts(pg) == {n: [] for n in NAMES} and rows(pg)["RAC1"] == [("raced-1", "b0")]


def _stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP took effect)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _backend_alive(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
        return admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


@pytest.mark.asyncio
@pytest.mark.timeout(90)
@pytest.mark.parametrize("resolver", ["rollback", "recover_all"])
async def test_a_late_prepare_never_leaves_an_orphan_prepared_branch(pg, cluster_factory, tables, resolver):
    # Only the branch's backend stalls, right before its PREPARE; the 1 s
    # deadline gives up on the answer. That backend still holds the PREPARE
    # and runs it when it resumes: a rollback (or recovery) that read
    # pg_prepared_xacts before the backend was gone would call the branch
    # rolled back (or completed) and forget it while it ends up prepared,
    # holding its row locks.
    async with new_pools(pg, cluster_factory, timeout=1.0) as pools:
        c = pools.cluster
        g = gtrid_on(c, "RAC1", "late")
        gtx = pools.global_transaction(g, timeout=1.0)

        async def resolve():
            if resolver == "rollback":
                await gtx.rollback()
                return None
            return await pools.recover_all("rollback", timeout=1.0)

        pid = None
        try:
            with pytest.raises(InDoubtError):
                async with gtx.branch() as conn:
                    await conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
                    pid = conn.info.backend_pid
                    os.kill(pid, signal.SIGSTOP)
                    wait_until(lambda: _stopped(pid), 5)
            first = None
            try:
                first = await resolve()
            except InDoubtError as e:
                first = e
            state, on_record, in_doubt = gtx.branches[0].state, live(c), pools.in_doubt
        finally:
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
        wait_until(lambda: not _backend_alive(pg.dsn["RAC1"], pid), 10)
        held = prepared_xacts(pg)["RAC1"]
        assert not (held and (state == "rolled back" or on_record == 0)), (
            f"orphan: {held} prepared, the library said {state} (live={on_record}, first={first!r})"
        )
        # While the stalled backend could still prepare, nothing is concluded:
        # the branch stays in doubt and on record, as the error says.
        if resolver == "rollback":
            assert isinstance(first, InDoubtError) and "stay on record" in str(first), repr(first)
        else:
            assert first.completed == [] and first.resolved == [] and not first.ok, first
            assert first.sessions_running == {str(gtx.branches[0].xid): pid}
        assert state == "in doubt" and on_record == 1 and in_doubt == {g: [str(gtx.branches[0].xid)]}
        # Once the backend is gone, the same call settles it whatever it did.
        await resolve()
        if resolver == "rollback":
            assert [b.state for b in gtx.branches] == ["rolled back"]
        assert prepared_xacts(pg) == {n: [] for n in NAMES} and rows(pg)["RAC1"] == []
        assert live(c) == 0 and in_flight(c) == 0 and pools.in_doubt == {}


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_an_in_doubt_error_settled_by_the_rollback_on_exit_says_so(pg, cluster_factory, tables):
    # The branch's answer to PREPARE is lost (its backend stalled past the
    # deadline); the rollback on the transaction's exit then settles it once
    # the backend is gone. The error that escapes must not claim the branch
    # stays on record: it was rolled back and forgotten.
    async with new_pools(pg, cluster_factory, timeout=2.0) as pools:
        c = pools.cluster
        g = gtrid_on(c, "RAC1", "settled")
        pid = None
        resume = None
        try:
            with pytest.raises(InDoubtError) as raised:
                async with pools.global_transaction(g, timeout=2.0) as gtx:
                    async with gtx.branch() as conn:
                        await conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
                        pid = conn.info.backend_pid
                        os.kill(pid, signal.SIGSTOP)
                        wait_until(lambda: _stopped(pid), 5)
                        # resumes while the rollback on exit waits for it to end
                        resume = threading.Timer(2.6, os.kill, (pid, signal.SIGCONT))
                        resume.start()
        finally:
            if resume is not None:
                resume.join()
            elif pid is not None:
                os.kill(pid, signal.SIGCONT)
        assert [b.state for b in gtx.branches] == ["rolled back"]
        assert live(c) == 0 and pools.in_doubt == {} and raised.value.branches == []
        text = str(raised.value)
        assert "stays on record" not in text and "rolled back" in text, text
        wait_until(lambda: not _backend_alive(pg.dsn["RAC1"], pid), 10)
        assert prepared_xacts(pg) == {n: [] for n in NAMES} and rows(pg)["RAC1"] == []

def _until_a_commit_waits(admin, dsn: str) -> None:
    """Returns once the server's commits wait for the standby (the reload
    reaches the checkpointer, which publishes it, a moment later)."""
    for _attempt in range(50):
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as probe:
            pid = probe.info.backend_pid
            t = threading.Thread(target=probe.execute, args=("CREATE TEMP TABLE racaffinity_probe ()",), daemon=True)
            t.start()
            while t.is_alive():
                if admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'SyncRep'",
                                 (pid,)).fetchone():
                    admin.execute("SELECT pg_cancel_backend(%s)", (pid,))  # it commits locally
                    t.join(10)
                    return
                time.sleep(0.02)
    pytest.fail("commits never waited for the synchronous standby")


@contextlib.contextmanager
def _commits_wait_for_a_missing_standby(pg):
    """Node RAC1's server waits for a synchronous standby that never comes
    on every commit of a session with synchronous_commit=on (its default):
    a COMMIT/ROLLBACK PREPARED sent then runs on the server and holds its
    prepared transaction without answering, as on a stalled host; a
    session with synchronous_commit=local does not wait."""
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as admin:
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'racaffinity_no_standby'")
        admin.execute("SELECT pg_reload_conf()")
        try:
            _until_a_commit_waits(admin, pg.dsn["RAC1"])
            yield
        finally:
            admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            admin.execute("SELECT pg_reload_conf()")
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_database_scope_ends_the_session_of_a_lost_answer_before_another_instance_finishes_the_branch(
    pg, cluster_factory, tables
):
    # Three instances of one database (node RAC1's server). The owner's
    # ROLLBACK PREPARED runs on the server but gets no answer within the
    # timeout: that session still holds the prepared transaction. Sent at
    # once through another instance, the same command met "prepared
    # transaction ... is busy" and the run reported the branch failed; the
    # old session must be ended first (as the node scope's next run does),
    # and then the branch is settled in this run.
    prepare_directly(pg.dsn["RAC1"], "rac-busy", "b0")
    dsns = {n: pg.dsn["RAC1"] + " options='-c synchronous_commit=local'" for n in NAMES}
    dsns["RAC1"] = pg.dsn["RAC1"] + " options='-c synchronous_commit=on'"
    with _commits_wait_for_a_missing_standby(pg):
        async with AsyncNodePools(cluster_factory(nodes=NAMES), dsns, min_size=0, max_size=2, timeout=2.0) as pools:
            c = pools.cluster
            report = await pools.recover_all("rollback", timeout=2.0, scope="database")
            assert [r.error for r in report.failed] == [] and report.ok, report
            assert [(r.gtrid, r.action) for r in report.resolved + report.resolved_elsewhere] == [
                ("rac-busy", "rollback")
            ], report
            assert prepared_xacts(pg)["RAC1"] == [] and rows(pg)["RAC1"] == []
            assert pools.in_doubt == {} and live(c) == 0 and in_flight(c) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(90)
async def test_database_scope_concludes_nothing_while_the_session_of_a_lost_answer_cannot_be_ended(
    pg, cluster_factory, tables
):
    # As above, and the old session's backend is also stopped (SIGSTOP)
    # while it holds the command: it cannot end within the timeout, so
    # nothing is concluded in this run (the command may still act); the
    # branch stays in doubt with its session, and a run after the backend
    # is gone settles it.
    prepare_directly(pg.dsn["RAC1"], "rac-stuck", "b0")
    dsns = {n: pg.dsn["RAC1"] + " options='-c synchronous_commit=local'" for n in NAMES}
    dsns["RAC1"] = pg.dsn["RAC1"] + " options='-c synchronous_commit=on'"
    stopped: list = []

    def stop_the_waiting_command() -> None:
        with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as admin:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                row = admin.execute("SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
                                    "AND query LIKE 'ROLLBACK PREPARED%'").fetchone()
                if row:
                    os.kill(row[0], signal.SIGSTOP)
                    stopped.append(row[0])
                    return
                time.sleep(0.01)

    async with AsyncNodePools(cluster_factory(nodes=NAMES), dsns, min_size=0, max_size=2, timeout=2.0) as pools:
        c = pools.cluster
        with _commits_wait_for_a_missing_standby(pg):
            stopper = threading.Thread(target=stop_the_waiting_command, daemon=True)
            stopper.start()
            try:
                report = await pools.recover_all("rollback", timeout=2.0, scope="database")
            finally:
                stopper.join(30)
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
        assert len(stopped) == 1
        xid = str(psycopg.Xid.from_parts(DEFAULT_FORMAT_ID, "rac-stuck", "b0"))
        assert report.sessions_running == {xid: stopped[0]} and not report.ok, report
        assert [r.gtrid for r in report.failed] == ["rac-stuck"] and report.resolved == [], report
        assert pools.in_doubt == {"rac-stuck": [xid]} and live(c) == 1
        # resumed, the backend ends (its pending termination) once it has carried the command out
        wait_until(lambda: not _backend_alive(pg.dsn["RAC1"], stopped[0]), 10)
        assert prepared_xacts(pg)["RAC1"] == [] and rows(pg)["RAC1"] == []
        report = await pools.recover_all("rollback", timeout=2.0, scope="database")
        assert report.ok and report.completed == ["rac-stuck"], report
        assert pools.in_doubt == {} and live(c) == 0 and in_flight(c) == 0

if not _ASYNC:  # Ctrl-C in the sync recovery (the async one is cancelled: test_async.py)

    @contextlib.contextmanager
    def _ctrl_c_when(ready: threading.Event):
        """Ctrl-C in this (the main) thread once `ready` is set, as the
        terminal's SIGINT reaches a program: the handler raises there."""
        def ctrl_c(*_):
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGALRM, ctrl_c)
        main = threading.main_thread().ident

        def deliver():
            if ready.wait(30):
                signal.pthread_kill(main, signal.SIGALRM)

        t = threading.Thread(target=deliver, daemon=True)
        t.start()
        try:
            yield
        finally:
            t.join(30)
            signal.signal(signal.SIGALRM, old)

    @pytest.mark.timeout(90)
    def test_a_ctrl_c_during_recover_all_stops_the_scans_and_leaves_no_gtrid_they_resolved_on_record(
        pg, cluster_factory, tables, monkeypatch
    ):
        # Node scope: Ctrl-C while RAC1's scan waits for its first ROLLBACK
        # PREPARED and RAC2's scan has resolved its branch. The scans are
        # threads and ran on, and nothing forgot the gtrids they had
        # recorded in the core's registry and resolved: those stayed on
        # record for good (no later run finds them prepared).
        from racaffinity import _tpc_async

        real_finish = _tpc_async._AsyncRecovery.finish
        hung, release, elsewhere = threading.Event(), threading.Event(), threading.Event()

        def finish(self, conn, node, xid):
            if node == 0 and not hung.is_set():
                hung.set()
                release.wait(30)
            real_finish(self, conn, node, xid)
            if node == 1:
                elsewhere.set()

        monkeypatch.setattr(_tpc_async._AsyncRecovery, "finish", finish)
        prepare_directly(pg.dsn["RAC1"], "ctrl-c-RAC1-a", "b0")
        prepare_directly(pg.dsn["RAC1"], "ctrl-c-RAC1-b", "b0")
        prepare_directly(pg.dsn["RAC2"], "ctrl-c-RAC2", "b0")
        both = threading.Event()
        threading.Thread(target=lambda: hung.wait(30) and elsewhere.wait(30) and both.set(), daemon=True).start()
        c = cluster_factory(nodes=NAMES)
        with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, timeout=5.0) as pools:
            with _ctrl_c_when(both):
                with pytest.raises(KeyboardInterrupt):
                    pools.recover_all("rollback", scope="node")
            release.set()  # the command under way runs to its answer
            wait_until(lambda: not any(t.name.startswith("racaffinity-recover-") for t in threading.enumerate()), 20)
            left = prepared_xacts(pg)
            # on record: what is still prepared, nothing the scans resolved
            assert live(c) == sum(len(x) for x in left.values()), left
            # RAC1's scan stopped before its next command: that branch is
            # left, prepared and on record, for the next run
            assert len(left["RAC1"]) == 1 and left["RAC2"] == [], left
            monkeypatch.undo()
            report = pools.recover_all("rollback", scope="node")
            assert report.ok and len(report.resolved) == 1, report
            assert prepared_xacts(pg) == {n: [] for n in NAMES} and live(c) == 0 and pools.in_doubt == {}

    @pytest.mark.timeout(90)
    @pytest.mark.parametrize("at", ["connect", "command"])
    def test_a_ctrl_c_during_a_database_scope_recover_all_leaves_no_gtrid_it_resolved_on_record(
        pg, cluster_factory, tables, monkeypatch, at
    ):
        # Database scope (the calling thread completes each xid): Ctrl-C at
        # the second xid's connect or command. The first xid's gtrid,
        # recorded and resolved, was never forgotten: on record for good.
        from racaffinity import _tpc_async

        for g in ("ctrl-c-db-1", "ctrl-c-db-2"):
            prepare_directly(pg.dsn["RAC1"], g, "b0")
        calls = []
        if at == "connect":
            real_connection = _tpc_async._node_connection

            def node_connection(pools, node, timeout):
                calls.append(node)
                if len(calls) == 3:  # the scan's, the first xid's, then the second xid's
                    raise KeyboardInterrupt
                return real_connection(pools, node, timeout)

            monkeypatch.setattr(_tpc_async, "_node_connection", node_connection)
        else:
            real_finish = _tpc_async._AsyncRecovery.finish

            def finish(self, conn, node, xid):
                calls.append(xid.gtrid)
                if len(calls) == 2:
                    raise KeyboardInterrupt
                real_finish(self, conn, node, xid)

            monkeypatch.setattr(_tpc_async._AsyncRecovery, "finish", finish)
        c = cluster_factory(nodes=NAMES)
        with AsyncNodePools(c, pg.dsn, min_size=0, max_size=2, timeout=5.0) as pools:
            with pytest.raises(KeyboardInterrupt):
                pools.recover_all("rollback", scope="database")
            assert len(prepared_xacts(pg)["RAC1"]) == 1
            monkeypatch.undo()
            report = pools.recover_all("rollback", scope="database")
            assert report.ok and len(report.resolved) == 1, report
            assert prepared_xacts(pg) == {n: [] for n in NAMES}
            assert live(c) == 0 and pools.in_doubt == {}


if _ASYNC:  # one test for both kinds: not in the generated file

    @pytest.mark.asyncio
    async def test_each_kind_of_pools_refuses_the_other_kinds_two_phase_commit(pg, cluster_factory):
        # The async pools' connections cannot serve the sync helper, nor the
        # reverse: a clear TypeError, never a hang or a coroutine never awaited.
        from racaffinity import _tpc_async, _tpc_sync
        from racaffinity.pools import NodePools

        async with new_pools(pg, cluster_factory) as apools:
            with pytest.raises(TypeError, match="NodePools"):
                _tpc_sync.GlobalTransaction(apools, "wrong-kind")
        spools = NodePools(cluster_factory(nodes=NAMES), pg.dsn, min_size=0, max_size=1)
        try:
            with pytest.raises(TypeError, match="AsyncNodePools"):
                _tpc_async.AsyncGlobalTransaction(spools, "wrong-kind")
        finally:
            spools.close()
