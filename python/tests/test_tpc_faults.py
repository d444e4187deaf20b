"""Two-phase commit under faults (issue 11, P2-P7): lost replies, a failing
PREPARE, a node going Down mid-transaction, a node that stops answering,
and recovery over RAC-style instances of one database.

Every outcome is read back by SQL (`pg_prepared_xacts`, the rows) and from
the core (`live` registry entries, leases in flight, failure counters);
every client call runs with a timeout and under `within`, so no test hangs."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest

import racaffinity as ra
from racaffinity.pools import NodePools
from racaffinity.tpc import InDoubtError, transaction_key

from conftest import NAMES, prepare_directly, prepared_xacts, tpc_rows, wait_until
from faultproxy import FaultProxy
from faults import gtrid_on, in_flight, live, node_metrics, within

NONE_PREPARED = {n: [] for n in NAMES}


@pytest.fixture
def proxied_pools(pg, proxies, cluster_factory, tables):
    """NodePools whose connections all go through the fault proxies."""
    dsns = {n: proxies[n].dsn(pg.dsn[n]) for n in NAMES}
    p = NodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=4, timeout=2.0)
    yield p
    p.close(timeout=2.0)


class _Local:
    """The in-process FaultProxy set, with the Toxiproxy fixture's interface."""

    def __init__(self, proxies):
        self.proxies = proxies

    def blackhole(self, name):
        self.proxies[name].blackhole()

    def refuse(self, name):
        self.proxies[name].refuse()

    def heal(self, name):
        self.proxies[name].heal()


@pytest.fixture(params=["faultproxy", "toxiproxy"])
def faulty(request, pg, cluster_factory, tables):
    """(NodePools through fault proxies, their fault control): the test's
    own TCP proxy, and Toxiproxy (tests/cluster/faults)."""
    if request.param == "toxiproxy":
        ctl = request.getfixturevalue("toxi")
        dsns = dict(ctl.dsn)
    else:
        px = request.getfixturevalue("proxies")
        ctl = _Local(px)
        dsns = {n: px[n].dsn(pg.dsn[n]) for n in NAMES}
    p = NodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=4, timeout=2.0)
    yield p, ctl
    p.close(timeout=2.0)


@pytest.fixture
def pools(pg, cluster_factory, tables):
    p = NodePools(cluster_factory(nodes=NAMES), pg.dsn, min_size=1, max_size=4, timeout=5.0)
    yield p
    p.close()


# -- P2: a lost PREPARE reply ------------------------------------------------------


def test_a_lost_prepare_reply_leaves_the_branch_in_doubt_on_record(pg, proxies, proxied_pools):
    c = proxied_pools.cluster
    g = gtrid_on(c, "RAC1", "lostprep")
    gtx = proxied_pools.global_transaction(g, timeout=2.0)
    proxies["RAC1"].lose_reply_after(b"PREPARE TRANSACTION")
    with pytest.raises(Exception) as raised:
        with gtx.branch() as conn:
            conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
    assert proxies["RAC1"].reply_lost
    # The server prepared it: the branch is in doubt, not "rolled back".
    assert len(prepared_xacts(pg)["RAC1"]) == 1
    assert [b.state for b in gtx.branches] == ["in doubt"]
    assert isinstance(raised.value, InDoubtError), repr(raised.value)
    assert c.tx_route(transaction_key(g)).name == "RAC1"  # still on record, routed to its node
    assert live(c) == 1 and in_flight(c) == 0
    assert node_metrics(c, "RAC1")["failures"] == 1  # one lost connection, one failure
    # The TM's decision (rollback) reaches it through a new connection.
    within(20, gtx.rollback)
    assert [b.state for b in gtx.branches] == ["rolled back"]
    assert prepared_xacts(pg) == NONE_PREPARED and tpc_rows(pg)["RAC1"] == []
    assert live(c) == 0 and in_flight(c) == 0


# -- P3: PREPARE fails with a plain SQL error on a healthy node ---------------------

DEFERRED = {
    "unique": (
        "CREATE TABLE IF NOT EXISTS py_tpc_deferred (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)",
        psycopg.errors.UniqueViolation,
    ),
    "trigger": (
        """
        CREATE TABLE IF NOT EXISTS py_tpc_deferred (k int);
        CREATE OR REPLACE FUNCTION py_tpc_refuse() RETURNS trigger LANGUAGE plpgsql
            AS $$ BEGIN RAISE EXCEPTION 'refused at commit time'; END $$;
        CREATE CONSTRAINT TRIGGER py_tpc_refuse AFTER INSERT ON py_tpc_deferred
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION py_tpc_refuse();
        """,
        psycopg.errors.RaiseException,
    ),
}


@pytest.fixture(params=sorted(DEFERRED))
def deferred_failure(request, pg):
    ddl, exc = DEFERRED[request.param]
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("DROP TABLE IF EXISTS py_tpc_deferred")
            conn.execute(ddl)
    yield exc
    for dsn in pg.dsn.values():
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("DROP TABLE IF EXISTS py_tpc_deferred")


def test_a_prepare_failing_with_an_sql_error_rolls_back_and_returns_a_clean_connection(
    pg, cluster_factory, tables, deferred_failure
):
    c = cluster_factory(nodes=NAMES)
    # One connection per node: the one the failed branch used is the one reused.
    with NodePools(c, pg.dsn, min_size=1, max_size=1, timeout=5.0) as pools:
        for i in range(6):  # more than health.eject_after_failures (5)
            g = gtrid_on(c, "RAC1", f"sqlprep{i}")
            gtx = pools.global_transaction(g, timeout=5.0)
            with pytest.raises(deferred_failure):
                with gtx.branch() as conn:
                    conn.execute("INSERT INTO py_tpc_deferred VALUES (1), (1)")
            assert [b.state for b in gtx.branches] == ["rolled back"]
            assert live(c) == 0 and in_flight(c) == 0
            assert prepared_xacts(pg) == NONE_PREPARED
            gtx.rollback()  # nothing left to do: no InDoubtError
            # the pooled connection is back out of 2PC: plain work commits on it
            with pools.node_pool("RAC1").connection(timeout=5.0) as conn:
                conn.execute("INSERT INTO py_tpc VALUES ('plain', %s)", (str(i),))
        assert len(tpc_rows(pg)["RAC1"]) == 6
        m = node_metrics(c, "RAC1")
        # application errors never count against the node
        assert m["failures"] == 0 and m["ejections"] == 0 and c.node_state("RAC1") == ra.NodeState.UP


# -- P4: a lost COMMIT PREPARED reply -----------------------------------------------


def prepared_branch(pools: NodePools, node: str, prefix: str):
    c = pools.cluster
    g = gtrid_on(c, node, prefix)
    gtx = pools.global_transaction(g, timeout=2.0)
    with gtx.branch() as conn:
        conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
    assert [b.state for b in gtx.branches] == ["prepared"]
    return g, gtx


def test_a_lost_commit_prepared_reply_is_rechecked_and_the_transaction_completes(pg, proxies, proxied_pools):
    c = proxied_pools.cluster
    g, gtx = prepared_branch(proxied_pools, "RAC1", "lostcommit")
    proxies["RAC1"].lose_reply_after(b"COMMIT PREPARED")
    within(20, gtx.commit)
    assert proxies["RAC1"].reply_lost
    assert [b.state for b in gtx.branches] == ["committed"]
    assert tpc_rows(pg)["RAC1"] == [(g, "b0")] and prepared_xacts(pg) == NONE_PREPARED
    assert live(c) == 0 and in_flight(c) == 0


def test_a_lost_commit_reply_from_a_node_then_gone_is_completed_by_recover_all(pg, proxies, proxied_pools):
    c = proxied_pools.cluster
    g, gtx = prepared_branch(proxied_pools, "RAC1", "lostgone")
    proxies["RAC1"].lose_reply_after(b"COMMIT PREPARED", then_refuse=True)
    with pytest.raises(InDoubtError) as e:
        within(20, gtx.commit)
    assert [b.node_name for b in e.value.branches] == ["RAC1"]
    # The commit did happen; the library cannot know yet and keeps it on record.
    assert tpc_rows(pg)["RAC1"] == [(g, "b0")] and prepared_xacts(pg) == NONE_PREPARED
    assert live(c) == 1 and c.tx_route(transaction_key(g)).name == "RAC1" and in_flight(c) == 0
    proxies["RAC1"].heal()
    report = within(30, proxied_pools.recover_all, "commit", timeout=2.0)
    assert report.ok and report.resolved == []
    assert live(c) == 0  # nothing prepared anywhere: the gtrid is complete
    assert tpc_rows(pg)["RAC1"] == [(g, "b0")]


# -- P5: a node goes Down while a branch is active (soft affinity spans) -----------


def span(pools: NodePools, g: str, gtx) -> str:
    """Branch 0 on RAC2; RAC2 goes Down while it is active; branch 1 is
    re-placed. Returns branch 1's node."""
    c = pools.cluster
    with gtx.branch() as c0:
        c0.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
        c.set_node_state("RAC2", "down")
        try:
            with gtx.branch() as c1:
                c1.execute("INSERT INTO py_tpc VALUES (%s, 'b1')", (g,))
        finally:
            c.set_node_state("RAC2", "up")
    return gtx.branches[1].node_name


def test_soft_mode_a_spanned_transaction_commits_each_branch_on_its_own_node(pg, pools, caplog):
    c = pools.cluster
    g = gtrid_on(c, "RAC2", "span")
    gtx = pools.global_transaction(g, timeout=5.0)
    with caplog.at_level(logging.WARNING, logger="racaffinity"):
        other = span(pools, g, gtx)
    assert other != "RAC2"
    assert [b.state for b in gtx.branches] == ["prepared", "prepared"]
    assert any(g in r.getMessage() and "span" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    within(20, gtx.commit)
    assert [b.state for b in gtx.branches] == ["committed", "committed"]
    r = tpc_rows(pg)
    assert r["RAC2"] == [(g, "b0")] and r[other] == [(g, "b1")]
    assert prepared_xacts(pg) == NONE_PREPARED
    assert live(c) == 0 and in_flight(c) == 0
    # the core counts the span on the node the transaction left
    assert node_metrics(c, "RAC2")["tx_spans"] == 1
    assert sum(n["tx_spans"] for n in c.metrics()["nodes"]) == 1


def test_strict_mode_refuses_to_span_and_rolls_the_transaction_back(pg, pools):
    c = pools.cluster
    c.set_strict("transaction", True)
    g = gtrid_on(c, "RAC2", "strictspan")
    with pytest.raises(ra.StrictAffinityError):
        with pools.global_transaction(g, timeout=5.0) as gtx:
            span(pools, g, gtx)
    assert [b.state for b in gtx.branches] == ["rolled back"]
    assert prepared_xacts(pg) == NONE_PREPARED and all(v == [] for v in tpc_rows(pg).values())
    assert live(c) == 0 and in_flight(c) == 0
    assert sum(n["tx_spans"] for n in c.metrics()["nodes"]) == 0
    assert node_metrics(c, "RAC2")["strict_refusals"] == 1


@pytest.mark.timeout(90)
def test_a_commit_failing_midway_resolves_or_records_every_branch_and_leaks_nothing(pg, pools, cluster_factory):
    c = pools.cluster
    g = gtrid_on(c, "RAC2", "midway")
    gtx = pools.global_transaction(g, timeout=2.0)
    other = span(pools, g, gtx)
    i = NAMES.index(other) + 1
    pg.kill(i)  # branch 1's node crashes between prepare and commit
    try:
        with pytest.raises(InDoubtError) as e:
            within(30, gtx.commit)
        assert [b.node_name for b in e.value.branches] == [other]
        assert [b.state for b in gtx.branches] == ["committed", "in doubt"]
        assert in_flight(c) == 0 and live(c) == 1
        stats = pools.node_pool("RAC2").get_stats()
        assert stats["pool_available"] == stats["pool_size"]  # every connection back
    finally:
        pg.restart(i)
    wait_until(lambda: len(prepared_xacts(pg)[other]) == 1, 20)
    report = within(30, pools.recover_all, "commit", timeout=2.0)
    assert report.ok and [r.node_name for r in report.resolved] == [other]
    r = tpc_rows(pg)
    assert r["RAC2"] == [(g, "b0")] and r[other] == [(g, "b1")]
    assert prepared_xacts(pg) == NONE_PREPARED and live(c) == 0 and in_flight(c) == 0


# -- P6: a node that stops answering -----------------------------------------------


@pytest.mark.timeout(90)
def test_commit_on_a_blackholed_node_is_bounded_and_leaves_the_branch_in_doubt(pg, faulty):
    pools, ctl = faulty
    c = pools.cluster
    g, gtx = prepared_branch(pools, "RAC2", "hole")
    ctl.blackhole("RAC2")
    t0 = time.monotonic()
    with pytest.raises(InDoubtError):
        within(30, gtx.commit)
    assert time.monotonic() - t0 < 15
    assert [b.state for b in gtx.branches] == ["in doubt"]
    assert len(prepared_xacts(pg)["RAC2"]) == 1 and live(c) == 1 and in_flight(c) == 0
    assert pools.in_doubt == {g: [str(gtx.branches[0].xid)]}
    ctl.heal("RAC2")
    report = within(30, pools.recover_all, "commit", timeout=2.0)
    assert report.ok
    # resolved by the scan, or by the held-back COMMIT arriving after the heal
    assert [r.node_name for r in report.resolved] == ["RAC2"] or report.completed == [g]
    assert tpc_rows(pg)["RAC2"] == [(g, "b0")] and prepared_xacts(pg) == NONE_PREPARED
    assert live(c) == 0 and pools.in_doubt == {}


def test_a_recover_all_whose_rollback_answer_was_lost_leaves_no_gtrid_on_record(pg, proxies, proxied_pools):
    # The server ran the scan's ROLLBACK PREPARED and the answer was lost:
    # the run cannot know the outcome, and no later run finds the branch
    # prepared, so its recorded gtrid stayed live.
    c = proxied_pools.cluster
    prepare_directly(pg.dsn["RAC2"], "lost-recovery-RAC2", "b0")
    proxies["RAC2"].lose_reply_after(b"ROLLBACK PREPARED")
    report = within(30, proxied_pools.recover_all, "rollback", timeout=2.0, scope="node")
    assert proxies["RAC2"].reply_lost
    assert [r.gtrid for r in report.failed] == ["lost-recovery-RAC2"], report
    assert "RAC2" in report.unreachable, report
    assert prepared_xacts(pg) == NONE_PREPARED  # the server carried it out
    assert list(proxied_pools.in_doubt) == ["lost-recovery-RAC2"]
    report = within(30, proxied_pools.recover_all, "rollback", timeout=2.0, scope="node")
    assert report.ok and report.completed == ["lost-recovery-RAC2"], report
    assert proxied_pools.in_doubt == {}
    assert live(c) == 0


@pytest.mark.timeout(90)
def test_recover_all_resolves_a_healthy_nodes_branch_while_another_node_hangs(pg, faulty):
    pools, ctl = faulty
    for name in ("RAC1", "RAC3"):
        prepare_directly(pg.dsn[name], f"healthy-{name}", "b0")
    prepare_directly(pg.dsn["RAC2"], "hung-RAC2", "b0")
    # the RAC2 pool holds an open connection; from now on nothing answers on it
    wait_until(lambda: pools.node_pool("RAC2").get_stats().get("pool_available", 0) >= 1, 10)
    ctl.blackhole("RAC2")
    done = threading.Event()
    box = {}

    def run():
        box["report"] = pools.recover_all("rollback", timeout=6.0)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    # the healthy nodes' branches are resolved while RAC2 still hangs
    wait_until(lambda: prepared_xacts(pg)["RAC1"] == [] and prepared_xacts(pg)["RAC3"] == [], 5)
    assert not done.is_set()
    assert done.wait(30), "recover_all is not bounded by its timeout"
    report = box["report"]
    assert sorted(r.node_name for r in report.resolved) == ["RAC1", "RAC3"]
    assert list(report.unreachable) == ["RAC2"] and not report.ok
    assert len(prepared_xacts(pg)["RAC2"]) == 1
    ctl.heal("RAC2")
    report = within(30, pools.recover_all, "rollback", timeout=2.0)
    assert report.ok and [r.gtrid for r in report.resolved] == ["hung-RAC2"]
    assert prepared_xacts(pg) == NONE_PREPARED


# -- P7: RAC model, three instances of one database ---------------------------------


@pytest.fixture(params=["faultproxy", "toxiproxy"])
def instances(request, pg, cluster_factory, tables):
    """NodePools over three "instances" of one database (node RAC1's
    server), and their fault control: the test's own proxies, or Toxiproxy
    in RAC mode (`faults start 3 --rac`)."""
    if request.param == "toxiproxy":
        ctl = request.getfixturevalue("toxi")
        ctl.mode(rac=True)
        dsns = dict(ctl.dsn)
        px = None
    else:
        px = {name: FaultProxy(pg.port["RAC1"]) for name in NAMES}
        ctl = _Local(px)
        dsns = {n: px[n].dsn(pg.dsn["RAC1"]) for n in NAMES}
    pools = NodePools(cluster_factory(nodes=NAMES), dsns, min_size=1, max_size=2, timeout=2.0)
    yield pools, ctl
    pools.close(timeout=2.0)
    for p in (px or {}).values():
        p.close()


def one_database_prepared(pg):
    with psycopg.connect(pg.dsn["RAC1"], autocommit=True, connect_timeout=5) as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts")]


def test_database_scope_recovers_each_xid_once_through_any_instance(pg, instances):
    pools, _ctl = instances
    c = pools.cluster
    for i in range(3):
        prepare_directly(pg.dsn["RAC1"], f"rac-{i}", "b0")
    prepare_directly(pg.dsn["RAC1"], "rac-0", "b1")
    report = within(30, pools.recover_all, "commit", timeout=2.0, scope="database")
    assert report.ok and report.split == []
    assert sorted((r.gtrid, r.bqual) for r in report.resolved) == [
        ("rac-0", "b0"), ("rac-0", "b1"), ("rac-1", "b0"), ("rac-2", "b0")
    ]
    assert one_database_prepared(pg) == []
    assert sorted(tpc_rows(pg)["RAC1"]) == [("rac-0", "b0"), ("rac-0", "b1"), ("rac-1", "b0"), ("rac-2", "b0")]
    assert live(c) == 0


def test_database_scope_recovery_completes_with_one_instance_dead(pg, instances):
    pools, ctl = instances
    c = pools.cluster
    # one transaction this process knows (owner: RAC1), one a crashed TM left
    g = gtrid_on(c, "RAC1", "racown")
    gtx = pools.global_transaction(g, timeout=2.0)
    with gtx.branch() as conn:
        conn.execute("INSERT INTO py_tpc VALUES (%s, 'b0')", (g,))
    prepare_directly(pg.dsn["RAC1"], "rac-orphan", "b0")
    ctl.refuse("RAC1")  # the owner's instance dies
    report = within(30, pools.recover_all, "commit", timeout=2.0, scope="database")
    assert report.split == [] and report.failed == []
    assert sorted(r.gtrid for r in report.resolved) == sorted([g, "rac-orphan"])
    assert one_database_prepared(pg) == []
    assert sorted(tpc_rows(pg)["RAC1"]) == sorted([(g, "b0"), ("rac-orphan", "b0")])
    assert live(c) == 0


def test_database_scope_recovery_whose_rollback_answer_was_lost_leaves_no_gtrid_on_record(
    pg, cluster_factory, tables
):
    # The owner's instance ran the ROLLBACK PREPARED, its answer was lost
    # and no instance answers after it: the next run finds nothing prepared.
    px = {name: FaultProxy(pg.port["RAC1"]) for name in NAMES}
    pools = NodePools(cluster_factory(nodes=NAMES), {n: px[n].dsn(pg.dsn["RAC1"]) for n in NAMES},
                      min_size=0, max_size=2, timeout=2.0)
    try:
        c = pools.cluster
        prepare_directly(pg.dsn["RAC1"], "rac-lost", "b0")
        px["RAC1"].lose_reply_after(b"ROLLBACK PREPARED", then_refuse=True)
        px["RAC2"].refuse()
        px["RAC3"].refuse()
        report = within(30, pools.recover_all, "rollback", timeout=2.0, scope="database")
        assert px["RAC1"].reply_lost
        assert [r.gtrid for r in report.failed] == ["rac-lost"], report
        assert one_database_prepared(pg) == []  # the server carried it out
        assert list(pools.in_doubt) == ["rac-lost"]
        for p in px.values():
            p.heal()
        report = within(30, pools.recover_all, "rollback", timeout=2.0, scope="database")
        assert report.ok and report.completed == ["rac-lost"], report
        assert pools.in_doubt == {}
        assert live(c) == 0
    finally:
        pools.close(timeout=2.0)
        for p in px.values():
            p.close()


def test_database_scope_waits_once_for_a_blackholed_owner_and_counts_its_failure(pg, instances):
    # Six transactions owned by RAC2, whose instance then stops answering:
    # recovery goes through another instance after one wait on RAC2, not
    # one per xid, and that failed node operation counts once against it.
    pools, ctl = instances
    c = pools.cluster
    gtrids = []
    for i in range(6):
        g = gtrid_on(c, "RAC2", f"racown{i}")
        c.tx_begin(transaction_key(g))  # this process placed and prepared it on RAC2 ...
        c.tx_prepared(transaction_key(g))
        prepare_directly(pg.dsn["RAC1"], g, "b0")  # ... and lost its connections
        gtrids.append(g)
    assert all(c.tx_route(transaction_key(g)).name == "RAC2" for g in gtrids)
    failures = node_metrics(c, "RAC2")["failures"]
    ctl.blackhole("RAC2")
    t0 = time.monotonic()
    report = within(60, pools.recover_all, "commit", timeout=1.0, scope="database")
    took = time.monotonic() - t0
    assert report.ok and sorted(r.gtrid for r in report.resolved) == sorted(gtrids), report
    assert took < 6, f"{took:.1f}s: a wait on the dead owner per xid"
    assert node_metrics(c, "RAC2")["failures"] - failures == 1
    assert one_database_prepared(pg) == [] and live(c) == 0
