"""racaffinity.sqlalchemy over the 3 local nodes: ORM sessions routed by
the core (balancing, pin, data key, web session, global transaction with
SQLAlchemy's two-phase commit), SQLAlchemy's pool events and pre-ping on
every node's pool, a node killed mid-run, and the asyncio engine."""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections import Counter

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import racaffinity as ra
from racaffinity.sqlalchemy import RoutingPool, create_async_engine, create_engine, route

from conftest import NAMES, in_a_forked_child, prepared_xacts
from faults import key_on


class Model(DeclarativeBase):
    pass


class Order(Model):
    __tablename__ = "py_sqla_orders"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    note: Mapped[str]


PORT = sa.text("SELECT inet_server_port()")


def urls(pg, driver: str = "postgresql+psycopg") -> dict:
    return {n: f"{driver}://postgres@127.0.0.1:{pg.port[n]}/postgres" for n in NAMES}


@pytest.fixture
def orders(pg):
    """An empty orders table on every node."""
    for u in urls(pg).values():
        e = sa.create_engine(u, poolclass=sa.NullPool)
        Model.metadata.drop_all(e)
        Model.metadata.create_all(e)
        e.dispose()
    yield
    for u in urls(pg).values():
        e = sa.create_engine(u, poolclass=sa.NullPool)
        with e.connect() as conn:
            for (gid,) in conn.execute(sa.text("SELECT gid FROM pg_prepared_xacts")).fetchall():
                conn.execute(sa.text(f"ROLLBACK PREPARED '{gid}'"))
            conn.commit()
        e.dispose()


def node_of_conn(pg, conn) -> str:
    return pg.name_of_port(conn.execute(PORT).scalar_one())



def node_of(pg, s: Session) -> str:
    return pg.name_of_port(s.execute(PORT).scalar_one())


def in_flight(c: ra.Cluster) -> int:
    return sum(n["in_flight"] for n in c.metrics()["nodes"])


def test_orm_sessions_are_routed_by_the_core(pg, cluster_factory, orders):
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=2, max_overflow=2)
    try:
        assert isinstance(engine.pool, RoutingPool)
        # balanced: every node serves some sessions
        seen = Counter()
        for _ in range(60):
            with Session(engine) as s:
                seen[node_of(pg, s)] += 1
        assert set(seen) == set(NAMES)
        # a pin keeps every checkout on one node
        with c.pin():
            pinned = set()
            for _ in range(20):
                with Session(engine) as s:
                    pinned.add(node_of(pg, s))
        assert len(pinned) == 1
        # a data key goes to its owner; the row lands there
        for k in range(12):
            owner = c.route_key(k).name
            with route(key=k), Session(engine) as s:
                assert node_of(pg, s) == owner
                s.add(Order(id=k, note=f"key {k}"))
                s.commit()
        for name, u in urls(pg).items():
            e = sa.create_engine(u, poolclass=sa.NullPool)
            with e.connect() as conn:
                ids = [r[0] for r in conn.execute(sa.text("SELECT id FROM py_sqla_orders"))]
            e.dispose()
            assert sorted(ids) == sorted(k for k in range(12) if c.route_key(k).name == name)
        # a web session keeps its node
        with route(session="user-7"):
            nodes = set()
            for _ in range(10):
                with Session(engine) as s:
                    nodes.add(node_of(pg, s))
        assert len(nodes) == 1
        with pytest.raises(TypeError):
            with route(key=1, session="both"):
                pass
        assert in_flight(c) == 0
        assert sum(n["successes"] for n in c.metrics()["nodes"]) >= 60 + 20 + 12 + 10
    finally:
        engine.dispose()


def test_a_global_transaction_keeps_every_branch_on_its_node_with_two_phase_commit(pg, cluster_factory, orders):
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg))
    try:
        for i in range(6):
            gtrid = f"sqla-order-{i}"
            with c.transaction(gtrid.encode()):
                owner = c.tx_route(gtrid.encode()).name
                branches = []
                for b in range(2):  # two branches, two connections, one node
                    conn = engine.connect()
                    xa = conn.begin_twophase(f"{gtrid}.b{b}")
                    assert pg.name_of_port(conn.execute(PORT).scalar_one()) == owner
                    conn.execute(sa.insert(Order.__table__).values(id=10 * i + b, note=gtrid))
                    xa.prepare()
                    branches.append((conn, xa))
                assert sorted(prepared_xacts(pg)[owner]) == [f"{gtrid}.b0", f"{gtrid}.b1"]
                for conn, xa in branches:
                    xa.commit()
                    conn.close()
            assert prepared_xacts(pg)[owner] == []
        assert c.metrics()["scopes"]["transaction"]["live"] == 0
        assert in_flight(c) == 0
    finally:
        engine.dispose()


def test_pool_events_and_pre_ping_work_on_every_nodes_pool(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0, pool_pre_ping=True)
    connects, checkouts = Counter(), []
    try:

        @event.listens_for(engine, "connect")
        def on_connect(dbapi_conn, rec):
            with dbapi_conn.cursor() as cur:
                cur.execute("SELECT inet_server_port()")
                connects[pg.name_of_port(cur.fetchone()[0])] += 1

        for _ in range(30):
            with engine.connect() as conn:
                conn.execute(PORT)
        assert set(connects) == set(NAMES) and all(v == 1 for v in connects.values()), connects

        # a listener added once the node pools exist fires for them too
        event.listen(engine, "checkout", lambda dbapi_conn, rec, proxy: checkouts.append(1))
        with engine.connect() as conn:
            conn.execute(PORT)
        assert checkouts == [1]

        # pre-ping: a connection the server ended is replaced at checkout
        e = sa.create_engine(urls(pg)["RAC1"], poolclass=sa.NullPool)
        with e.connect() as admin:
            admin.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE pid <> pg_backend_pid() AND application_name = '' AND backend_type = 'client backend' "
                                  "AND datname = 'postgres' AND state = 'idle'"))
        e.dispose()
        failures = sum(n["failures"] for n in c.metrics()["nodes"])
        for _ in range(30):
            with engine.connect() as conn:
                conn.execute(PORT)  # never the terminated connection
        assert connects["RAC1"] == 2, connects  # RAC1's pool reconnected once
        assert sum(n["failures"] for n in c.metrics()["nodes"]) == failures, "a stale connection is not the node's failure"
        assert in_flight(c) == 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", ["terminated", "invalidate"])
def test_sessions_ended_on_a_healthy_node_never_eject_it(pg, cluster_factory, how):
    # One session terminated by an operator (57P01 from pg_terminate_backend)
    # or an application's own Connection.invalidate() is not the node's
    # failure: 5 of them (the ejection threshold) leave the node Up with 0
    # failures, as NodePools and Java do.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    admin = sa.create_engine(urls(pg)["RAC1"], poolclass=sa.NullPool)
    try:
        for _ in range(5):
            with route(key=key_on(c, "RAC1")):
                with engine.connect() as conn:
                    assert node_of_conn(pg, conn) == "RAC1"
                    if how == "invalidate":
                        conn.invalidate()
                        continue
                    pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                    with admin.connect() as a:
                        a.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                    with pytest.raises(sa.exc.OperationalError):
                        conn.execute(PORT)
        m = next(n for n in c.metrics()["nodes"] if n["name"] == "RAC1")
        assert c.node_state("RAC1") == ra.NodeState.UP and m["failures"] == 0, m
        assert in_flight(c) == 0
    finally:
        admin.dispose()
        engine.dispose()


def test_a_node_killed_mid_run_is_ejected_and_work_goes_on_elsewhere(pg, cluster_factory, orders, restart_after):
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=2, health_eject_backoff="60s",
                        health_eject_backoff_max="60s")
    engine = create_engine(c, urls(pg), pool_size=2, max_overflow=2, pool_pre_ping=True,
                           connect_args={"connect_timeout": 2})
    stop = threading.Event()
    results = []  # (monotonic time, node or None, error)
    ids = iter(range(1_000_000))
    lock = threading.Lock()

    def worker():
        while not stop.is_set():
            with lock:
                i = next(ids)
            try:
                with Session(engine) as s:
                    node = node_of(pg, s)
                    s.add(Order(id=i, note="run"))
                    s.commit()
                results.append((time.monotonic(), node, None))
            except sa.exc.DBAPIError as e:
                results.append((time.monotonic(), None, e))
            time.sleep(0.005)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(3)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        restart_after.append(2)
        pg.kill(2)
        killed = time.monotonic()
        deadline = killed + 30
        while c.node_state("RAC2") != ra.NodeState.DOWN and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.node_state("RAC2") == ra.NodeState.DOWN, "RAC2 was never ejected"
        ejected = time.monotonic()
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    errors = [r for r in results if r[2] is not None]
    assert errors, "the kill was never felt"
    assert len(errors) <= 2 * 3 + 3, f"{len(errors)} failed sessions for one dead node"
    after = [r for r in results if r[0] > ejected + 0.5]
    assert after and all(r[2] is None and r[1] != "RAC2" for r in after), after[:5]
    assert c.metrics()["nodes"][1]["ejections"] == 1
    assert in_flight(c) == 0
    engine.dispose()


def test_a_full_node_pool_times_out_without_counting_against_the_node(pg, cluster_factory):
    # The application holds the node's only connection: the next checkout
    # waits pool_timeout and fails, which says nothing about the node.
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=1)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0, pool_timeout=0.3)
    try:
        with c.pin():
            held = engine.connect()
            node = pg.name_of_port(held.execute(PORT).scalar_one())
            with pytest.raises(sa.exc.TimeoutError):
                engine.connect()
            held.close()
            with engine.connect() as conn:
                assert pg.name_of_port(conn.execute(PORT).scalar_one()) == node
        m = c.metrics()
        assert sum(n["failures"] for n in m["nodes"]) == 0, m["nodes"]
        assert c.node_state(node) == ra.NodeState.UP
        assert in_flight(c) == 0
    finally:
        engine.dispose()


def test_a_node_refusing_connections_fails_the_checkout_and_counts_against_it(pg, cluster_factory, restart_after):
    # No pooled connection yet and the node is gone: the new connection
    # fails, the checkout raises, and the lease says the node failed.
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=1, health_eject_backoff="60s")
    engine = create_engine(c, urls(pg), connect_args={"connect_timeout": 2})
    try:
        restart_after.append(3)
        pg.kill(3)
        with route(key=next(k for k in range(10_000) if c.route_key(k).name == "RAC3")):
            with pytest.raises(sa.exc.OperationalError):
                with engine.connect():
                    pass
        m = c.metrics()["nodes"][2]
        assert m["failures"] == 1 and c.node_state("RAC3") == ra.NodeState.DOWN, m
        assert in_flight(c) == 0
    finally:
        engine.dispose()


def test_bad_arguments_get_clear_errors(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    with pytest.raises(TypeError, match="racaffinity.Cluster"):
        create_engine("not a cluster", urls(pg))
    mixed = dict(urls(pg), RAC3=urls(pg, "postgresql+psycopg2")["RAC3"])
    with pytest.raises(ValueError, match="same dialect"):
        create_engine(c, mixed)
    with pytest.raises(TypeError, match="poolclass"):
        create_engine(c, urls(pg), poolclass=sa.NullPool)
    with pytest.raises(ra.UnknownNodeError):
        create_engine(c, {"RAC9": urls(pg)["RAC1"]})
    with pytest.raises(TypeError, match="mapping"):
        create_engine(c, [urls(pg)["RAC1"]])


@pytest.mark.asyncio
async def test_the_asyncio_engine_routes_the_same_way(pg, cluster_factory, orders):
    from sqlalchemy.ext.asyncio import AsyncSession

    c = cluster_factory(nodes=NAMES)
    engine = create_async_engine(c, urls(pg), pool_size=2, max_overflow=2, pool_pre_ping=True)
    try:
        seen = Counter()
        for _ in range(45):
            async with AsyncSession(engine) as s:
                seen[pg.name_of_port((await s.execute(PORT)).scalar_one())] += 1
        assert set(seen) == set(NAMES)
        with c.pin():
            pinned = set()
            for _ in range(10):
                async with engine.connect() as conn:
                    pinned.add(pg.name_of_port((await conn.execute(PORT)).scalar_one()))
        assert len(pinned) == 1
        for k in range(8):
            with route(key=k):
                async with AsyncSession(engine) as s:
                    assert pg.name_of_port((await s.execute(PORT)).scalar_one()) == c.route_key(k).name
                    s.add(Order(id=k, note="async"))
                    await s.commit()
        assert in_flight(c) == 0
    finally:
        await engine.dispose()


def checkout(pg, engine, i, served, errors) -> None:
    """Waiter `i`'s checkout: the node that served it (`served`), or its
    error (`errors`)."""
    try:
        with engine.connect() as conn:
            served[i] = node_of_conn(pg, conn)
    except Exception as e:
        errors[i] = repr(e)


# The failover tests' pool_timeout: far beyond how long they wait for their
# waiters (WAITERS_DONE), so a waiter that was not woken at the Down is
# still waiting when they look, whatever the machine's speed (no clock read).
FAR_TIMEOUT = 120
WAITERS_DONE = 20


def waiters_done(threads) -> None:
    from conftest import wait_until

    wait_until(lambda: not any(t.is_alive() for t in threads), WAITERS_DONE)


def test_waiters_on_a_killed_node_are_served_elsewhere_at_once(pg, cluster_factory, restart_after):
    # Fast connection failover in the SQLAlchemy pool: threads waiting on a
    # node's full pool when it is kill -9ed (and reported Down, as a FAN
    # subscriber would) route again at once instead of waiting out
    # pool_timeout; the connection checked out there is aborted.
    from conftest import fan_line, wait_until

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0, pool_timeout=FAR_TIMEOUT)
    key = key_on(c, "RAC1")
    with route(key=key):
        holder = engine.connect()
    assert node_of_conn(pg, holder) == "RAC1"
    served, errors = {}, {}

    def one(i):
        with route(key=key):
            checkout(pg, engine, i, served, errors)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    queue = engine.pool.node_pool("RAC1")._pool
    wait_until(lambda: len(queue.not_empty._waiters) == 4, 5)
    pg.kill(1)
    restart_after.append(1)
    c.apply_event(fan_line("RAC1", "down"))
    waiters_done(threads)
    assert not errors and sorted(served) == [0, 1, 2, 3], (errors, served)
    assert all(n != "RAC1" for n in served.values()), served
    with pytest.raises(sa.exc.DBAPIError):
        holder.execute(sa.text("SELECT 1"))
    holder.close()
    engine.dispose()


def test_pinned_waiters_on_a_node_gone_down_are_served_elsewhere_at_once(pg, cluster_factory):
    # The same failover for pinned checkouts, which RoutingPool._do_get
    # serves inline from their pins' cached routes: each thread, pinned to
    # RAC1 with its route cached, waits on RAC1's full pool; RAC1 goes Down
    # and the waiters, woken by the retired pool, route again (their pins
    # move: soft mode) instead of waiting out pool_timeout.
    from conftest import fan_line, wait_until

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0, pool_timeout=FAR_TIMEOUT)
    for n in ("RAC2", "RAC3"):
        c.set_node_state(n, "draining")  # the pins below go to RAC1
    holder = engine.connect()  # balanced: RAC1, the one node taking work
    assert node_of_conn(pg, holder) == "RAC1"
    pinned, cached = threading.Barrier(5), threading.Barrier(5)
    served, errors = {}, {}

    def one(i):
        with c.pin() as r:
            assert r.name == "RAC1"
            pinned.wait(5)
            cached.wait(5)  # the other nodes are Up again
            c.route()  # caches the pin's route under the current epoch
            checkout(pg, engine, i, served, errors)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    pinned.wait(5)
    for n in ("RAC2", "RAC3"):
        c.set_node_state(n, "up")
    cached.wait(5)
    queue = engine.pool.node_pool("RAC1")._pool
    wait_until(lambda: len(queue.not_empty._waiters) == 4, 5)
    c.apply_event(fan_line("RAC1", "down"))
    waiters_done(threads)
    assert not errors and sorted(served) == [0, 1, 2, 3], (errors, served)
    assert all(n != "RAC1" for n in served.values()), served
    with pytest.raises(sa.exc.DBAPIError):  # a hard Down aborts it
        holder.execute(sa.text("SELECT 1"))
    holder.close()
    engine.dispose()


def _held_on_rac1(c, engine):
    for n in ("RAC2", "RAC3"):
        c.set_node_state(n, "draining")
    holder = engine.connect()  # balanced: RAC1, the one node taking work
    for n in ("RAC2", "RAC3"):
        c.set_node_state(n, "up")
    return holder


def test_a_failure_during_a_drain_aborts_checked_out_connections(pg, cluster_factory):
    # A FAN failure while RAC1 drains is a hard Down: the connection in use
    # (on a node still alive) is aborted as at any crash. Before, every Down
    # after Draining counted as the drain's end and the connection went on.
    from conftest import fan_line, wait_until

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    holder = _held_on_rac1(c, engine)
    assert node_of_conn(pg, holder) == "RAC1"
    c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=30))
    watch = engine.pool._watch
    wait_until(lambda: watch._last.get(c.node_id("RAC1")) is ra.NodeState.DRAINING, 5)
    c.apply_event(fan_line("RAC1", "down"))
    wait_until(lambda: watch._last.get(c.node_id("RAC1")) is ra.NodeState.DOWN, 5)
    with pytest.raises(sa.exc.DBAPIError):
        holder.execute(sa.text("SELECT 1"))
    holder.close()
    engine.dispose()


def test_a_failure_after_a_drain_ended_aborts_the_connections_still_finishing(pg, cluster_factory):
    # The drain's end let the connection in use finish; the node then fails
    # and the connection, which would hang on a blackholed node, is aborted.
    from conftest import fan_line, wait_until

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    holder = _held_on_rac1(c, engine)
    assert node_of_conn(pg, holder) == "RAC1"
    c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=1))
    watch = engine.pool._watch
    wait_until(lambda: watch._last.get(c.node_id("RAC1")) is ra.NodeState.DOWN, 5)
    assert holder.execute(sa.text("SELECT 1")).scalar() == 1  # finishing its request
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=RAC1 host=h1 status=down reason=FAILURE")
    time.sleep(1.0)  # several watch rounds
    with pytest.raises(sa.exc.DBAPIError):
        holder.execute(sa.text("SELECT 1"))
    holder.close()
    engine.dispose()


def test_a_drain_that_ended_between_two_watch_rounds_lets_checked_out_connections_finish(
    pg, cluster_factory, monkeypatch
):
    # The watch never saw RAC1 Draining (its deadline passed between two
    # rounds): the core says the Down ended a planned drain, so the
    # connection in use goes on.
    import racaffinity.sqlalchemy as ras
    from conftest import fan_line, wait_until

    monkeypatch.setattr(ras, "WATCH_INTERVAL", 600.0)
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    holder = _held_on_rac1(c, engine)
    assert node_of_conn(pg, holder) == "RAC1"
    c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=1))
    wait_until(lambda: c.node_state("RAC1") is ra.NodeState.DOWN, 5)
    engine.pool._watch.round([engine.pool])  # the first round since the drain began
    assert holder.execute(sa.text("SELECT 1")).scalar() == 1  # not aborted
    holder.close()
    engine.dispose()


def test_a_planned_drain_closes_idle_connections_now_and_busy_ones_on_return(pg, cluster_factory, monkeypatch):
    # RAC1 drains (FAN reason=USER, a 30 s deadline): its idle pooled
    # session closes at once, as in NodePools and Java's node pools (an
    # operator waiting for the node's sessions to go would otherwise wait
    # out the deadline, or for good with a drain that has none); the one in
    # use finishes its request and closes when returned.
    import psycopg

    import racaffinity.sqlalchemy as ras
    from conftest import fan_line, wait_until

    monkeypatch.setattr(ras, "WATCH_INTERVAL", 600.0)
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=2, max_overflow=0)
    key = key_on(c, "RAC1")
    with route(key=key):
        idle, busy = engine.connect(), engine.connect()
    pids = [conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() for conn in (idle, busy)]
    idle.close()

    def alive(pid):
        with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as admin:
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 1

    assert alive(pids[0]) and alive(pids[1])  # busy is in its (autobegun) transaction
    c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=30))
    assert c.node_state("RAC1") is ra.NodeState.DRAINING
    engine.pool._watch.round([engine.pool])
    wait_until(lambda: not alive(pids[0]), 2)  # the idle one, at once
    assert busy.execute(sa.text("SELECT 2")).scalar_one() == 2  # in a transaction on the node: goes on
    busy.commit()
    busy.close()
    wait_until(lambda: not alive(pids[1]), 2)  # returned: closed
    engine.dispose()


def test_a_failure_after_a_drain_retired_the_nodes_pool_aborts_its_checked_out_connections(
    pg, cluster_factory, monkeypatch
):
    # The drain retired RAC1's pool (it held an idle connection); a FAN
    # failure then takes the node Down: the connection still in use there
    # is aborted as at any hard Down, though the node has no pool left.
    import racaffinity.sqlalchemy as ras
    from conftest import fan_line

    monkeypatch.setattr(ras, "WATCH_INTERVAL", 600.0)
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=2, max_overflow=0)
    with route(key=key_on(c, "RAC1")):
        idle, busy = engine.connect(), engine.connect()
    assert node_of_conn(pg, busy) == "RAC1"
    idle.close()
    c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=30))
    engine.pool._watch.round([engine.pool])
    c.apply_event(fan_line("RAC1", "down"))
    engine.pool._watch.round([engine.pool])
    with pytest.raises(sa.exc.DBAPIError):
        busy.execute(sa.text("SELECT 1"))
    busy.close()
    engine.dispose()


@pytest.mark.asyncio
async def test_an_asyncio_engines_planned_drain_closes_idle_connections_now_and_busy_ones_on_return(
    pg, cluster_factory, monkeypatch
):
    # As above, in the asyncio engine: the watch hands the retirement to the
    # pool's loop.
    import psycopg

    import racaffinity.sqlalchemy as ras
    from conftest import fan_line, wait_until_async

    monkeypatch.setattr(ras, "WATCH_INTERVAL", 600.0)
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_async_engine(c, urls(pg), pool_size=2, max_overflow=0)
    key = key_on(c, "RAC1")
    with route(key=key):
        idle, busy = await engine.connect(), await engine.connect()
    pids = [(await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one() for conn in (idle, busy)]
    await idle.close()

    def alive(pid):
        with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as admin:
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == 1

    assert alive(pids[0]) and alive(pids[1])
    c.apply_event(fan_line("RAC1", "down", "USER", drain_timeout=30))
    pool = engine.sync_engine.pool
    pool._watch.round([pool])
    await wait_until_async(lambda: not alive(pids[0]), 2)  # the idle one, at once
    assert (await busy.execute(sa.text("SELECT 2"))).scalar_one() == 2  # goes on
    await busy.commit()
    await busy.close()
    await wait_until_async(lambda: not alive(pids[1]), 2)  # returned: closed
    await engine.dispose()


def test_a_down_and_up_between_two_watch_rounds_retires_the_nodes_pool(pg, cluster_factory, monkeypatch):
    # RAC1 restarts (its sessions end) and the cluster hears of it Down, then
    # Up again, both between two watch rounds (the operator, a FAN relay,
    # the topology feed). The round sees Up as before; the node's pool must
    # be retired all the same, as at a Down and an Up: its idle connection
    # is of a session that ended, and without pre-ping the next checkout
    # would get it.
    import psycopg

    import racaffinity.sqlalchemy as ras

    monkeypatch.setattr(ras, "WATCH_INTERVAL", 600.0)
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    engine.pool._watch.round([engine.pool])
    key = key_on(c, "RAC1")
    with route(key=key), engine.connect() as conn:
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    c.set_node_state("RAC1", "down")
    c.set_node_state("RAC1", "up")
    engine.pool._watch.round([engine.pool])
    with route(key=key), engine.connect() as conn:
        assert pg.name_of_port(conn.execute(PORT).scalar_one()) == "RAC1"
    engine.dispose()


@pytest.mark.asyncio
async def test_asyncio_waiters_on_a_killed_node_are_served_elsewhere_at_once(pg, cluster_factory, restart_after):
    # Fast connection failover in the asyncio engine: tasks waiting on a
    # node's full pool when it is kill -9ed (and reported Down, as a FAN
    # subscriber would) route again instead of waiting out pool_timeout;
    # the connection checked out there is aborted.
    import asyncio

    from conftest import fan_line, wait_until_async

    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_async_engine(c, urls(pg), pool_size=1, max_overflow=0, pool_timeout=FAR_TIMEOUT)
    key = key_on(c, "RAC1")
    with route(key=key):
        holder = await engine.connect()
    assert pg.name_of_port((await holder.execute(PORT)).scalar_one()) == "RAC1"
    served, errors = {}, {}

    async def one(i):
        try:
            with route(key=key):
                async with engine.connect() as conn:
                    served[i] = pg.name_of_port((await conn.execute(PORT)).scalar_one())
        except Exception as e:
            errors[i] = repr(e)

    tasks = [asyncio.create_task(one(i)) for i in range(4)]
    queue = engine.sync_engine.pool.node_pool("RAC1")._pool._queue
    await wait_until_async(lambda: len(queue._getters) == 4, 5)
    pg.kill(1)
    restart_after.append(1)
    c.apply_event(fan_line("RAC1", "down"))
    await wait_until_async(lambda: all(t.done() for t in tasks), WAITERS_DONE)
    assert not errors and sorted(served) == [0, 1, 2, 3], (errors, served)
    assert all(n != "RAC1" for n in served.values()), served
    with pytest.raises(sa.exc.DBAPIError):
        await holder.execute(sa.text("SELECT 1"))
    await holder.close()
    await engine.dispose()


def test_an_engine_disposed_after_a_node_was_removed_keeps_working(pg, cluster_factory):
    # engine.dispose() recreates the pool; it must build it over the nodes
    # the cluster still has, not fail on the one removed.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            conn.execute(PORT)
        c.remove_node("RAC3")
        engine.dispose()
        seen = set()
        for _ in range(20):
            with engine.connect() as conn:
                seen.add(node_of_conn(pg, conn))
        assert seen == {"RAC1", "RAC2"}
    finally:
        engine.dispose()


def test_node_names_in_urls_match_the_cluster_in_any_case(pg, cluster_factory):
    # Node names match case-insensitively (as `NodePools`' connection
    # strings do); the node pools looked their URL up by the cluster's
    # spelling (KeyError at the first checkout), and engine.dispose() kept
    # only the URLs spelled as the cluster spells them.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, {n.lower(): u for n, u in urls(pg).items()}, pool_size=1, max_overflow=0)
    try:
        for _ in range(2):
            seen = set()
            for node in NAMES:
                with route(key=key_on(c, node)), engine.connect() as conn:
                    seen.add(node_of_conn(pg, conn))
            assert seen == set(NAMES)
            engine.dispose()
    finally:
        engine.dispose()


def _watches() -> set:
    return {t for t in threading.enumerate() if t.name == "racaffinity-sqlalchemy-watch" and t.is_alive()}


def _settle(cond, timeout: float = 2.0) -> None:
    # Polls without failing: the assertion after it says what was seen.
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_engine_dispose_keeps_one_failover_watch_and_none_outlives_the_cluster(pg, cluster_factory):
    # engine.dispose() replaces the pool (`recreate()`) and the new pool
    # starts its own watch thread. The replaced pool's watch ended only
    # once the cycle collector freed that pool (its node pools point back
    # at it): a process that disposes often (after each fork, per test)
    # ran one more thread each time. The collector is off here so that
    # only the pools' own doing counts.
    import gc

    from racaffinity.sqlalchemy import WATCH_INTERVAL

    before = _watches()
    c = cluster_factory(nodes=NAMES)
    gc.collect()
    gc.disable()
    try:
        engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
        for _ in range(5):
            for n in NAMES:  # a node pool each: what holds the pool in a cycle
                with route(key=key_on(c, n)), engine.connect() as conn:
                    conn.execute(PORT)
            engine.dispose()
        _settle(lambda: len(_watches() - before) <= 1, 10 * WATCH_INTERVAL)
        assert len(_watches() - before) == 1, f"{len(_watches() - before)} watch threads for one engine"
        engine.dispose()
        c.close()
        _settle(lambda: not (_watches() - before), 10 * WATCH_INTERVAL)
        assert not (_watches() - before), f"{len(_watches() - before)} watch threads after the cluster closed"
    finally:
        gc.enable()


def test_a_connection_of_a_disposed_engine_pool_is_still_aborted_on_a_hard_down(pg, cluster_factory):
    # A connection checked out before engine.dispose() goes back to the
    # replaced pool: a hard Down of its node must still abort it (fast
    # failover), whichever watch looks after that pool now.
    from conftest import fan_line

    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    try:
        with route(key=key_on(c, "RAC1")):
            holder = engine.connect()
        assert node_of_conn(pg, holder) == "RAC1"
        engine.dispose()
        c.apply_event(fan_line("RAC1", "down"))
        aborted = {}

        def probe() -> bool:
            try:
                holder.execute(PORT)
                holder.rollback()
                return False
            except sa.exc.DBAPIError as e:
                aborted["e"] = e
                return True

        _settle(probe, 2.0)
        assert "e" in aborted, "the old pool's connection on RAC1 still answers after its hard Down"
        holder.close()
    finally:
        engine.dispose()


def test_a_forked_childs_dispose_leaves_the_parents_connections_alone(pg, cluster_factory):
    # SQLAlchemy's way for a forked child: engine.dispose(close=False), a
    # new pool that leaves the parent's (copied) pool alone. Its sockets
    # are the parent's: a Down seen in the child must not shut down the
    # parent's checked-out connection through that copy.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    try:
        with route(key=key_on(c, "RAC1")):
            holder = engine.connect()
        assert node_of_conn(pg, holder) == "RAC1"
        holder.rollback()

        def child() -> str:
            engine.dispose(close=False)
            c.set_node_state("RAC1", "down")
            time.sleep(0.6)  # the child's watch: three rounds
            return "ok"

        assert in_a_forked_child(child, 10.0) == "ok"
        assert node_of_conn(pg, holder) == "RAC1"  # not aborted by the child
        holder.close()
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", ["detach", "invalidate"])
@pytest.mark.parametrize("gone", ["removed", "down"])
def test_a_connection_detached_or_invalidated_after_its_node_was_retired_makes_no_node_pool(
    pg, cluster_factory, how, gone
):
    # A detach() (RoutingPool._do_return_conn) and a disconnect's
    # invalidation (RoutingPool._invalidate) of a connection whose node
    # pool was retired while it was checked out (the node removed, or
    # Down) went to the node's current pool, `_sub(node)`, which made a
    # new one for the retired node: a pool the watch never retires.
    from conftest import fan_line, wait_until

    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    pool = engine.pool
    try:
        with route(key=key_on(c, "RAC3")):
            holder = engine.connect()
        assert node_of_conn(pg, holder) == "RAC3"
        holder.rollback()
        node = c.node_id("RAC3")
        retired = pool._subs[node]
        if gone == "removed":
            c.remove_node("RAC3")
        else:
            c.apply_event(fan_line("RAC3", "down"))
        wait_until(lambda: retired._racaffinity_retired, 5)
        if how == "detach":
            holder.detach()
        else:
            with pytest.raises(sa.exc.DBAPIError) as info:
                holder.execute(PORT)  # aborted by the hard Down: a disconnect
            assert info.value.connection_invalidated
        holder.close()
        assert node not in pool._subs, "a node pool was made for the retired node"
    finally:
        engine.dispose()


@pytest.mark.parametrize("path", ["routed", "pinned"])
def test_a_checkout_whose_node_pool_retires_under_it_routes_again(pg, cluster_factory, monkeypatch, path):
    # The node pool's retirement (its node gone Down) runs between the
    # checkout's retirement check and the record's lease being known to
    # the pool (what a hard Down aborts): the connection was handed out
    # from the retired pool, on the Down node, and not aborted. The watch's
    # round runs right after the queue hands the record out.
    import racaffinity.sqlalchemy as ras
    from conftest import fan_line

    monkeypatch.setattr(ras, "WATCH_INTERVAL", 600.0)  # this test runs the watch's rounds
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    pool = engine.pool
    try:
        key = key_on(c, "RAC1")
        with route(key=key), engine.connect() as conn:
            assert node_of_conn(pg, conn) == "RAC1"  # RAC1's pool, one idle connection
        queue = pool.node_pool("RAC1")._pool
        get = queue.get

        def get_then_retire(*args, **kwargs):
            rec = get(*args, **kwargs)
            del queue.get  # once
            c.apply_event(fan_line("RAC1", "down"))
            pool._watch.round([pool])
            return rec

        if path == "routed":
            queue.get = get_then_retire
            with route(key=key):
                conn = engine.connect()
        else:
            for n in ("RAC2", "RAC3"):
                c.set_node_state(n, "draining")
            with c.pin() as r:
                assert r.name == "RAC1"
                for n in ("RAC2", "RAC3"):
                    c.set_node_state(n, "up")
                c.route()  # the pin's route cached: the inline checkout
                queue.get = get_then_retire
                conn = engine.connect()
        assert "get" not in queue.__dict__, "the checkout did not take RAC1's idle connection"
        assert node_of_conn(pg, conn) != "RAC1", "handed out from RAC1's retired pool"
        conn.close()
    finally:
        engine.dispose()


def test_a_forked_child_that_never_disposes_gets_a_failover_watch_and_its_own_connections(pg, cluster_factory):
    # The failover watch is a thread, which a fork does not copy: a child
    # that used the engine without `engine.dispose(close=False)` (what
    # SQLAlchemy asks of it) had no failover at all, and its checkouts
    # took the parent's pooled connections (shared sockets). The child's
    # first checkout leaves the parent's connections alone (as that
    # dispose would) and starts the child's watch: a hard Down aborts the
    # child's connection on the node.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    try:
        key = key_on(c, "RAC1")
        with route(key=key), engine.connect() as conn:
            parents = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            conn.rollback()

        def child() -> str:
            with route(key=key):
                held = engine.connect()
            mine = held.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            held.rollback()
            if mine == parents:
                return "the child took the parent's connection"
            c.set_node_state("RAC1", "down")
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                try:
                    held.execute(PORT)
                    held.rollback()
                except sa.exc.DBAPIError:
                    return "ok"
                time.sleep(0.05)
            return "not aborted by the child's watch"

        verdict = in_a_forked_child(child)
        assert verdict == "ok", verdict
        with route(key=key), engine.connect() as conn:  # the parent's connection, untouched
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == parents
    finally:
        engine.dispose()


def test_a_forked_childs_collected_node_pools_leave_the_parents_sessions_alone(pg, cluster_factory):
    # The child's first checkout sets the parent's node pools aside; if the
    # child drops them (the engine too) they are collected there. psycopg's
    # PGconn finalizer calls PQfinish only in the process that connected (a
    # getpid check, in its C and ctypes implementations alike): PQfinish
    # would send Terminate on the parent's socket and end its session. An
    # explicit close() in the child has no such check.
    import weakref

    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    try:
        key = key_on(c, "RAC1")
        with route(key=key), engine.connect() as conn:
            parents = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            theirs = weakref.ref(conn.connection.dbapi_connection)
            conn.rollback()

        def child() -> str:
            with route(key=key), engine.connect() as conn:  # sets the parent's node pools aside
                mine = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
                conn.rollback()
            engine.pool._inherited.clear()
            gc.collect()
            if mine == parents:
                return "the child took the parent's connection"
            if theirs() is not None:
                return f"the parent's connection was not collected: {gc.get_referrers(theirs())!r}"[:400]
            return "ok"

        verdict = in_a_forked_child(child)
        assert verdict == "ok", verdict
        with route(key=key), engine.connect() as conn:  # the parent's session, not ended by the child
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == parents
    finally:
        engine.dispose()


def _error_chain(e: BaseException) -> list:
    chain = []
    while e is not None:
        chain.append(e)
        e = getattr(e, "orig", None) or e.__cause__
    return chain


@pytest.mark.parametrize("first", ["text", "driver_sql", "orm", "commit"])
def test_a_statement_on_a_forked_childs_copy_of_the_parents_connection_is_a_clear_typed_error(
    pg, cluster_factory, orders, first
):
    # The child's copy of a connection the parent has checked out must not
    # run anything (its socket is the parent's session), and what the child
    # gets must say why, as a typed error an application handles: it got
    # StatementError "(builtins.AssertionError)", no word of the fork. The
    # copy is then invalidated as a lost connection is (SQLAlchemy's own
    # PendingRollbackError until rolled back), and after the rollback its
    # next statement runs on a connection of the child's own.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    conn = None
    try:
        with route(key=key_on(c, "RAC1")):
            conn = engine.connect()
        conn.execute(sa.text("INSERT INTO py_sqla_orders (id, note) VALUES (1, 'parent')"))
        txid = conn.execute(sa.text("SELECT txid_current()")).scalar_one()
        parents = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        dbapi = engine.dialect.loaded_dbapi

        def child() -> str:
            warnings.simplefilter("error")  # no "Can't invalidate an already-closed connection" either
            run = {
                "text": lambda: conn.execute(PORT),
                "driver_sql": lambda: conn.exec_driver_sql("SELECT 1"),
                "orm": lambda: Session(bind=conn).execute(PORT),
                "commit": conn.commit,
            }[first]
            try:
                run()
                return "the child's copy ran it"
            except Exception as e:
                chain = _error_chain(e)
                names = " <- ".join(type(x).__name__ for x in chain)
                if any(isinstance(x, AssertionError) for x in chain):
                    return f"an AssertionError: {names}: {e}"
                if not isinstance(e, sa.exc.DBAPIError) or not isinstance(
                    e.orig, (dbapi.InterfaceError, dbapi.OperationalError)
                ):
                    return f"not the DB-API's InterfaceError or OperationalError: {names}: {e}"
                if "fork" not in str(e) or "parent" not in str(e):
                    return f"no word of the fork: {e}"
                if not (e.connection_invalidated and conn.invalidated):
                    return "the copy was not invalidated"
            try:
                conn.execute(PORT)
                return "the invalidated copy ran a statement"
            except sa.exc.PendingRollbackError:
                pass
            conn.rollback()  # sends nothing: the copy has no DB-API connection
            if conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == parents:
                return "the child's statement ran in the parent's session"
            conn.close()
            return "ok"

        assert in_a_forked_child(child) == "ok"
        assert conn.execute(sa.text("SELECT txid_current()")).scalar_one() == txid, (
            "the parent's transaction was ended by the child"
        )
        conn.commit()
    finally:
        if conn is not None:
            conn.close()  # an open transaction would hold the next test's fixture (its DROP TABLE)
        engine.dispose()


@pytest.mark.parametrize("how", ["collected", "closed", "reused"])
def test_a_forked_child_dropping_the_parents_checked_out_connection_leaves_its_transaction_alone(
    pg, cluster_factory, orders, how
):
    # The child's copy of a connection the parent has checked out is the
    # parent's socket. SQLAlchemy resets a connection on its way back (its
    # collection runs the fairy's finalizer; a close, or the end of a
    # `with` block the child unwinds, returns it): a ROLLBACK there ends the
    # parent's open transaction under it, and the parent's next statement
    # runs in a new one. In the child that copy now has no DB-API
    # connection: nothing is sent, and a statement on it fails there.
    c = cluster_factory(nodes=NAMES)
    engine = create_engine(c, urls(pg), pool_size=1, max_overflow=0)
    held: list = []
    try:
        with route(key=key_on(c, "RAC1")):
            held.append(engine.connect())
        conn = held[0]
        assert node_of_conn(pg, conn) == "RAC1"
        conn.execute(sa.text("INSERT INTO py_sqla_orders (id, note) VALUES (1, 'parent')"))
        txid = conn.execute(sa.text("SELECT txid_current()")).scalar_one()

        def child() -> str:
            if how == "collected":
                held.clear()
                gc.collect()
            elif how == "closed":
                held.pop().close()
            else:
                copy = held.pop()
                try:
                    copy.execute(PORT)
                    return "the child's copy ran a statement"
                except sa.exc.InterfaceError:  # it has no DB-API connection in the child (_ParentsConnection)
                    pass
                copy.close()
            return "ok"

        del conn
        assert in_a_forked_child(child) == "ok"
        conn = held[0]
        assert conn.execute(sa.text("SELECT txid_current()")).scalar_one() == txid, (
            "the parent's transaction was ended by the child"
        )
        conn.commit()
        conn.close()
        with sa.create_engine(urls(pg)["RAC1"], poolclass=sa.NullPool).connect() as check:
            assert check.execute(sa.text("SELECT note FROM py_sqla_orders WHERE id = 1")).scalar_one() == "parent"
    finally:
        for open_conn in held:
            open_conn.close()  # an open transaction would hold the next test's fixture (its DROP TABLE)
        engine.dispose()
