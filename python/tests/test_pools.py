"""racaffinity.pools against the 3 local PostgreSQL nodes (pgnodes): routing
checked on real connections with inet_server_port(), failover after a real
SIGKILL, the heartbeat, and credentials kept out of reprs and errors."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import psycopg
import pytest

import racaffinity as ra
from racaffinity.pools import NodePools

from conftest import NAMES, fan_line, port_of, wait_until


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


def test_threaded_balanced_borrows_each_go_where_the_core_picked(make_pools, cluster_factory):
    # A balanced borrow hands a lease buffer to the core, which writes the
    # node it picks into it. Threads share a few reused buffers
    # (`_lease_bufs`): a borrow that gave its buffer back before reading
    # the pick read another thread's when it was switched out in between,
    # and went to that node; its own pick was never served, and balancing
    # (counted by picks) drifted from the connections made. A trace
    # function that yields at each line of the borrow (as a tracer such as
    # coverage's makes switches possible there) makes that switch likely.
    import sys

    from racaffinity._pools_sync import _Connection

    borrow = _Connection.__enter__.__code__

    def yielding(frame, event, arg):
        if event == "line":
            time.sleep(0)
        return yielding

    def tracer(frame, event, arg):
        return yielding if frame.f_code is borrow else None

    c = cluster_factory("policy = round_robin\nthread.auto_pin = false", nodes=NAMES)
    pools = make_pools(c, min_size=2, max_size=8)
    assert pools._balanced_host  # the path under test: host-begun balanced leases
    start = threading.Barrier(8)
    errors = []

    def worker():
        sys.settrace(tracer)
        try:
            start.wait()
            for _ in range(300):
                with pools.connection():
                    pass
        except Exception as e:
            errors.append(repr(e))
        finally:
            sys.settrace(None)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    nodes = c.metrics()["nodes"]
    picks = {n["name"]: n["picks"] for n in nodes}
    served = {n["name"]: n["successes"] for n in nodes}
    assert sum(served.values()) == 8 * 300
    assert served == picks, f"borrows per node {served} != the core's picks {picks}"


def test_a_renewal_racing_the_upkeep_leaves_one_open_pool_per_node(make_pools, cluster_factory):
    # A replay renews the pool of its node when that pool's last connect
    # failed (`_renew_if_backing_off`, on the request's thread) while the
    # upkeep may replace the same pool for a Down (apply_event's thread
    # here). Each read the node's pool, made a successor and stored it:
    # the later store dropped the other's successor, open and never
    # closed (not even by close()), and a renewal stored last left a
    # pool that keeps connections to the Down node.
    c = cluster_factory("thread.auto_pin = false", nodes=NAMES)
    pools = make_pools(c, min_size=1, upkeep_interval=60.0)  # rounds from apply_event only
    node = c.node_id("RAC1")
    made = []
    new_pool = pools._new_pool

    def recording(*args):  # every pool made, to find one left open
        pool = new_pool(*args)
        made.append(pool)
        return pool

    pools._new_pool = recording
    wrong = []
    for i in range(12):
        # What a failed connect leaves, which a replay's renewal acts on.
        pools._by_id[node]._racaffinity_connects.last_failed = True
        go = threading.Barrier(2)
        renew = threading.Thread(target=lambda: (go.wait(), pools._renew_if_backing_off(node)))
        down = threading.Thread(target=lambda: (go.wait(), pools.apply_event(fan_line("RAC1", "down"))))
        for t in (renew, down):
            t.start()
        for t in (renew, down):
            t.join()
        if not pools._by_id[node]._racaffinity_draining:
            wrong.append(i)
        pools.apply_event(fan_line("RAC1", "up"))
    current = [p for _n, p in pools.items()]
    pools.close()
    leaked = [p.name for p in made if not p.closed]
    assert not leaked and not wrong, (
        f"{len(leaked)} of {len(made)} pools left open after close(); "
        f"rounds {wrong} kept a pool with min_size for the Down node"
    )
    assert all(p.closed for p in current)


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


def _left_in_a_forked_child(pools, scope: str, leave: str) -> tuple:
    """Opens `scope` ("connection" or "request") in the parent, forks inside
    it, and has the child leave the block as `leave` says ("raise": as
    sys.exit() unwinds it; "normal": the block ends). Returns the child's
    verdict and the parent's transaction id before the fork and after it,
    read on the same connection in the same block."""
    read, write = os.pipe()
    pid = -1
    try:
        with (pools.connection() if scope == "connection" else pools.request()) as c:
            conn = c if scope == "connection" else c.connection
            conn.execute("INSERT INTO fork_unwind VALUES (1)")
            before = conn.execute("SELECT txid_current()").fetchone()[0]
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os.close(read)
                if leave == "raise":
                    raise SystemExit(0)
            else:
                os.close(write)
                os.waitpid(pid, 0)
                with os.fdopen(read, "rb") as f:
                    verdict = f.read().decode() or "no verdict"
                after = conn.execute("SELECT txid_current()").fetchone()[0]
        if pid == 0:  # pragma: no cover - the child, past the block
            os.write(write, b"the block ended normally")
            os._exit(0)
    except BaseException as e:
        if pid == 0:  # pragma: no cover - the child
            os.write(write, f"{type(e).__name__}: {e}".encode()[:500])
            os._exit(0)
        raise
    return verdict, before, after


@pytest.mark.parametrize("scope", ["connection", "request"])
@pytest.mark.parametrize("leave", ["raise", "normal"])
def test_a_forked_child_leaving_the_parents_borrow_ends_nothing_on_the_parents_session(pg, make_pools, scope, leave):
    # A child forked inside a `with pools.connection()` (or request) block
    # unwound it on the parent's socket: an exception's ROLLBACK (a
    # sys.exit() in the child) ended the parent's transaction under it, and
    # a normal end's COMMIT committed the parent's work half done. The
    # child now ends nothing there; a normal end in the child raises.
    pools = make_pools(min_size=1, max_size=1)
    for name in NAMES:
        with psycopg.connect(pg.dsn[name], autocommit=True) as admin:
            admin.execute("DROP TABLE IF EXISTS fork_unwind")
            admin.execute("CREATE TABLE fork_unwind (x int)")
    with pools.cluster.pin():
        verdict, before, after = _left_in_a_forked_child(pools, scope, leave)
    if leave == "raise":
        assert verdict == "SystemExit: 0", verdict
    else:
        assert verdict.startswith("PoolClosed") and "fork" in verdict, verdict
    assert after == before, "the child's exit ended the parent's transaction"
    # The parent's block committed its own work, once.
    total = 0
    for name in NAMES:
        with psycopg.connect(pg.dsn[name], autocommit=True) as admin:
            total += admin.execute("SELECT count(*) FROM fork_unwind").fetchone()[0]
    assert total == 1


def test_a_borrow_on_a_node_up_again_while_its_down_is_handled_is_served(pg, make_pools, monkeypatch):
    # The stale-route stress of test_pool_route_cache.py failed about a
    # tenth of its borrows under heavy load, each with PoolClosed "the pool
    # ... was retired as it handed a connection out": its flipper set a node
    # Down and Up again while the upkeep was still opening the Down's
    # successor pool (psycopg_pool starts its threads there, slow on a
    # loaded machine). The old pool was flagged retired before that open,
    # yet stayed the node's pool until it ended: a borrow routed to the node
    # (Up again) took a connection from it, gave it back and routed again
    # to the same pool, three times, then failed. The open is held here.
    pools = make_pools(min_size=1, max_size=2)
    c = pools.cluster
    old = pools.node_pool("RAC1")
    opening, opened = threading.Event(), threading.Event()
    open_pool = type(old).open

    def held_open(self, *args, **kwargs):
        if self is not old and self.name == old.name and not opened.is_set():
            opening.set()
            opened.wait(10)
        return open_pool(self, *args, **kwargs)

    monkeypatch.setattr(type(old), "open", held_open)
    try:
        c.set_node_state("RAC1", "down")
        assert opening.wait(5), "the upkeep did not handle the Down"
        c.set_node_state("RAC1", "up")
        with pools.connection(key=_key_on(c, "RAC1")) as conn:
            assert port_of(conn) == pg.port["RAC1"]
    finally:
        opened.set()
    wait_until(lambda: pools.node_pool("RAC1") is not old, 5)


class _Conn:
    """What a hard Down looks at on a pool's connection."""

    _racaffinity_borrowed = False
    _racaffinity_checking = False

    def merge_hits(self) -> None:
        pass


def _members_listed_while_another_thread_adds(listed) -> list:
    """Calls `listed(weak_set)` 20,000 times while another thread adds to
    the set (as psycopg_pool's workers add the connections they make, and
    threads that pin add their pins); returns the errors raised."""
    import weakref

    ws: "weakref.WeakSet[_Conn]" = weakref.WeakSet()
    keep = [_Conn() for _ in range(50)]
    for k in keep:
        ws.add(k)
    stop = threading.Event()

    def add() -> None:
        while not stop.is_set():
            c = _Conn()
            ws.add(c)
            keep.append(c)
            if len(keep) > 60:
                keep.pop(0)

    t = threading.Thread(target=add)
    t.start()
    errors = []
    try:
        for _ in range(20_000):
            try:
                listed(ws)
            except RuntimeError as e:
                errors.append(e)
    finally:
        stop.set()
        t.join()
    return errors


def test_a_hard_down_lists_a_pools_connections_while_a_worker_adds_one():
    # A hard Down walks each retired pool's connections on the upkeep thread
    # while the pool's workers may add a new one: iterating a WeakSet that
    # grows raised "Set changed size during iteration", and the Down then
    # neither aborted the borrowed connections nor retired the pool.
    import types

    from racaffinity import _pools_sync

    def listed(ws):
        p = types.SimpleNamespace(_racaffinity_conns=ws)
        _pools_sync._in_use([p])
        _pools_sync._abort_in_use([p])

    errors = _members_listed_while_another_thread_adds(listed)
    assert errors == [], f"{len(errors)} of 20000: {errors[0]!r}"


def test_metrics_merge_the_pins_hits_while_other_threads_pin():
    # Cluster.metrics() merges the hits of the pins other threads may be
    # caching at that moment (an exporter thread beside request threads).
    c = ra.Cluster("nodes = A, B")
    try:

        def listed(ws):
            c._cached_pins = ws
            c._merge_host_hits()

        errors = _members_listed_while_another_thread_adds(listed)
    finally:
        c._cached_pins = __import__("weakref").WeakSet()
        c.close()
    assert errors == [], f"{len(errors)} of 20000: {errors[0]!r}"
