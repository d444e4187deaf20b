"""racaffinity.pools against the 3 local PostgreSQL nodes (pgnodes): routing
checked on real connections with inet_server_port(), failover after a real
SIGKILL, the heartbeat, and credentials kept out of reprs and errors."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import psycopg
import psycopg_pool
import pytest

import racaffinity as ra
from racaffinity.pools import NodePools, is_node_failure

from conftest import NAMES, fan_line, wait_until


def port_of(conn) -> int:
    return conn.execute("SELECT inet_server_port()").fetchone()[0]


@pytest.fixture
def make_pools(pg, cluster_factory):
    made = []

    def make(cluster=None, **kwargs):
        c = cluster if cluster is not None else cluster_factory(nodes=NAMES)
        kwargs.setdefault("min_size", 1)
        kwargs.setdefault("max_size", 4)
        kwargs.setdefault("timeout", 5.0)
        p = NodePools(c, pg.dsn, **kwargs)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def restart_after(pg):
    killed = []
    yield killed
    for i in killed:
        pg.restart(i)


def test_balanced_connections_reach_every_node(pg, make_pools):
    pools = make_pools()
    seen = Counter()
    for _ in range(60):
        with pools.connection() as conn:
            seen[pg.name_of_port(port_of(conn))] += 1
    assert set(seen) == set(NAMES)
    m = pools.cluster.metrics()
    assert sum(n["successes"] for n in m["nodes"]) == 60
    assert sum(n["in_flight"] for n in m["nodes"]) == 0


def test_connection_commits_or_rolls_back_like_psycopg_pool(pg, make_pools):
    pools = make_pools()
    with pools.pin():
        with pools.connection() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS py_t (v int)")
            conn.execute("DELETE FROM py_t")
        with pytest.raises(ZeroDivisionError):
            with pools.connection() as conn:
                conn.execute("INSERT INTO py_t VALUES (1)")
                1 / 0
        with pools.connection() as conn:
            conn.execute("INSERT INTO py_t VALUES (2)")
        with pools.connection() as conn:
            assert [r[0] for r in conn.execute("SELECT v FROM py_t")] == [2]
            conn.execute("DROP TABLE py_t")
    # a ZeroDivisionError says nothing about the node
    assert sum(n["failures"] for n in pools.cluster.metrics()["nodes"]) == 0


def test_pin_key_and_session_route_real_connections(pg, make_pools):
    pools = make_pools()
    c = pools.cluster
    for _ in range(5):
        with pools.pin() as route:
            ports = set()
            for _ in range(5):
                with pools.connection() as conn:
                    ports.add(port_of(conn))
            assert ports == {pg.port[route.name]}
    for k in (4711, "customer:42", b"\x00\x01"):
        with pools.connection(key=k) as conn:
            assert port_of(conn) == pg.port[c.route_key(k).name]
    for s in ("JSESSIONID=1", "JSESSIONID=2", "JSESSIONID=3"):
        with pools.connection(session=s) as conn:
            first = port_of(conn)
        with pools.session(s):
            for _ in range(3):
                with pools.connection() as conn:
                    assert port_of(conn) == first
    with pytest.raises(TypeError):
        pools.connection(key=1, session="s").__enter__()


def test_all_branches_of_a_gtrid_land_on_one_node_from_many_threads(pg, make_pools):
    pools = make_pools(max_size=8)
    c = pools.cluster
    gtrids = [f"gtrid-{i}" for i in range(12)]
    ports = {g: [] for g in gtrids}
    lock = threading.Lock()
    start = threading.Barrier(6)

    def branch_worker(w):
        start.wait()
        for g in gtrids:
            with c.transaction(g):
                # a data-key argument must not split the transaction
                with pools.connection(key=w) as conn:
                    p = port_of(conn)
                with pools.connection() as conn:
                    p2 = port_of(conn)
            with lock:
                ports[g] += [p, p2]

    threads = [threading.Thread(target=branch_worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, ps in ports.items():
        assert len(ps) == 12 and len(set(ps)) == 1, (g, ps)
        # and it is the documented rendezvous owner, the same in every process
        with ra.Cluster(nodes=NAMES) as other:
            assert pg.port[other.tx_begin(g).name] == ps[0]
    assert len({ps[0] for ps in ports.values()}) > 1  # gtrids spread over nodes
    assert c.metrics()["scopes"]["transaction"]["live"] == 0


def test_killed_node_gets_no_picks_after_a_fan_event(pg, make_pools, restart_after):
    pools = make_pools()
    c = pools.cluster
    pg.kill(2)
    restart_after.append(2)
    c.apply_event(fan_line("RAC2", "down"))
    seen = Counter()
    for _ in range(60):
        with pools.connection() as conn:
            seen[pg.name_of_port(port_of(conn))] += 1
    assert seen["RAC2"] == 0 and seen["RAC1"] > 0 and seen["RAC3"] > 0
    # restart and announce: RAC2 takes work again
    pg.restart(2)
    restart_after.remove(2)
    c.apply_event(fan_line("RAC2", "up"))

    def rac2_serves():
        try:
            with pools.connection(key=_key_on(c, "RAC2")) as conn:
                return port_of(conn) == pg.port["RAC2"]
        except psycopg.OperationalError:
            return False  # stale pooled connection from before the crash

    wait_until(rac2_serves, 20)


def _key_on(c: ra.Cluster, name: str) -> int:
    return next(k for k in range(10_000) if c.route_key(k).name == name)


def test_operational_errors_eject_a_killed_node(pg, make_pools, cluster_factory, restart_after):
    c = cluster_factory(nodes=NAMES, health_eject_after_failures=2, health_eject_backoff="60s",
                        health_eject_backoff_max="60s")
    pools = make_pools(c, timeout=1.0)
    for _ in range(30):  # warm every pool
        with pools.connection() as conn:
            port_of(conn)
    pg.kill(2)
    restart_after.append(2)
    failures_on = Counter()
    t0 = time.monotonic()
    while c.node_state("RAC2") != ra.NodeState.DOWN:
        assert time.monotonic() - t0 < 30, "RAC2 was never ejected"
        try:
            with pools.connection() as conn:
                port_of(conn)
        except psycopg.OperationalError as e:
            # A pooled session of the dead postmaster ends with 57P01, which
            # is not counted (the refused reconnects that follow are).
            assert is_node_failure(e) or e.sqlstate == "57P01", e
            failures_on["err"] += is_node_failure(e)
    assert failures_on["err"] >= 1
    assert c.metrics()["nodes"][1]["ejections"] == 1
    # after the failures were reported: no pick reaches RAC2, no error
    seen = Counter()
    for _ in range(60):
        with pools.connection() as conn:
            seen[pg.name_of_port(port_of(conn))] += 1
    assert seen["RAC2"] == 0
    pg.restart(2)
    restart_after.remove(2)
    c.report_probe("RAC2", True)  # a successful probe lifts an ejection
    assert c.node_state("RAC2") == ra.NodeState.UP


def test_heartbeat_downs_a_killed_idle_node_and_lifts_it_after_restart(pg, make_pools, cluster_factory, restart_after):
    c = cluster_factory("heartbeat.interval = 200ms\nheartbeat.misses = 3", nodes=NAMES)
    pools = make_pools(c, heartbeat=True)
    assert pools.heartbeat_interval == 0.2
    wait_until(lambda: all(n["probe_misses"] == 0 for n in c.metrics()["nodes"]), 5)
    wait_until(lambda: c.metrics()["nodes"][2]["state"] == "up", 5)
    pg.kill(3)
    restart_after.append(3)
    # no traffic: only the heartbeat can notice
    bound = pools.heartbeat_interval * (c.heartbeat_misses + 5) + 2.0
    took = wait_until(lambda: c.node_state("RAC3") == ra.NodeState.DOWN, bound)
    assert c.metrics()["nodes"][2]["down_cause"] == "heartbeat"
    assert c.node_state("RAC1") == c.node_state("RAC2") == ra.NodeState.UP
    pg.restart(3)
    restart_after.remove(3)
    wait_until(lambda: c.node_state("RAC3") == ra.NodeState.UP, bound + 5)
    pools.close()
    assert not pools._heartbeat.is_alive()
    assert took < bound


def test_heartbeat_stops_on_close(make_pools, cluster_factory):
    c = cluster_factory("heartbeat.interval = 50ms", nodes=NAMES)
    pools = make_pools(c, heartbeat=True)
    hb = pools._heartbeat
    wait_until(lambda: hb.is_alive(), 2)
    pools.close()
    assert not hb.is_alive()
    pools.close()  # idempotent


def test_every_node_needs_a_dsn(pg, cluster_factory):
    c = cluster_factory(nodes=NAMES)
    with pytest.raises(ra.ConfigError, match="RAC3"):
        NodePools(c, {"RAC1": pg.dsn["RAC1"], "RAC2": pg.dsn["RAC2"]})
    with pytest.raises(ra.UnknownNodeError):
        NodePools(c, {**pg.dsn, "RAC9": "host=x"})
    with pytest.raises(TypeError):
        NodePools(c, [pg.dsn["RAC1"]])


def test_credentials_never_show(pg, make_pools, cluster_factory, restart_after, caplog):
    secret = "s3cret-Pa55"
    dsns = {n: d + f" password={secret}" for n, d in pg.dsn.items()}
    c = cluster_factory(nodes=NAMES)
    pools = NodePools(c, dsns, connect_kwargs={"password": secret}, timeout=1.0, max_size=2)
    try:
        assert secret not in repr(pools) and "password" not in repr(pools)
        assert secret not in repr(pools.node_pool("RAC1"))
        with pools.connection() as conn:
            assert secret not in repr(conn)
        caplog.set_level(logging.DEBUG)
        pg.kill(1)
        restart_after.append(1)
        key = _key_on(c, "RAC1")
        errors = []
        for _ in range(3):
            try:
                with pools.connection(key=key) as conn:
                    port_of(conn)
            except psycopg.OperationalError as e:
                errors.append(e)
        assert errors
        for e in errors:
            assert secret not in str(e) and secret not in repr(e)
        assert all(secret not in r.getMessage() for r in caplog.records)
    finally:
        pools.close()


def test_pool_timeout_on_a_busy_pool_is_not_a_node_failure(pg, make_pools):
    pools = make_pools(min_size=1, max_size=1, timeout=0.3)
    c = pools.cluster
    key = _key_on(c, "RAC1")
    with pools.connection(key=key):
        wait_until(lambda: pools.node_pool("RAC1").get_stats().get("pool_size", 0) >= 1, 5)
        with pytest.raises(psycopg_pool.PoolTimeout):
            with pools.connection(key=key):
                pass
    assert c.metrics()["nodes"][0]["failures"] == 0
