"""Two-phase commit over psycopg's tpc_* API routed by the core, and
recovery after a real crash between prepare and commit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

import psycopg
import pytest

import racaffinity as ra
from racaffinity.pools import NodePools
from racaffinity.tpc import DEFAULT_FORMAT_ID, InDoubtError

from conftest import NAMES, prepared_xacts, tpc_rows, wait_until


rows = tpc_rows


@pytest.fixture
def pools(pg, cluster_factory, tables):
    p = NodePools(cluster_factory(nodes=NAMES), pg.dsn, min_size=1, max_size=8, timeout=5.0)
    yield p
    p.close()


def test_commit_two_branches_from_two_threads_on_one_node(pg, pools):
    c = pools.cluster
    gtrids = [f"order-{i}" for i in range(9)]
    for g in gtrids:
        ports = []
        with pools.global_transaction(g) as gtx:

            def branch(b):
                with gtx.branch() as conn:
                    ports.append(conn.execute("SELECT inet_server_port()").fetchone()[0])
                    conn.execute("INSERT INTO py_tpc VALUES (%s, %s)", (g, b))

            ts = [threading.Thread(target=branch, args=(f"b{i}",)) for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert [b.state for b in gtx.branches] == ["prepared", "prepared"]
            owner = c.tx_route(g).name
            assert len(prepared_xacts(pg)[owner]) == 2
        assert set(ports) == {pg.port[owner]}
        assert [b.state for b in gtx.branches] == ["committed", "committed"]
    r = rows(pg)
    for g in gtrids:
        owner = c.tx_begin(g).name
        c.tx_end(g)
        assert (g, "b0") in r[owner] and (g, "b1") in r[owner]
        assert all(not any(row[0] == g for row in r[n]) for n in NAMES if n != owner)
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert c.metrics()["scopes"]["transaction"]["live"] == 0
    assert sum(n["in_flight"] for n in c.metrics()["nodes"]) == 0


def test_rollback_on_error(pg, pools):
    with pytest.raises(RuntimeError):
        with pools.global_transaction("rb-1") as gtx:
            with gtx.branch() as conn:
                conn.execute("INSERT INTO py_tpc VALUES ('rb-1', 'b0')")
            with gtx.branch() as conn:
                conn.execute("INSERT INTO py_tpc VALUES ('rb-1', 'b1')")
            raise RuntimeError("the application changed its mind")
    assert [b.state for b in gtx.branches] == ["rolled back", "rolled back"]
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert all(r == [] for r in rows(pg).values())
    # a failing branch body rolls back that branch and then the others
    with pytest.raises(psycopg.errors.UndefinedTable):
        with pools.global_transaction("rb-2") as gtx:
            with gtx.branch() as conn:
                conn.execute("INSERT INTO py_tpc VALUES ('rb-2', 'b0')")
            with gtx.branch() as conn:
                conn.execute("INSERT INTO no_such_table VALUES (1)")
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert pools.cluster.metrics()["scopes"]["transaction"]["live"] == 0


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
print(json.dumps({g.gtrid: cluster.tx_route(g.gtrid).name for g in gtxs}), flush=True)
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


@pytest.mark.parametrize("action", ["rollback", "commit"])
def test_recover_all_after_a_crash_between_prepare_and_commit(pg, pools, action):
    owners = crash_after_prepare(10)
    # the crash left 20 in-doubt branches, each gtrid's two on its owner node
    left = prepared_xacts(pg)
    assert sum(len(v) for v in left.values()) == 20
    for g, owner in owners.items():
        assert sum(1 for gid in left[owner] if psycopg.Xid.from_string(gid).gtrid == g) == 2
    # a restarted TM (a fresh cluster knows nothing) recovers
    report = pools.recover_all(action)
    assert report.ok and not report.split
    assert len(report.resolved) == 20
    assert all(r.node_name == owners[r.gtrid] for r in report.resolved)
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert pools.cluster.metrics()["scopes"]["transaction"]["live"] == 0
    r = rows(pg)
    for g, owner in owners.items():
        want = [(g, "b0"), (g, "b1")] if action == "commit" else []
        assert [row for row in r[owner] if row[0] == g] == want


def test_recover_all_reports_a_split_transaction_and_still_resolves_it(pg, pools):
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
    report = pools.recover_all()
    assert report.split == ["split-1"]
    assert sorted(r.node_name for r in report.resolved) == ["RAC1", "RAC2"]
    left = prepared_xacts(pg)
    assert left["RAC1"] == left["RAC2"] == [] and len(left["RAC3"]) == 1
    report = pools.recover_all(format_id=None)
    assert [r.gtrid for r in report.resolved] == ["foreign-1"]
    assert prepared_xacts(pg) == {n: [] for n in NAMES}


def test_phase_two_on_a_dead_node_leaves_the_branch_in_doubt_then_recovery(pg, pools, cluster_factory):
    c = pools.cluster
    g = next(f"dead-{i}" for i in range(100) if c.tx_begin(f"dead-{i}").name == "RAC2" or c.tx_end(f"dead-{i}"))
    c.tx_end(g)
    gtx = pools.global_transaction(g, timeout=1.0)
    with gtx.branch() as conn:
        conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
    assert gtx.branches[0].node_name == "RAC2"
    pg.kill(2)
    try:
        with pytest.raises(InDoubtError) as e:
            gtx.commit()
        assert [b.node_name for b in e.value.branches] == ["RAC2"]
        # the core still routes the prepared gtrid to RAC2 (it never moves)
        assert c.tx_route(g).name == "RAC2"
        c.set_node_state("RAC2", "down")
        assert c.tx_route(g).name == "RAC2"  # never refused for routing reasons
        c.set_node_state("RAC2", "up")
    finally:
        pg.restart(2)
    # prepared transactions survive the crash; recovery commits it on RAC2
    wait_until(lambda: len(prepared_xacts(pg)["RAC2"]) == 1, 10)
    fresh = NodePools(cluster_factory(nodes=NAMES), pg.dsn, min_size=1, max_size=2, timeout=5.0)
    try:
        report = fresh.recover_all("commit")
    finally:
        fresh.close()
    assert [r.node_name for r in report.resolved] == ["RAC2"] and report.ok
    assert prepared_xacts(pg) == {n: [] for n in NAMES}
    assert rows(pg)["RAC2"] == [(g, "b0")]


def test_gtrid_type_and_size(pools):
    with pytest.raises(TypeError):
        pools.global_transaction(b"bytes-gtrid")
    gtx = pools.global_transaction("g" * 65)
    with pytest.raises((ra.InvalidArgumentError, ValueError)):
        with gtx.branch():
            pass
