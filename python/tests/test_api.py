"""The Cluster API without database nodes: config, routes, leases,
transactions, sessions, keys, events, metrics and the exception table."""

from __future__ import annotations

import datetime
import gc
import re
import weakref
from pathlib import Path

import pytest

import racaffinity as ra
from racaffinity import _errors
from racaffinity._lib import ffi, lib

from conftest import NAMES, REPO, fan_line


def test_version_matches_the_workspace():
    text = (REPO / "Cargo.toml").read_text()
    want = re.search(r'^version = "(.*)"', text, re.M).group(1)
    assert ra.version() == want == ra.__version__
    # The header's macros, through the cffi module built from it.
    assert f"{lib.RACAFFINITY_VERSION_MAJOR}.{lib.RACAFFINITY_VERSION_MINOR}.{lib.RACAFFINITY_VERSION_PATCH}" == want


def test_loads_the_bundled_library():
    assert Path(ra.LIBRARY_PATH).is_file()
    assert Path(ra.LIBRARY_PATH).parent.name == "_native"


def test_every_result_code_of_the_header_has_one_exception():
    codes = dict(ffi.typeof("racaffinity_result").relements)
    assert codes.pop("RACAFFINITY_RESULT_OK") == 0
    assert sorted(ra.EXCEPTIONS) == sorted(codes.values())
    for name, code in codes.items():
        cls = ra.exception_for(code)
        assert issubclass(cls, ra.Error)
        assert cls.code == code, name
    assert len(set(ra.EXCEPTIONS.values())) == len(ra.EXCEPTIONS)
    assert ra.exception_for(999) is ra.Error  # codes are only ever added


def test_the_package_exports_every_exception_and_only_names_it_has():
    # racaffinity.__all__ spells the exceptions out (so linters see the
    # re-exports): it must stay in step with racaffinity._errors.__all__.
    assert set(_errors.__all__) <= set(ra.__all__)
    assert len(set(ra.__all__)) == len(ra.__all__)
    for name in ra.__all__:
        assert hasattr(ra, name), name


def test_errors_the_binding_raises_itself_carry_their_class_code():
    # Raised before any library call (bad UTF-8, a NUL, an int out of range,
    # a weight, a config keyword): the class gives the code, as for the
    # library's own errors; raise sites pass no number of their own.
    c = ra.Cluster("nodes = A, B")
    try:
        cases = [
            (ra.InvalidUtf8Error, lambda: c.apply_event("\udc80"), lib.RACAFFINITY_RESULT_INVALID_UTF8),
            (ra.InvalidArgumentError, lambda: c.remove_node("A\0B"), lib.RACAFFINITY_RESULT_INVALID_ARGUMENT),
            (ra.InvalidArgumentError, lambda: c.add_node("C", weight=0), lib.RACAFFINITY_RESULT_INVALID_ARGUMENT),
            (ra.KeyOverflowError, lambda: c.route_key(2**64), lib.RACAFFINITY_RESULT_INVALID_ARGUMENT),
            (ra.ConfigError, lambda: ra.Cluster(nodes=["A=B"]), lib.RACAFFINITY_RESULT_CONFIG),
        ]
        for cls, call, code in cases:
            with pytest.raises(cls) as e:
                call()
            assert e.value.code == code == type(e.value).code, (cls, e.value)
    finally:
        c.close()


def test_exception_hierarchy():
    assert issubclass(ra.InvalidArgumentError, ValueError)
    assert issubclass(ra.InvalidUtf8Error, ra.InvalidArgumentError)
    assert issubclass(ra.KeyOverflowError, OverflowError)
    assert issubclass(ra.KeyOverflowError, ra.InvalidArgumentError)
    assert issubclass(ra.ConfigError, ValueError)
    assert issubclass(ra.EventParseError, ValueError)
    assert issubclass(ra.UnknownNodeError, LookupError)
    assert issubclass(ra.PreparedNodeUnavailableError, ra.StrictAffinityError)
    assert ra.ClosedError.code == lib.RACAFFINITY_RESULT_INVALID_HANDLE


def test_exceptions_print_their_public_name():
    import traceback

    import racaffinity.tpc as tpc

    for name in _errors.__all__:
        cls = getattr(ra, name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            assert f"{cls.__module__}.{cls.__qualname__}" == f"racaffinity.{name}", cls
    with pytest.raises(ra.ConfigError) as e:
        ra.Cluster("nodes = A; recovery.scope = rac")
    assert traceback.format_exception_only(e.value)[0].startswith("racaffinity.ConfigError: ")
    assert tpc.InDoubtError.__module__ == "racaffinity.tpc"


def test_route_key_says_which_key_types_it_takes():
    with ra.Cluster(nodes=["A", "B"]) as c:
        with pytest.raises(TypeError, match=r"bytes, str or int, not float"):
            c.route_key(1.5)
        with pytest.raises(TypeError, match=r"bytes, str or int, not float"):
            c.partition_of(1.5)


def test_recovery_scope_keyword():
    with ra.Cluster(nodes=["A", "B"], recovery_scope="database") as c:
        assert c.recovery_scope == "database"
    with pytest.raises(ra.ConfigError, match="recovery.scope"):
        ra.Cluster(nodes=["A"], recovery_scope="rac")


def test_the_sqlalchemy_extra_brings_the_driver_of_its_sample():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    extras = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("psycopg") for d in extras["sqlalchemy"]), extras["sqlalchemy"]
    docs = (REPO / "docs" / "python.md").read_text()
    assert "sync-only" not in docs


# -- construction and config ----------------------------------------------------


def test_cluster_from_text_and_from_keywords_agree():
    with ra.Cluster("nodes = A, B, C\npolicy = random; transaction.strict = true") as a, ra.Cluster(
        nodes=["A", "B", "C"], policy="random", transaction_strict=True
    ) as b:
        assert [n.name for n in a.nodes] == [n.name for n in b.nodes] == ["A", "B", "C"]
        ma, mb = a.metrics(), b.metrics()
        assert ma["policy"] == mb["policy"] == "random"
        assert ma["scopes"]["transaction"]["strict"] and mb["scopes"]["transaction"]["strict"]
        for g in (b"g1", b"gtrid-42", "unicode-ü"):
            assert a.tx_begin(g).node == b.tx_begin(g).node


def test_keyword_config_covers_mappings_durations_and_text():
    c = ra.Cluster(
        "name = sales",
        nodes=["A", "B"],
        node_addresses={"A": "h1:1522", "B": "[::1]:1521"},
        node_weights={"B": 3},
        heartbeat_interval=0.2,
        session_idle_ttl=datetime.timedelta(minutes=5),
        health_eject_backoff="2s",
        data_partitions=7,
        data_partition_map={3: "B"},
        thread_strict=False,
    )
    with c:
        m = c.metrics()
        assert m["cluster"] == "sales"
        assert [n["weight"] for n in m["nodes"]] == [1, 3]
        assert c.heartbeat_interval == 0.2
        assert c.node_address("a") == "h1:1522"
        assert c.node_address("B") == "[::1]:1521"


def test_keyword_config_sets_machines_zones_and_where_this_process_runs():
    # A and B share machine m1, so a session token's backup of either is C
    # (seed 001: the backup lives on another machine); without machines any
    # other node would do.
    with ra.Cluster(
        nodes=["A", "B", "C"],
        node_machines={"A": "m1", "B": "m1", "C": "m2"},
        node_zones={"A": "z1", "B": "z2", "C": "z2"},
        local_machine="m2",
        local_zone="z1",
        locality_spill_percent=50,
    ) as c:
        assert [n["locality"] for n in c.metrics()["nodes"]] == ["zone", "remote", "machine"]
        seen = set()
        for i in range(200):
            r = c.session_routing(f"s{i}")
            seen.add(r.primary_name)
            assert r.backup_name is not None
            if r.primary_name in ("A", "B"):
                assert r.backup_name == "C", r
            else:
                assert r.backup_name in ("A", "B"), r
        assert seen == {"A", "B", "C"}
        assert "locality.spill_percent = 50" in c.config_text
    with pytest.raises(ra.ConfigError, match="locality.spill_percent"):
        ra.Cluster(nodes=["A"], locality_spill_percent=1000001)
    with pytest.raises(TypeError, match="node_zones"):
        ra.Cluster(nodes=["A"], node_zones={"A": 1})
    with pytest.raises(ra.ConfigError, match="local_machine"):
        ra.Cluster(nodes=["A"], local_machine="m1\nnodes = B")


def test_keyword_config_sets_the_transaction_settle_time():
    for settle, refused in ((60, True), (datetime.timedelta(0), False), ("0ms", False)):
        with ra.Cluster(nodes=["RAC1", "RAC2", "RAC3"], transaction_strict=True, transaction_settle=settle) as c:
            c.apply_event(fan_line("RAC2", "down"))
            errors = []
            for i in range(20):
                try:
                    c.tx_begin(f"g{i}")
                except ra.StrictAffinityError as e:
                    errors.append(str(e))
            if refused:
                assert errors and all("transaction.settle = 60000 ms" in e for e in errors), errors
            else:
                assert errors == [], (settle, errors)
    with pytest.raises(ra.ConfigError, match="transaction.settle"):
        ra.Cluster(nodes=["A"], transaction_settle="2h")


def test_keyword_config_subscribes_to_a_topology_feed():
    # Nothing listens on port 1: the cluster starts, subscribed but cut off.
    with ra.Cluster(nodes=["A", "B"], topology_feed="etcd://127.0.0.1:1/kw", topology_feed_timeout=0.2) as c:
        feed = c.metrics()["feed"]
        assert feed is not None
        assert feed["url"] == "etcd://127.0.0.1:1/kw"
        assert feed["connected"] is False
        assert "topology.feed_timeout = 200ms" in c.config_text
    with ra.Cluster(nodes=["A"]) as c:
        assert c.metrics()["feed"] is None
    with pytest.raises(ra.ConfigError, match="topology.feed"):
        ra.Cluster(nodes=["A"], topology_feed="http://127.0.0.1:1/kw")
    with pytest.raises(ra.ConfigError, match="topology.feed_timeout"):
        ra.Cluster(nodes=["A"], topology_feed="etcd://127.0.0.1:1/kw", topology_feed_timeout=120)


def test_every_documented_config_key_has_a_keyword():
    from racaffinity._config import KEYWORDS

    targets = {key for key, _kind in KEYWORDS.values()}
    doc = (REPO / "docs" / "configuration.md").read_text()
    keys = []
    for line in doc.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            keys += re.findall(r"`([^`]+)`", first)
    assert len(keys) > 25, keys
    spelled = {k.replace("<NAME>", "{}").replace("<P>", "{}") for k in keys}
    assert spelled - targets == set(), "config keys no Cluster() keyword writes"

def test_recovery_scope_comes_from_the_config():
    with ra.Cluster(nodes=["A", "B"]) as c:
        assert c.recovery_scope == "node"
    with ra.Cluster("nodes = A, B; recovery.scope = database") as c:
        assert c.recovery_scope == "database"
    with pytest.raises(ra.ConfigError, match="recovery.scope"):
        ra.Cluster("nodes = A; recovery.scope = rac")


def test_heartbeat_defaults():
    with ra.Cluster(nodes=["A"]) as c:
        assert c.heartbeat_interval == 10.0
        assert c.heartbeat_misses == 3
    with ra.Cluster("nodes=A; heartbeat.interval = 2m; heartbeat.misses = 5") as c:
        assert c.heartbeat_interval == 120.0
        assert c.heartbeat_misses == 5


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"nodes": ["A"], "policy": "fastest"}, ra.ConfigError),
        ({"nodes": ["A", "a"]}, ra.ConfigError),
        ({"nodes": ["A"], "service": "svc;policy=random"}, ra.ConfigError),  # no injection
        ({"nodes": ["A"], "service": "svc\npolicy=random"}, ra.ConfigError),
        ({"nodes": ["A=B"]}, ra.ConfigError),
        ({"nodes": ["A"], "heartbeat_interval": 0.0001}, ra.ConfigError),
        ({"nodes": ["A"], "heartbeat_interval": 0}, ra.ConfigError),
        ({"nodes": ["A"], "heartbeat_interval": float("inf")}, ra.ConfigError),
        ({"nodes": ["A"], "session_idle_ttl": float("inf")}, ra.ConfigError),
        ({"nodes": ["A"], "bogus": 1}, TypeError),
        ({"nodes": "A,B"}, TypeError),
        ({"nodes": ["A"], "transaction_strict": "yes"}, TypeError),
        ({"nodes": ["A"], "data_partitions": "7"}, TypeError),
        ({"nodes": ["A"], "heartbeat_interval": [1]}, TypeError),
    ],
)
def test_bad_keyword_config(kwargs, exc):
    with pytest.raises(exc):
        ra.Cluster(**kwargs)


def test_config_error_message_names_the_key():
    with pytest.raises(ra.ConfigError) as e:
        ra.Cluster("nodes = A\nsession.mode = sometimes")
    assert "session.mode" in str(e.value)
    assert e.value.code == lib.RACAFFINITY_RESULT_CONFIG


def test_config_text_type():
    with pytest.raises(TypeError):
        ra.Cluster(42)
    with pytest.raises(ra.InvalidUtf8Error):
        ra.Cluster(b"nodes = \xff\xfe")
    with pytest.raises(ra.InvalidUtf8Error):
        ra.Cluster("nodes = \udcff")
    with pytest.raises(ra.InvalidArgumentError):
        ra.Cluster("nodes = A\0B")


# -- lifecycle -------------------------------------------------------------------


def test_close_is_idempotent_and_use_after_close_raises_closed():
    c = ra.Cluster(nodes=NAMES)
    lease = c.pick()
    c.close()
    c.close()
    assert c.closed
    for call in (
        c.pick,
        c.route,
        lambda: c.tx_begin(b"g"),
        lambda: c.route_key(1),
        lambda: c.route_session("s"),
        lambda: c.apply_event(fan_line("RAC1", "down")),
        lambda: c.metrics(),
        lambda: c.metrics_prometheus(),
        lambda: c.node_state(0),
        lambda: c.set_strict("data", True),
        lambda: lease.release(),
        lambda: c.pin().__enter__(),
        lambda: len(c),
    ):
        with pytest.raises(ra.ClosedError, match="closed"):
            call()
    assert "closed" in repr(c)


def test_context_manager_closes_and_del_frees():
    with ra.Cluster(nodes=NAMES) as c:
        pass
    assert c.closed
    d = ra.Cluster(nodes=NAMES)
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is None


def test_many_clusters_are_freed_by_gc():
    # More than the 4096 live-handle limit: __del__ must free them.
    for _ in range(5000):
        ra.Cluster(nodes=["A"])


# -- routes and leases --------------------------------------------------------------


def test_pick_lease_release_and_double_release(cluster):
    lease = cluster.pick()
    assert lease.name in NAMES and lease.kind == ra.RouteKind.BALANCED
    assert cluster.metrics()["nodes"][lease.node]["in_flight"] == 1
    lease.release(ra.Outcome.FAILED)
    assert cluster.metrics()["nodes"][lease.node]["failures"] == 1
    with pytest.raises(ra.InvalidLeaseError):
        lease.release()
    with cluster.pick() as l2:
        pass
    assert l2.released
    with pytest.raises(ValueError):
        with cluster.pick():
            raise ValueError("not a node failure")
    m = cluster.metrics()
    assert sum(n["in_flight"] for n in m["nodes"]) == 0
    assert sum(n["failures"] for n in m["nodes"]) == 1


def test_release_with_a_bad_outcome(cluster):
    lease = cluster.pick()
    with pytest.raises(ra.InvalidArgumentError):
        lease.release(7)
    lease.release(ra.Outcome.NEUTRAL)


def test_lease_of_a_routed_node(cluster):
    with cluster.lease("RAC2") as lease:
        assert lease.node == 1 and lease.kind == ra.RouteKind.AFFINITY
    with pytest.raises(ra.UnknownNodeError):
        cluster.lease(17)


def test_transaction_scope(cluster):
    with cluster.transaction("gtrid-42") as tx:
        assert tx.name in NAMES
        assert tx.route().node == tx.node
        assert cluster.current_transaction() is tx
        with cluster.transaction(b"gtrid-42") as tx2:  # a second branch
            assert tx2.node == tx.node and tx2.begin_route.kind == ra.RouteKind.AFFINITY
        tx.prepared()
        cluster.set_node_state(tx.name, "down")
        assert tx.route().node == tx.node  # 2PC goes where the branch is, whatever the state
        with pytest.raises(ra.PreparedNodeUnavailableError):
            cluster.tx_begin("gtrid-42")  # but no new branch joins a prepared transaction
        cluster.set_node_state(tx.name, ra.NodeState.UP)
    assert cluster.current_transaction() is None
    with pytest.raises(ra.UnknownTransactionError):
        cluster.tx_route("gtrid-42")


def test_transaction_complete_inside_scope(cluster):
    with cluster.transaction("g-c") as tx:
        tx.complete()
    with pytest.raises(ra.UnknownTransactionError):
        cluster.tx_end("g-c")


def test_transaction_prefer_pinned(cluster_factory):
    c = cluster_factory(nodes=NAMES, transaction_placement="balanced")
    with c.pin() as pinned:
        for i in range(10):
            with c.transaction(f"pp-{i}", prefer_pinned=True) as tx:
                assert tx.node == pinned.node


def test_strict_transaction_refuses(cluster_factory):
    c = cluster_factory(nodes=NAMES, transaction_strict=True)
    node = c.tx_begin("s1")
    c.set_node_state(node.name, "down")
    with pytest.raises(ra.StrictAffinityError) as e:
        c.tx_begin("s1")
    assert not isinstance(e.value, ra.PreparedNodeUnavailableError)
    c.set_strict(ra.Scope.TRANSACTION, False)
    assert c.tx_begin("s1").kind == ra.RouteKind.REPINNED


def test_sessions(cluster):
    r = cluster.route_session("JSESSIONID=1f2e")
    assert all(cluster.route_session(b"JSESSIONID=1f2e").node == r.node for _ in range(5))
    with cluster.session("JSESSIONID=1f2e") as r2:
        assert r2.node == r.node and cluster.current_session() == b"JSESSIONID=1f2e"
    assert cluster.current_session() is None
    assert cluster.end_session("JSESSIONID=1f2e") is True
    assert cluster.end_session("JSESSIONID=1f2e") is False


def test_data_keys(cluster):
    assert cluster.route_key(4711).node == cluster.route_key(4711).node
    assert cluster.route_key("customer-1") == cluster.route_key(b"customer-1")
    assert cluster.route_key(bytearray(b"k")) == cluster.route_key(memoryview(b"k"))
    assert cluster.route_key(-(1 << 63)).kind == ra.RouteKind.AFFINITY
    assert cluster.route_key((1 << 63) - 1).kind == ra.RouteKind.AFFINITY
    with pytest.raises(ra.KeyOverflowError):
        cluster.route_key(1 << 63)
    with pytest.raises(OverflowError):
        cluster.route_key(-(1 << 63) - 1)
    p = cluster.partition_of(b"customer-1")
    assert 0 <= p < 4096


def test_nodes_add_remove_and_state(cluster):
    assert [(n.id, n.name, n.state) for n in cluster.nodes] == [(i, n, ra.NodeState.UP) for i, n in enumerate(NAMES)]
    new = cluster.add_node("RAC4", "h4:1521", weight=2)
    assert new == 3 and cluster.node_id("rac4") == 3 and len(cluster) == 4
    with pytest.raises(ra.DuplicateNodeError):
        cluster.add_node("rac4")
    with pytest.raises(ra.InvalidArgumentError):
        cluster.add_node("bad name")
    cluster.remove_node("RAC2")
    assert [n.name for n in cluster.nodes] == ["RAC1", "RAC3", "RAC4"]
    assert cluster.node_name(1) == "RAC2"  # removed nodes keep their names
    assert cluster.node_state(1) == ra.NodeState.DOWN
    with pytest.raises(ra.UnknownNodeError):
        cluster.node_id("RAC2")
    cluster.set_node_state("RAC3", "draining")
    assert cluster.node_state("RAC3") == ra.NodeState.DRAINING
    with pytest.raises(ra.InvalidArgumentError):
        cluster.set_node_state("RAC3", "sleeping")
    with pytest.raises(ra.InvalidArgumentError):
        cluster.set_node_state("RAC3", 9)
    with pytest.raises(ra.UnknownNodeError):
        cluster.set_node_state("NOPE", "up")
    with pytest.raises(ra.InvalidArgumentError):
        cluster.set_strict("galaxy", True)


def test_events_probes_and_outcomes(cluster_factory):
    c = cluster_factory(nodes=NAMES, database="orcl", service="svc", health_eject_after_failures=2)
    assert c.apply_event(fan_line("RAC2", "down")) == 1
    assert c.node_state("RAC2") == ra.NodeState.DOWN
    assert all(c.pick().node != 1 for _ in range(50))
    assert c.apply_event(fan_line("RAC2", "up")) == 1
    assert c.apply_event(fan_line("RAC2", "down", "USER")) == 1
    assert c.node_state("RAC2") == ra.NodeState.DRAINING
    with pytest.raises(ra.EventParseError):
        c.apply_event("SERVICEMEMBER garbage")
    with pytest.raises(ra.UnknownNodeError):
        c.apply_event(fan_line("RAC9", "down"))
    with pytest.raises(ra.ForeignEventError):
        c.apply_event(fan_line("RAC1", "down").replace("database=orcl", "database=other"))
    c.report_outcome("RAC3", False)
    c.report_outcome(2, False)
    assert c.node_state("RAC3") == ra.NodeState.DOWN  # ejected after 2 failures
    for _ in range(3):
        c.report_probe("RAC1", False)
    assert c.node_state("RAC1") == ra.NodeState.DOWN
    c.report_probe("RAC1", True)
    assert c.node_state("RAC1") == ra.NodeState.UP


def test_metrics_json_and_prometheus(cluster):
    for _ in range(10):
        cluster.pick().release()
    m = cluster.metrics()
    assert [n["name"] for n in m["nodes"]] == NAMES
    assert sum(n["picks"] for n in m["nodes"]) == 10
    text = cluster.metrics_prometheus()
    assert "racaffinity_node_picks_total" in text and 'node="RAC1"' in text
    # The info series, and its pre-_info name for one release (deprecated).
    fp = f'fingerprint="{m["fingerprint"]}"}} 1'
    assert "racaffinity_topology_fingerprint_info{cluster=" in text and fp in text
    assert "# HELP racaffinity_topology_fingerprint Deprecated" in text


def test_route_in_and_out_of_a_pin(cluster):
    assert cluster.route().kind == ra.RouteKind.BALANCED
    with cluster.pin() as p:
        assert cluster.pinned()
        r = cluster.route()
        assert r.node == p.node and r.kind == ra.RouteKind.AFFINITY
    assert not cluster.pinned()
    assert cluster.metrics()["scopes"]["thread"]["live"] == 0


def test_repr_never_fails(cluster):
    assert "RAC1" in repr(cluster)
    assert "RAC" in repr(cluster.pick())
    assert "Transaction" in repr(cluster.transaction("g"))


def test_errors_carry_the_library_message():
    with ra.Cluster(nodes=NAMES) as c:
        with pytest.raises(ra.InvalidArgumentError) as e:
            c.tx_begin(b"x" * 65)
        assert "64" in str(e.value) and e.value.code == lib.RACAFFINITY_RESULT_INVALID_ARGUMENT
        assert _errors.result_message(lib.RACAFFINITY_RESULT_PANIC).startswith("internal panic")


def test_feed_records_join_by_version_in_any_order(cluster_factory):
    # The versioned path for shared inputs (docs/operations.md, "Feed
    # records"): the same records in opposite orders end alike.
    records = [
        (5, "node/RAC2/state", "draining timeout=30s"),
        (6, "node/RAC2/state", "down"),
        (7, "node/RAC1/weight", "4"),
        (8, "partition_map", "0=RAC3,1=RAC2"),
        (9, "node/RAC2/state", None),
    ]
    views = []
    for order in (records, list(reversed(records))):
        c = cluster_factory(nodes=NAMES, transaction_strict=True)
        applied = [c.apply_feed_record(*r) for r in order]
        assert applied[0] is True
        views.append((c.node_state("RAC2"), c.metrics()["fingerprint"]))
    assert views[0] == views[1]
    assert views[0][0] == ra.NodeState.UP


def test_feed_records_refuse_bad_input_with_a_reason(cluster_factory):
    c = cluster_factory(nodes=NAMES)
    assert c.apply_feed_record(3, "node/RAC1/state", "down") is True
    assert c.apply_feed_record(2, "node/RAC1/state", "up") is False
    with pytest.raises(ra.UnknownNodeError):
        c.apply_feed_record(4, "node/NOPE/state", "down")
    with pytest.raises(ra.InvalidArgumentError, match="unknown key"):
        c.apply_feed_record(4, "nodes/RAC1", "present")
    with pytest.raises(TypeError):
        c.apply_feed_record(-1, "node/RAC1/state", "up")
    assert c.node_state("RAC1") == ra.NodeState.DOWN
