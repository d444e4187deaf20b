"""Request replay in the SQLAlchemy engine ([continuity]) over the 3 local
nodes: `create_engine(..., replay=True)` and `request(engine)` replay a
request a recoverable failure interrupted once elsewhere, through the same
walk as `NodePools.request()`; and the acceptance workload (a unique request
id inserted and read back, autocommit off, the session's node `kill -9`ed)
through NodePools and through the engine: 0 failed requests and every id
committed exactly once with replay on; failures with replay off."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import traceback
from typing import Any, Dict, List, Tuple

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

import racaffinity as ra
from racaffinity import ReplayRefusal as R
from racaffinity.pools import NodePools
from racaffinity.sqlalchemy import create_async_engine, create_engine, request

import faults
from conftest import NAMES, REPO, next_xid
from faults import key_on, terminate

INSERT = sa.text("INSERT INTO py_sreq VALUES (:id)")
COUNT = sa.text("SELECT count(*) FROM py_sreq WHERE id = :id")


def urls(pg, ports=None) -> Dict[str, str]:
    ports = ports or pg.port
    return {n: f"postgresql+psycopg://postgres@127.0.0.1:{ports[n]}/postgres" for n in NAMES}


@pytest.fixture
def sreq_table(pg):
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS py_sreq (id text PRIMARY KEY)")
            conn.execute("TRUNCATE py_sreq")


def rows_of(pg, rid) -> Dict[str, int]:
    """node name -> how many times request id `rid` is there (by SQL)."""
    return faults.rows_of(pg, rid, "py_sreq")


def test_a_request_killed_before_commit_is_replayed_once_elsewhere(pg, cluster_factory, sreq_table):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        with request(engine, key=key_on(c, "RAC1")) as req:
            req.execute(INSERT, {"id": "r1"})
            assert req.execute(COUNT, {"id": "r1"}).scalar_one() == 1
            assert req.node == "RAC1"
            terminate(pg, "RAC1", req.backend_pid)  # before COMMIT
        assert req.replays == 1 and req.outcome == "committed" and req.node != "RAC1"
        assert sorted(rows_of(pg, "r1").values()) == [0, 0, 1] and rows_of(pg, "r1")["RAC1"] == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()
    # the same without replay: the original error, its typed cause, no row
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=1)
    try:
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.execute(INSERT, {"id": "r2"})
                terminate(pg, "RAC1", req.backend_pid)
        assert isinstance(info.value.__cause__, ra.ReplayRefused)
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE
        assert sum(rows_of(pg, "r2").values()) == 0
    finally:
        engine.dispose()


def test_a_request_replays_on_the_engines_pool_after_an_engine_dispose(pg, cluster_factory, sreq_table):
    # engine.dispose() (another thread's, a fork's handler) replaces the
    # engine's pool while a request runs: its replay's checkout comes from
    # the new pool, whose lease the request read from the pool it began on
    # (KeyError instead of a replay).
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        with request(engine, key=key_on(c, "RAC1")) as req:
            req.execute(INSERT, {"id": "d1"})
            engine.dispose()
            terminate(pg, "RAC1", req.backend_pid)  # before COMMIT
        assert req.replays == 1 and req.outcome == "committed" and req.node != "RAC1"
        assert sorted(rows_of(pg, "d1").values()) == [0, 0, 1] and rows_of(pg, "d1")["RAC1"] == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


def test_a_request_used_after_its_failure_was_refused_says_its_connection_is_gone(pg, cluster_factory, sreq_table):
    # The application caught the refused failure inside the block and went
    # on: the request had closed its connection with the refusal, and the
    # next statement, and the block's end, met None where it was
    # (AttributeError).
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=1)  # replay off
    try:
        for more in (True, False):
            with pytest.raises(sa.exc.ResourceClosedError, match="connection is gone"):
                with request(engine, key=key_on(c, "RAC1")) as req:
                    req.execute(INSERT, {"id": f"g{more}"})
                    terminate(pg, "RAC1", req.backend_pid)
                    with pytest.raises(sa.exc.DBAPIError) as refused:
                        req.execute(COUNT, {"id": "x"})
                    assert refused.value.__cause__.refusal is R.NOT_REPLAYABLE
                    if more:
                        req.execute(COUNT, {"id": "x"})
            assert req.outcome is None and sum(rows_of(pg, f"g{more}").values()) == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


def test_a_request_used_after_its_block_ended_says_so(pg, cluster_factory, sreq_table):
    # As NodePools.request(): the block's end gave the connection back; a
    # statement after it is refused with why (not "an earlier failure").
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=0)
    try:
        for how in ("committed", "raised"):
            with contextlib.suppress(ValueError):
                with request(engine, key=key_on(c, "RAC1")) as req:
                    req.execute(INSERT, {"id": f"in-{how}"})
                    if how == "raised":
                        raise ValueError("the application's own error")
            with pytest.raises(sa.exc.ResourceClosedError, match="this request has ended"):
                req.execute(INSERT, {"id": f"late-{how}"})
            assert sum(rows_of(pg, f"late-{how}").values()) == 0
            assert sum(rows_of(pg, f"in-{how}").values()) == (how == "committed")
        assert engine.pool.checkedout() == 0 and all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


def test_a_request_inside_route_goes_to_the_routes_node(pg, cluster_factory, sreq_table):
    # route(key=) or route(session=) around a request's checkout, as around
    # any checkout: the request set its own (empty) route over it and went
    # where balancing sent it. Its own key= still wins.
    from racaffinity.sqlalchemy import route

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=2)
    try:
        for name in NAMES:
            session = next(f"s{i}" for i in range(10_000) if c.route_session(f"s{i}".encode()).name == name).encode()
            for j, around in enumerate((lambda: route(key=key_on(c, name)), lambda: route(session=session))):
                for i in range(3):  # balancing alone would spread them
                    with around():
                        with request(engine) as req:
                            req.execute(INSERT, {"id": f"rt-{name}-{j}-{i}"})
                    assert req.node == name, f"route #{j} around a request to {name}"
            other = next(n for n in NAMES if n != name)
            with route(key=key_on(c, other)):
                with request(engine, key=key_on(c, name)) as req:
                    req.execute(INSERT, {"id": f"own-{name}"})
            assert req.node == name
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


@pytest.mark.asyncio
async def test_an_asyncio_request_inside_route_goes_to_the_routes_node(pg, cluster_factory, sreq_table):
    from racaffinity.sqlalchemy import route

    async with replaying_async_engine(pg, cluster_factory) as (c, engine):
        for name in NAMES:
            for i in range(3):
                with route(key=key_on(c, name)):
                    async with request(engine) as req:
                        await req.execute(INSERT, {"id": f"art-{name}-{i}"})
                assert req.node == name


def test_only_the_requests_own_failure_blames_its_node(pg, cluster_factory, sreq_table, proxies):
    # A node-failure-shaped error leaving a request's block (a nested
    # request's lost connection, a refused connect to another service)
    # invalidated the request's own healthy connection with it, and the
    # request's node was counted failed: ejected after two.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES, health_eject_after_failures=2)
    ports = dict(pg.port, RAC1=proxies["RAC1"].port)
    k1, k2, k3 = (key_on(c, n) for n in NAMES)
    for replay in (False, True):
        engine = create_engine(c, urls(pg, ports), replay=replay, pool_size=1, max_overflow=1)
        try:
            if not replay:  # a nested request whose own node fails (replayed, it would not raise)
                for i in range(2):
                    with pytest.raises(sa.exc.OperationalError):
                        with request(engine, key=k2) as outer:
                            outer.execute(INSERT, {"id": f"outer-{i}"})
                            with request(engine, key=k1) as inner:
                                inner.execute(INSERT, {"id": f"inner-{i}"})
                                proxies["RAC1"].reset()  # RAC1's connections reset
                                time.sleep(0.2)
                                inner.execute(COUNT, {"id": "x"})
                    proxies["RAC1"].heal()
            for i in range(2):
                with pytest.raises(psycopg.OperationalError):
                    with request(engine, key=k3) as req:
                        req.execute(INSERT, {"id": f"other-{replay}-{i}"})
                        psycopg.connect("host=127.0.0.1 port=1 connect_timeout=2")  # another service
            failures = {n["name"]: n["failures"] for n in c.metrics()["nodes"]}
            assert failures == {"RAC1": 2, "RAC2": 0, "RAC3": 0}, f"replay={replay}"
            assert c.node_state("RAC2") is ra.NodeState.UP and c.node_state("RAC3") is ra.NodeState.UP
            assert sum(rows_of(pg, "outer-0").values()) == 0 and sum(rows_of(pg, f"other-{replay}-0").values()) == 0
            assert engine.pool.checkedout() == 0 and all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
        finally:
            engine.dispose()


@pytest.mark.asyncio
async def test_the_asyncio_engine_says_so_too(pg, cluster_factory, sreq_table):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_async_engine(c, urls(pg), pool_size=1, max_overflow=1)
    try:
        with pytest.raises(sa.exc.ResourceClosedError, match="connection is gone"):
            async with request(engine, key=key_on(c, "RAC1")) as req:
                await req.execute(INSERT, {"id": "ag"})
                terminate(pg, "RAC1", req.backend_pid)
                with pytest.raises(sa.exc.DBAPIError):
                    await req.execute(COUNT, {"id": "x"})
        assert req.outcome is None and sum(rows_of(pg, "ag").values()) == 0
    finally:
        await engine.dispose()


def shows_the_driver_error(exc: BaseException) -> bool:
    """Whether the traceback of `exc` shows the driver's error (`.orig`) as
    an exception of its own, with its traceback, not only as the text that
    SQLAlchemy's message quotes."""
    chain, e = [], exc
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__
    orig = exc.orig
    printed = "".join(traceback.format_exception(exc))
    return orig in chain and f"\n{type(orig).__module__}.{type(orig).__qualname__}: " in printed


def unique_violation(pg, c, engine, rid: str):
    """A request on RAC1 inserting `rid`, which RAC1 already holds: the
    application's own error, never replayed (`NOT_RECOVERABLE`). Returns
    pytest's info on the error and the request."""
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as admin:
        admin.execute("INSERT INTO py_sreq VALUES (%s)", (rid,))
    with pytest.raises(sa.exc.IntegrityError) as info:
        with request(engine, key=key_on(c, "RAC1")) as req:
            req.execute(INSERT, {"id": rid})
    assert info.value.__cause__.refusal is R.NOT_RECOVERABLE
    return info, req


def test_a_refusal_keeps_the_driver_error_in_the_traceback(pg, cluster_factory, sreq_table):
    # The refusal is the SQLAlchemy error's __cause__, which was the
    # driver's error: that one must stay in the chain, as the refusal's.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        info, _req = unique_violation(pg, c, engine, "taken")
        assert info.value.__cause__.__cause__ is info.value.orig
        assert isinstance(info.value.orig, psycopg.errors.UniqueViolation)
        assert shows_the_driver_error(info.value)
    finally:
        engine.dispose()
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=1)  # replay off
    try:
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.execute(INSERT, {"id": "t2"})
                terminate(pg, "RAC1", req.backend_pid)
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE
        assert info.value.__cause__.__cause__ is info.value.orig
        assert shows_the_driver_error(info.value)
    finally:
        engine.dispose()


def test_a_statement_whose_session_died_is_replayed_with_those_before_it(pg, cluster_factory, sreq_table):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        with request(engine, key=key_on(c, "RAC2")) as req:
            req.execute(INSERT, {"id": "a"})
            terminate(pg, "RAC2", req.backend_pid)
            req.execute(INSERT, {"id": "b"})  # fails, replayed with "a" elsewhere
            assert req.execute(sa.text("SELECT count(*) FROM py_sreq")).scalar_one() == 2
        assert req.replays == 1 and req.node != "RAC2"
        assert rows_of(pg, "a") == rows_of(pg, "b") and sum(rows_of(pg, "a").values()) == 1
    finally:
        engine.dispose()


def test_a_read_only_request_is_given_no_transaction_id_and_its_lost_commit_is_replayed(
    pg, cluster_factory, sreq_table, proxies
):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        before = next_xid(pg, "RAC3")
        for _ in range(20):
            with request(engine, key=key_on(c, "RAC3")) as req:
                assert req.execute(COUNT, {"id": "ro"}).scalar_one() == 0
        used = next_xid(pg, "RAC3") - before
        assert used <= 2, f"20 read-only requests took {used} transaction ids"
    finally:
        engine.dispose()
    engine = create_engine(c, urls(pg, dict(pg.port, RAC1=proxies["RAC1"].port)), replay=True,
                           pool_size=1, max_overflow=1)
    try:
        with request(engine, key=key_on(c, "RAC1")) as req:
            assert req.execute(COUNT, {"id": "ro"}).scalar_one() == 0
            proxies["RAC1"].lose_reply_after(b"COMMIT", then_refuse=True)
        assert proxies["RAC1"].reply_lost
        assert req.replays == 1 and req.outcome == "committed" and req.node != "RAC1"
    finally:
        engine.dispose()


def test_errors_that_are_not_recoverable_and_differing_results_are_never_replayed(pg, cluster_factory, sreq_table):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        _info, req = unique_violation(pg, c, engine, "only-on-rac1")
        assert req.replays == 0
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                assert req.execute(sa.text("SELECT count(*) FROM py_sreq")).scalar_one() == 1  # consumed
                req.execute(INSERT, {"id": "r5"})
                terminate(pg, "RAC1", req.backend_pid)
        assert info.value.__cause__.reason == "results_differ" and info.value.__cause__.refusal is None
        assert sum(rows_of(pg, "r5").values()) == 0
        # what ran on req.connection is not recorded: never replayed
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.connection.execute(INSERT, {"id": "r6"})
                terminate(pg, "RAC1", req.backend_pid)
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE
        assert sum(rows_of(pg, "r6").values()) == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


def test_a_request_whose_node_is_gone_before_its_first_checkout_starts_elsewhere(
    pg, cluster_factory, sreq_table, proxies
):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    ports = dict(pg.port, RAC1=proxies["RAC1"].port)
    proxies["RAC1"].refuse()
    engine = create_engine(c, urls(pg, ports), replay=True, pool_size=1, max_overflow=1)
    try:
        with request(engine, key=key_on(c, "RAC1")) as req:
            req.execute(INSERT, {"id": "s1"})
        assert req.replays == 1 and req.node != "RAC1"
        assert sum(rows_of(pg, "s1").values()) == 1
    finally:
        engine.dispose()
    engine = create_engine(c, urls(pg, ports), pool_size=1, max_overflow=1)
    try:
        with pytest.raises(sa.exc.OperationalError):
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.execute(INSERT, {"id": "s2"})
    finally:
        engine.dispose()


def test_a_replay_whose_connection_cannot_be_made_is_refused_no_node_not_replayed_already(
    pg, cluster_factory, sreq_table, proxies
):
    # The nodes the core may name for the replay refuse connections (their
    # pools hold none yet): nothing ran again, so the refusal is no_node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    ports = dict(pg.port, RAC2=proxies["RAC2"].port, RAC3=proxies["RAC3"].port)
    engine = create_engine(c, urls(pg, ports), replay=True, pool_size=1, max_overflow=1,
                           connect_args={"connect_timeout": 2})
    try:
        with pytest.raises(sa.exc.OperationalError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.execute(INSERT, {"id": "snc1"})
                proxies["RAC2"].refuse()
                proxies["RAC3"].refuse()
                terminate(pg, "RAC1", req.backend_pid)  # before COMMIT
        refused = info.value.__cause__
        assert isinstance(refused, ra.ReplayRefused), info.value
        assert refused.refusal is R.NO_NODE, refused
        assert refused.reason.startswith("no node could take the replay: "), refused.reason
        assert isinstance(refused.__cause__, Exception), "the connect error is attached"
        assert req.replays == 0
        assert sum(rows_of(pg, "snc1").values()) == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        proxies["RAC2"].heal()
        proxies["RAC3"].heal()
        engine.dispose()


@contextlib.asynccontextmanager
async def replaying_async_engine(pg, cluster_factory):
    """An asyncio engine with replay over the three nodes (one connection
    each, one overflow), and its cluster; disposed on leaving."""
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_async_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        yield c, engine
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_the_asyncio_engine_replays_the_same_way(pg, cluster_factory, sreq_table):
    async with replaying_async_engine(pg, cluster_factory) as (c, engine):
        async with request(engine, key=key_on(c, "RAC3")) as req:
            await req.execute(INSERT, {"id": "ar"})
            assert (await req.execute(COUNT, {"id": "ar"})).scalar_one() == 1
            terminate(pg, "RAC3", req.backend_pid)
        assert req.replays == 1 and req.node != "RAC3"
        assert sum(rows_of(pg, "ar").values()) == 1 and rows_of(pg, "ar")["RAC3"] == 0


@pytest.mark.asyncio
async def test_the_asyncio_request_gives_its_connection_as_the_sync_one_does(pg, cluster_factory, sreq_table):
    # The sync request's `req.connection` (what an ORM session binds to) had
    # no asyncio counterpart: AttributeError. It is the request's connection
    # as an AsyncConnection, in the request's transaction; reading it makes
    # the request not replayable, as the sync one's does; None once ended.
    async with replaying_async_engine(pg, cluster_factory) as (c, engine):
        async with request(engine, key=key_on(c, "RAC3")) as req:
            conn = req.connection
            assert isinstance(conn, AsyncConnection) and req.connection is conn
            await conn.execute(INSERT, {"id": "ac1"})
            async with AsyncSession(bind=conn) as orm:
                await orm.execute(INSERT, {"id": "ac2"})
            assert (await req.execute(sa.text("SELECT count(*) FROM py_sreq"))).scalar_one() == 2
            assert conn.sync_connection.in_transaction()
        assert req.outcome == "committed" and req.connection is None
        assert rows_of(pg, "ac1") == rows_of(pg, "ac2") == {"RAC1": 0, "RAC2": 0, "RAC3": 1}
        # what ran on it is not recorded: never replayed
        with pytest.raises(sa.exc.DBAPIError) as info:
            async with request(engine, key=key_on(c, "RAC3")) as req:
                await req.connection.execute(INSERT, {"id": "ac3"})
                terminate(pg, "RAC3", req.backend_pid)
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE
        assert sum(rows_of(pg, "ac3").values()) == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])


def test_a_request_runs_once(pg, cluster_factory, sreq_table):
    # A request entered again kept its first run's record: a replay of the
    # second run ran the first run's INSERT again on the other node, which
    # committed it twice; entered again while entered, it checked out a
    # second connection in the first one's place.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        req = request(engine, key=key_on(c, "RAC1"))
        with req:
            with pytest.raises(RuntimeError, match="already entered"):
                req.__enter__()
            req.execute(INSERT, {"id": "once-1"})
        assert req.outcome == "committed"
        with pytest.raises(RuntimeError, match="already entered"):
            with req:
                req.execute(INSERT, {"id": "once-2"})
                terminate(pg, "RAC1", req.backend_pid)  # before COMMIT: a replay
        assert rows_of(pg, "once-1") == {"RAC1": 1, "RAC2": 0, "RAC3": 0}
        assert sum(rows_of(pg, "once-2").values()) == 0
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
        assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()


@pytest.mark.asyncio
async def test_the_asyncio_engines_request_runs_once(pg, cluster_factory, sreq_table):
    async with replaying_async_engine(pg, cluster_factory) as (c, engine):
        req = request(engine, key=key_on(c, "RAC1"))
        async with req:
            await req.execute(INSERT, {"id": "aonce-1"})
        with pytest.raises(RuntimeError, match="already entered"):
            async with req:
                await req.execute(INSERT, {"id": "aonce-2"})
        assert rows_of(pg, "aonce-1") == {"RAC1": 1, "RAC2": 0, "RAC3": 0}
        assert sum(rows_of(pg, "aonce-2").values()) == 0

def test_replay_needs_a_postgresql_engine_of_the_cluster(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    with pytest.raises(ValueError, match="PostgreSQL"):
        create_engine(c, {n: "sqlite://" for n in NAMES}, replay=True)
    with pytest.raises(TypeError, match="bool"):
        create_engine(c, urls(pg), replay="yes")
    with pytest.raises(TypeError, match="create_engine"):
        request(sa.create_engine(urls(pg)["RAC1"]))
    engine = create_engine(c, urls(pg))
    with pytest.raises(ValueError, match="call_timeout"):
        request(engine, call_timeout=0)
    engine.dispose()


def test_a_request_after_a_checkout_set_autocommit_rolls_back_on_the_applications_error(
    pg, cluster_factory, sreq_table
):
    # NodePools gave a connection back as its borrower left it (in
    # autocommit: the next request committed whatever its block raised).
    # The engine's pool does not: SQLAlchemy puts back on checkin an
    # isolation level set through `execution_options`.
    from racaffinity.sqlalchemy import route

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=0, pool_timeout=2)
    key = key_on(c, "RAC1")  # one connection per node: the request gets the earlier checkout's
    try:
        with route(key=key):
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.exec_driver_sql("SELECT 1")
        with pytest.raises(ValueError):
            with request(engine, key=key) as req:
                req.execute(INSERT, {"id": "sa-left"})
                raise ValueError("the application's own error: nothing may be committed")
        assert rows_of(pg, "sa-left")["RAC1"] == 0, "the block raised, yet its row is committed"
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


@pytest.mark.parametrize("lost_at", ["statement", "commit"])
def test_a_transaction_an_error_aborted_is_never_replayed_into_a_commit(pg, cluster_factory, sreq_table, lost_at):
    # The application caught a unique violation and went on without a
    # ROLLBACK TO SAVEPOINT: its transaction can only roll back. Its
    # connection then lost, a replay of the statements that succeeded
    # would commit them on another node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.execute(INSERT, {"id": "sab"})
                with pytest.raises(sa.exc.IntegrityError):
                    req.execute(INSERT, {"id": "sab"})
                terminate(pg, "RAC1", req.backend_pid)
                if lost_at == "statement":
                    req.execute(sa.text("SELECT 1"))
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE
        assert sum(rows_of(pg, "sab").values()) == 0, "a transaction an error aborted was committed by its replay"
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
        # Rolled back to its savepoint (after a second error in the aborted
        # transaction), it is whole again: replayed.
        with request(engine, key=key_on(c, "RAC1")) as req:
            req.execute(sa.text("SAVEPOINT s"))
            with pytest.raises(sa.exc.IntegrityError):
                req.execute(sa.text("INSERT INTO py_sreq VALUES ('sab2'), ('sab2')"))
            with pytest.raises(sa.exc.InternalError):
                req.execute(sa.text("SELECT 1"))
            req.execute(sa.text("ROLLBACK TO SAVEPOINT s"))
            req.execute(INSERT, {"id": "sab3"})
            terminate(pg, "RAC1", req.backend_pid)
        assert req.replays == 1 and sum(rows_of(pg, "sab3").values()) == 1
    finally:
        engine.dispose()


@pytest.fixture
def sdup_table(pg):
    # No key: a write committed twice shows as two rows.
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("DROP TABLE IF EXISTS py_sdup")
            conn.execute("CREATE TABLE py_sdup (id text)")


def dups_on_rac1(pg, rid) -> int:
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as conn:
        return conn.execute("SELECT count(*) FROM py_sdup WHERE id = %s", (rid,)).fetchone()[0]


def one_database_urls(pg) -> Dict[str, str]:
    """Three instance names over node 1 (the RAC model): a replay writes
    where the original did, so a write committed twice is counted twice."""
    return urls(pg, {n: pg.port["RAC1"] for n in NAMES})


def test_replay_refuses_autocommit_engines(pg, cluster_factory, sdup_table):
    # Autocommit commits each statement as it runs: a replay commits them again.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES, recovery_scope="database")
    for kw in ({"isolation_level": "AUTOCOMMIT"}, {"execution_options": {"isolation_level": "AUTOCOMMIT"}}):
        with pytest.raises(ValueError, match="AUTOCOMMIT"):
            create_engine(c, one_database_urls(pg), replay=True, **kw)
    engine = create_engine(c, one_database_urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")  # where create_engine cannot see it
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(autocommit, key=key_on(c, "RAC1")) as req:
                req.execute(sa.text("INSERT INTO py_sdup VALUES ('ac')"))
                terminate(pg, "RAC1", req.backend_pid)
                req.execute(sa.text("SELECT 1"))
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE and req.replays == 0
        assert dups_on_rac1(pg, "ac") == 1
        assert all(n["in_flight"] == 0 for n in c.metrics()["nodes"])
    finally:
        engine.dispose()


@pytest.mark.parametrize("statement", ["COMMIT", "end work", "ROLLBACK", "PREPARE TRANSACTION 'py_sdup'"])
def test_a_transaction_control_statement_makes_the_request_not_replayable(
    pg, cluster_factory, sdup_table, statement
):
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES, recovery_scope="database")
    engine = create_engine(c, one_database_urls(pg), replay=True, pool_size=1, max_overflow=1)
    try:
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                req.execute(sa.text("INSERT INTO py_sdup VALUES ('tc')"))
                req.execute(sa.text(statement))
                terminate(pg, "RAC1", req.backend_pid)
                req.execute(sa.text("SELECT 1"))
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE and req.replays == 0
        assert dups_on_rac1(pg, "tc") == (0 if statement.startswith(("ROLLBACK", "PREPARE")) else 1)
    finally:
        engine.dispose()
        with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as conn:
            if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = 'py_sdup'").fetchone():
                conn.execute("ROLLBACK PREPARED 'py_sdup'")


@pytest.fixture
def alt_sreq_table(pg, sreq_table):
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CREATE SCHEMA IF NOT EXISTS alt")
            conn.execute("CREATE TABLE IF NOT EXISTS alt.py_sreq (id text PRIMARY KEY)")
            conn.execute("TRUNCATE alt.py_sreq")


def alt_rows(pg, rid) -> int:
    total = 0
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            total += conn.execute("SELECT count(*) FROM alt.py_sreq WHERE id = %s", (rid,)).fetchone()[0]
    return total


def test_session_state_set_by_text_in_an_earlier_request_refuses_a_replay_on_its_connection(
    pg, cluster_factory, alt_sreq_table
):
    # The engine's pool lends the connection again as the earlier request
    # left its session (its reset on return is a rollback).
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), replay=True, pool_size=1, max_overflow=0)
    try:
        with request(engine, key=key_on(c, "RAC1")) as req:
            req.execute(sa.text("SET search_path TO alt"))
            pid = req.backend_pid
        with pytest.raises(sa.exc.DBAPIError) as info:
            with request(engine, key=key_on(c, "RAC1")) as req:
                assert req.backend_pid == pid, "the same connection, as the pool's one"
                req.execute(INSERT, {"id": "sss1"})  # alt.py_sreq, on this session
                terminate(pg, "RAC1", req.backend_pid)
        assert info.value.__cause__.refusal is R.NOT_REPLAYABLE and req.replays == 0
        assert "session state set by SQL text" in info.value.__cause__.reason
    finally:
        engine.dispose()
    assert sum(rows_of(pg, "sss1").values()) == 0, "written where the application's session never wrote"
    assert alt_rows(pg, "sss1") == 0


# -- the acceptance workload: NodePools and the engine, kill -9 of the session's node --

# Where each episode's kill lands: before the request (its pooled connection
# is dead), between its two statements, or after them, before COMMIT. A kill
# during COMMIT is the failure matrix's (test_replay_matrix.py): on
# independent nodes only the killed node could tell its outcome.
EPISODES = ["between", "mid", "before_commit"]
PER_EPISODE = 6
SESSION = b"web-session-1"


class PoolsWork:
    def __init__(self, c, pg, replay: bool) -> None:
        # The heartbeat, as fast connection failover is configured: a node
        # back from a kill has its pool made anew when it is Up. Without it
        # the pool of a restarted node may be in psycopg_pool's reconnect
        # back-off (1, 2, 4 s ...) when a replay is sent there, and the
        # replay's borrow times out (seen with timeout=1.0: 4 of 18 failed).
        self.pools = NodePools(c, pg.dsn, replay=replay, min_size=1, max_size=2, timeout=2.0,
                               heartbeat=True, heartbeat_interval=0.2, connect_kwargs={"connect_timeout": 2})

    def close(self) -> None:
        self.pools.close()

    def request(self):
        return self.pools.request(session=SESSION, call_timeout=2.0)

    def insert(self, req, rid):
        req.execute("INSERT INTO py_sreq VALUES (%s)", (rid,))

    def read(self, req, rid):
        return req.execute("SELECT id FROM py_sreq WHERE id = %s", (rid,)).fetchall()


class SqlaWork:
    def __init__(self, c, pg, replay: bool) -> None:
        self.engine = create_engine(c, urls(pg), replay=replay, pool_size=2, max_overflow=0, pool_timeout=5,
                                    connect_args={"connect_timeout": 2})

    def close(self) -> None:
        self.engine.dispose()

    def request(self):
        return request(self.engine, session=SESSION, call_timeout=2.0)

    def insert(self, req, rid):
        req.execute(INSERT, {"id": rid})

    def read(self, req, rid):
        return req.execute(sa.text("SELECT id FROM py_sreq WHERE id = :id"), {"id": rid}).all()


class AsyncSqlaWork:
    """The asyncio engine, driven from the workload's thread: its loop runs
    on a thread of its own and each call waits for its coroutine."""

    def __init__(self, c, pg, replay: bool) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="workload-loop", daemon=True)
        self.thread.start()
        self.engine = self.run(self._make(c, pg, replay))

    @staticmethod
    async def _make(c, pg, replay):
        return create_async_engine(c, urls(pg), replay=replay, pool_size=2, max_overflow=0, pool_timeout=5,
                                   connect_args={"connect_timeout": 2})

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        try:
            self.run(self.engine.dispose())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)

    @contextlib.contextmanager
    def request(self):
        areq = request(self.engine, session=SESSION, call_timeout=2.0)
        self.run(areq.__aenter__())
        try:
            yield areq
        except BaseException as e:
            self.run(areq.__aexit__(type(e), e, e.__traceback__))
            raise
        self.run(areq.__aexit__(None, None, None))

    def insert(self, req, rid):
        self.run(req.execute(INSERT, {"id": rid}))

    def read(self, req, rid):
        return self.run(req.execute(sa.text("SELECT id FROM py_sreq WHERE id = :id"), {"id": rid})).all()


WORK = {"pools": lambda: PoolsWork, "sqlalchemy": lambda: SqlaWork, "sqlalchemy-asyncio": lambda: AsyncSqlaWork}


def run_workload(pg, c, work, prefix: str, killed: List[int]) -> Tuple[List[str], List[Tuple[str, str]], int]:
    """Runs every episode; returns (ids that succeeded, (id, error) of the
    failed ones, replays)."""
    ok: List[str] = []
    failed: List[Tuple[str, str]] = []
    replays = 0
    last_start = None  # the node the last request started on: the session's
    for ep, where in enumerate(EPISODES):
        victim = None
        for i in range(PER_EPISODE):
            rid = f"{prefix}-{ep}-{i}"
            kill_here = i == 2
            if kill_here and where == "between" and last_start is not None:
                victim = NAMES.index(last_start) + 1
                pg.kill(victim)
                killed.append(victim)
            req = None
            try:
                with work.request() as req:
                    start = req.node
                    work.insert(req, rid)
                    if kill_here and where == "mid":
                        victim = NAMES.index(req.node) + 1
                        pg.kill(victim)
                        killed.append(victim)
                    assert [tuple(r) for r in work.read(req, rid)] == [(rid,)]
                    if kill_here and where == "before_commit":
                        victim = NAMES.index(req.node) + 1
                        pg.kill(victim)
                        killed.append(victim)
                ok.append(rid)
                last_start = start
            except AssertionError:
                # A request that did not read its own write is a wrong answer,
                # not a kill's failure: counted with those, replay off (whose
                # failures are expected) passed whatever the read returned.
                raise
            except Exception as e:  # counted: the run's figure
                failed.append((rid, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            replays += getattr(req, "replays", 0) or 0
            time.sleep(0.02)
        while killed:
            pg.restart(killed.pop())
    return ok, failed, replays


@pytest.mark.parametrize("api", sorted(WORK))
def test_the_workload_survives_kills_of_the_sessions_node_exactly_once(
    pg, cluster_factory, sreq_table, restart_after, api
):
    figures: Dict[str, Any] = {}
    for replay in (True, False):
        c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
        work = WORK[api]()(c, pg, replay)
        prefix = f"{api}-{'on' if replay else 'off'}"
        try:
            ok, failed, replays = run_workload(pg, c, work, prefix, restart_after)
        finally:
            work.close()
        counts = {rid: sum(rows_of(pg, rid).values()) for rid in ok + [f for f, _ in failed]}
        figures[prefix] = {"requests": len(ok) + len(failed), "failed": len(failed), "replays": replays,
                           "errors": sorted({e for _r, e in failed})}
        # exactly once for every success, at most once for a failure (by SQL)
        assert all(counts[rid] == 1 for rid in ok), {r: counts[r] for r in ok if counts[r] != 1}
        assert all(counts[rid] <= 1 for rid, _e in failed), failed
        if replay:
            assert not failed and replays >= len(EPISODES), figures
        else:
            assert failed, ("replay off must show the kills' failures (the control)", figures)
    out = REPO / "target" / "continuity"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"python-workload-{api}.json").write_text(json.dumps(figures, indent=1))
