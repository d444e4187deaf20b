"""Bad inputs raise typed exceptions and never crash the interpreter."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import racaffinity as ra
from racaffinity import oracle

from conftest import NAMES, fan_line


@pytest.mark.parametrize("bad", [None, 1.5, object(), ["k"], {"k": 1}])
def test_wrong_types_are_type_errors(cluster, bad):
    for call in (
        lambda: cluster.tx_begin(bad),
        lambda: cluster.tx_route(bad),
        lambda: cluster.route_session(bad),
        lambda: cluster.end_session(bad),
        lambda: cluster.route_key(bad),
        lambda: cluster.partition_of(bad),
        lambda: cluster.apply_event(bad),
        lambda: cluster.set_strict(bad, True),
        lambda: cluster.set_node_state("RAC1", bad),
        lambda: cluster.node_state(bad),
        lambda: cluster.add_node(bad),
        lambda: cluster.remove_node(bad),
        lambda: cluster.report_probe(bad, True),
        lambda: cluster.transaction(bad),
        lambda: cluster.session(bad),
    ):
        with pytest.raises(TypeError):
            call()


def test_more_type_errors(cluster):
    with pytest.raises(TypeError):
        cluster.route_key(True)  # a bool is not a key
    with pytest.raises(TypeError):
        cluster.tx_begin(42)  # ints are data keys only
    with pytest.raises(TypeError):
        cluster.report_probe("RAC1", 1)
    with pytest.raises(TypeError):
        cluster.set_strict("data", "yes")
    with pytest.raises(TypeError):
        cluster.add_node("RAC9", weight="2")
    with pytest.raises(TypeError):
        oracle.easy_connect("h", "1521", "s", "i")
    with pytest.raises(TypeError):
        oracle.easy_connect(b"h", 1521, "s", 7)


def test_invalid_utf8(cluster):
    # bytes that are not UTF-8 where a string is expected: the library says so
    with pytest.raises(ra.InvalidUtf8Error) as e:
        cluster.apply_event(b"SERVICEMEMBER VERSION=1.0 instance=\xff\xfe status=down")
    assert e.value.code == 3
    with pytest.raises(ra.InvalidUtf8Error):
        cluster.set_node_state(b"RAC\xff", "down")
    with pytest.raises(ra.InvalidUtf8Error):
        oracle.descriptor(b"h\xc3", 1521, "s", "i")
    # a str with lone surrogates cannot become UTF-8 at all
    for call in (
        lambda: cluster.apply_event("SERVICEMEMBER instance=\udcff status=down"),
        lambda: cluster.tx_begin("g\ud800"),
        lambda: cluster.route_session("s\udcff"),
        lambda: cluster.route_key("k\udcff"),
        lambda: cluster.node_id("RAC\udcff"),
    ):
        with pytest.raises(ra.InvalidUtf8Error):
            call()
    # keys and gtrids are bytes: any bytes are fine
    assert cluster.route_key(b"\xff\xfe").node in range(3)
    assert cluster.tx_begin(b"\x00\xff").node in range(3)


def test_nul_inside_a_string_is_refused_not_truncated(cluster):
    with pytest.raises(ra.InvalidArgumentError):
        cluster.apply_event(fan_line("RAC2", "down") + "\0garbage")
    with pytest.raises(ra.InvalidArgumentError):
        cluster.set_node_state("RAC1\0", "down")
    assert cluster.node_state("RAC1") == ra.NodeState.UP


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "SERVICEMEMBER",
        "SERVICEMEMBER VERSION=1.0 status=sideways instance=RAC1",
        "VERSION=1.0 database=orcl service=svc { {instance=RAC1 percent=abc flag=GOOD aff=TRUE} }",
        "VERSION=1.0 database=orcl service=svc { {instance=RAC1 percent=50",
        "x" * 100_000,
        "SERVICEMEMBER " + "a=b " * 50_000,
    ],
)
def test_malformed_events_change_nothing(cluster, line):
    before = cluster.metrics()["nodes"]
    with pytest.raises(ra.EventParseError):
        cluster.apply_event(line)
    after = cluster.metrics()["nodes"]
    assert [n["state"] for n in after] == [n["state"] for n in before]


def test_oversized_inputs(cluster):
    for call in (
        lambda: cluster.tx_begin(b"g" * 65),
        lambda: cluster.tx_begin(b""),
        lambda: cluster.route_session(b"s" * 1025),
        lambda: cluster.route_session(""),
        lambda: cluster.route_key(b"k" * 1025),
        lambda: cluster.route_key(b""),
        lambda: cluster.partition_of(b"k" * 1025),
        lambda: cluster.apply_event("x" * (1 << 20 + 1)),
        lambda: cluster.route_key(b"k" * (1 << 21)),
        lambda: cluster.add_node("N" * 65),
    ):
        with pytest.raises(ra.InvalidArgumentError):
            call()
    # the limits themselves are fine
    assert cluster.tx_begin(b"g" * 64).node in range(3)
    assert cluster.route_key(b"k" * 1024).node in range(3)
    assert cluster.route_session("s" * 1024).node in range(3)


def test_out_of_range_numbers(cluster):
    for call in (
        lambda: cluster.node_state(-1),
        lambda: cluster.node_state(1 << 32),
        lambda: cluster.route_key(1 << 64),
        lambda: cluster.set_strict(1 << 40, True),
    ):
        with pytest.raises(ra.InvalidArgumentError):
            call()
    with pytest.raises(ra.UnknownNodeError):
        cluster.node_state(99)
    with pytest.raises(ra.UnknownNodeError):
        cluster.report_probe(99, True)
    with pytest.raises(ra.InvalidArgumentError):
        cluster.set_strict(4, True)  # not a racaffinity_scope: checked by the library


def test_use_after_close_from_many_threads():
    """Closing while other threads pick: each call finishes or raises
    ClosedError; nothing else, no crash, no leak of in-flight state."""
    for _ in range(20):
        c = ra.Cluster(nodes=NAMES)
        errors = []
        start = threading.Barrier(5)

        def worker():
            start.wait()
            try:
                for _ in range(2000):
                    with c.pick():
                        pass
            except ra.ClosedError:
                pass
            except Exception as e:  # pragma: no cover - reported
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        start.wait()
        c.close()
        for t in threads:
            t.join()
        assert errors == []


def test_garbage_never_crashes_the_interpreter():
    """Feed a child interpreter random garbage through every entry point; it
    must exit normally (a crash would be a signal exit code)."""
    code = r"""
import random, racaffinity as ra
rnd = random.Random(7)
c = ra.Cluster(nodes=["A", "B"])
def junk():
    k = rnd.randrange(6)
    if k == 0: return bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 2000)))
    if k == 1: return "".join(chr(rnd.randrange(0x110000)) for _ in range(rnd.randrange(0, 50)))
    if k == 2: return rnd.randrange(-2**70, 2**70)
    if k == 3: return None
    if k == 4: return rnd.random()
    return "SERVICEMEMBER VERSION=1.0 instance=A status=" + rnd.choice(["up", "down", "??"])
calls = [c.tx_begin, c.tx_route, c.tx_prepared, c.tx_end, c.tx_complete, c.route_session, c.end_session,
         c.route_key, c.partition_of, c.apply_event, c.node_id, c.node_state, c.remove_node, c.add_node,
         lambda x: c.set_node_state(x, x), lambda x: c.set_strict(x, True), lambda x: c.report_probe(x, False),
         lambda x: c.tx_recovered(x, x), lambda x: ra.Cluster(x) if isinstance(x, (str, bytes)) else None]
n = 0
for _ in range(20000):
    try:
        rnd.choice(calls)(junk()); n += 1
    except (ra.Error, TypeError, ValueError, OverflowError):
        n += 1
c.close()
print("ok", n)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok 20000")


def test_node_name_takes_ints_only_even_once_cached(cluster):
    """`node_name` caches names by id; a bool or a float equal to a cached
    id (True == 1 == 1.0 as dict keys) must still be a TypeError, as it is
    before the cache holds the id, rather than the cached node's name."""
    assert cluster.node_name(1) == NAMES[1]
    for bad in (True, 1.0, False, 0.0):
        with pytest.raises(TypeError):
            cluster.node_name(bad)


@pytest.mark.parametrize("seconds", [10**400, 2**1024, -(10**400)])
def test_a_duration_keyword_too_large_for_a_float_is_a_config_error(seconds):
    """Durations in seconds are ints or floats; an int past a float's range
    is a bad value like any other: `ConfigError` naming the key (docs/python.md),
    not the OverflowError of converting it to a float."""
    with pytest.raises(ra.ConfigError, match="heartbeat.interval"):
        ra.Cluster(nodes=NAMES, heartbeat_interval=seconds)
    with pytest.raises(ra.ConfigError, match="transaction.settle"):
        ra.Cluster(nodes=NAMES, transaction_settle=seconds)
