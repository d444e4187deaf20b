"""The topology feed through the Python binding, over a real 3-member etcd
cluster (tests/cluster/etcdnodes) started by this module on its own ports:
records reach a Python subscriber in revision order; operator calls write
through the feed to every subscribed process; a subscriber cut off from etcd
by Toxiproxy for 20 s converges after the heal with nothing lost or applied
twice."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional

import pytest

import racaffinity as ra
from conftest import REPO, wait_until

# The variables tests/cluster/etcdnodes and the Rust suite's etcd read, so
# that one run's settings keep all of it off another run's ports and data
# root (the older RACAFF_PY_ETCD_BASE_PORT still counts when
# RACAFF_ETCD_BASE_PORT is not set; RACAFF_ETCD_PEER_BASE_PORT reaches
# etcdnodes through the environment). Without them the port is this suite's
# own (the Rust suite's default to 24890, 25090 and 25110, each with peers
# 10 above), so `make test`, which runs the suites one after another, never
# starts two clusters on one port.
BASE_PORT = int(os.environ.get("RACAFF_ETCD_BASE_PORT") or os.environ.get("RACAFF_PY_ETCD_BASE_PORT") or "24940")
ETCD_DIR = os.environ.get("RACAFF_ETCD_DIR") or f"/tmp/racaffinity-etcd-py-feed-{BASE_PORT}"
ETCDNODES = str(REPO / "tests" / "cluster" / "etcdnodes")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Etcd:
    def __init__(self) -> None:
        self.env = dict(
            os.environ,
            RACAFF_ETCD_BASE_PORT=str(BASE_PORT),
            RACAFF_ETCD_DIR=ETCD_DIR,
        )
        self.run("start", "3")
        exports = self.run("env")
        line = next(l for l in exports.splitlines() if "RACAFF_ETCD_ENDPOINTS=" in l)
        self.endpoints: List[str] = line.split("=", 1)[1].strip("'\"").split(",")

    def run(self, *args: str) -> str:
        done = subprocess.run([ETCDNODES, *args], env=self.env, check=True, capture_output=True, text=True, timeout=900)
        return done.stdout

    def call(self, path: str, body: Dict) -> Dict:
        last: Optional[Exception] = None
        for ep in self.endpoints:
            req = urllib.request.Request(f"http://{ep}{path}", data=json.dumps(body).encode(), method="POST")
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return json.loads(resp.read())
            except OSError as e:
                last = e
        raise AssertionError(f"no etcd member answered {path}: {last}")

    def put(self, key: str, value: str) -> int:
        return int(self.call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})["header"]["revision"])

    def url(self, prefix: str, endpoints: Optional[List[str]] = None) -> str:
        return f"etcd://{','.join(endpoints or self.endpoints)}/{prefix}"


@pytest.fixture(scope="module")
def etcd():
    e = Etcd()
    yield e
    e.run("destroy")


def subscriber(url: str) -> ra.Cluster:
    return ra.Cluster(f"nodes = RAC1, RAC2, RAC3\ntopology.feed = {url}\ntopology.feed_timeout = 1s")


def feed(c: ra.Cluster) -> Dict:
    f = c.metrics()["feed"]
    assert f is not None, "a subscribed cluster reports its feed"
    return f


def state(c: ra.Cluster, node: str) -> str:
    return str(c.node_state(node).name).lower()


def test_records_reach_a_python_subscriber_in_revision_order(etcd: Etcd) -> None:
    etcd.put("py1/node/RAC1/state", "down")
    c = subscriber(etcd.url("py1"))
    assert state(c, "RAC1") == "down", "read before the constructor returns"
    etcd.put("py1/node/RAC2/state", "draining timeout=30s")
    etcd.put("py1/node/RAC1/state", "up")
    etcd.put("py1/node/RAC3/weight", "5")
    last = etcd.put("py1/node/RAC3/weight", "6")
    wait_until(lambda: feed(c)["revision"] >= last, 30)
    assert (state(c, "RAC1"), state(c, "RAC2")) == ("up", "draining")
    assert c.metrics()["nodes"][2]["weight"] == 6, "the later revision wins"
    f = feed(c)
    assert (f["applied"] + f["stale"], f["refused"], f["connected"]) == (5, 0, True), f
    assert "racaffinity_feed_revision{" in c.metrics_prometheus()
    c.close()


def test_operator_calls_write_through_the_feed(etcd: Etcd) -> None:
    here, there = subscriber(etcd.url("py2")), subscriber(etcd.url("py2"))
    here.set_node_state("RAC2", "down")
    assert state(here, "RAC2") == "down"
    wait_until(lambda: state(there, "RAC2") == "down", 30)
    there.set_node_state("RAC2", "up")
    wait_until(lambda: state(here, "RAC2") == "up", 30)
    here.add_node("RAC4", weight=2)
    wait_until(lambda: "RAC4" in [n["name"] for n in there.metrics()["nodes"]], 30)
    assert here.metrics()["fingerprint"] == there.metrics()["fingerprint"]

    cut_off = subscriber("etcd://127.0.0.1:1/py2")
    assert feed(cut_off)["connected"] is False
    with pytest.raises(ra.FeedUnavailableError, match="127.0.0.1:1"):
        cut_off.set_node_state("RAC2", "down")
    assert state(cut_off, "RAC2") == "up", "nothing changed"


class ToxiproxyApi:
    """One Toxiproxy proxy of this module's own, in front of etcd member 1."""

    def __init__(self, api: str, upstream: str) -> None:
        self.api = api
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.name = f"feed_etcd_{BASE_PORT}"
        self._req("DELETE", f"/proxies/{self.name}", None, ok_missing=True)
        self._req("POST", "/proxies", {"name": self.name, "listen": f"127.0.0.1:{self.port}", "upstream": upstream})

    def _req(self, method: str, path: str, body: Optional[Dict], ok_missing: bool = False) -> None:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method)
        try:
            urllib.request.urlopen(req, timeout=5).close()
        except urllib.error.HTTPError as e:
            if not (ok_missing and e.code == 404):
                raise

    def blackhole(self) -> None:
        for stream in ("upstream", "downstream"):
            self._req("POST", f"/proxies/{self.name}/toxics",
                      {"name": f"bh_{stream}", "type": "timeout", "stream": stream, "attributes": {"timeout": 0}})

    def heal(self) -> None:
        for stream in ("upstream", "downstream"):
            self._req("DELETE", f"/proxies/{self.name}/toxics/bh_{stream}", None, ok_missing=True)

    def remove(self) -> None:
        self._req("DELETE", f"/proxies/{self.name}", None, ok_missing=True)


def test_a_subscriber_partitioned_for_20s_converges_with_nothing_lost_or_applied_twice(etcd: Etcd, toxiproxy) -> None:
    api = next(l for l in toxiproxy._run("env").splitlines() if "RACAFF_TOXIPROXY_URL=" in l)
    proxy = ToxiproxyApi(api.split("=", 1)[1].strip("'\""), etcd.endpoints[0])
    try:
        c = subscriber(etcd.url("py3", [f"127.0.0.1:{proxy.port}"]))
        first = etcd.put("py3/node/RAC1/weight", "1")
        wait_until(lambda: feed(c)["revision"] >= first, 30)
        proxy.blackhole()
        written = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            written += 1
            last = etcd.put("py3/node/RAC1/weight", str(written + 1))
            if written % 5 == 0:
                etcd.put("py3/node/RAC2/state", "down" if written % 10 else "up")
                written += 1
            time.sleep(0.5)
        # Control: while cut off, the subscriber has none of it (so the
        # convergence below is the resumed watch's doing).
        f = feed(c)
        assert f["connected"] is False and f["revision"] < last, f
        assert c.metrics()["nodes"][0]["weight"] == 1
        proxy.heal()
        wait_until(lambda: feed(c)["revision"] >= last, 30)
        f = feed(c)
        assert f["applied"] + f["stale"] == written + 1, f"each record applied exactly once: {f}"
        assert f["reconnects"] >= 1 and f["full_reads"] == 1, f
        expected = base64.b64decode(etcd.call("/v3/kv/range", {"key": _b64("py3/node/RAC1/weight")})["kvs"][0]["value"])
        assert c.metrics()["nodes"][0]["weight"] == int(expected)
    finally:
        proxy.remove()


def test_a_forked_child_keeps_following_the_feed(etcd: Etcd) -> None:
    # fork() copies no thread: the child's clusters start a subscriber of
    # their own (the library's pthread_atfork child handler).
    c = subscriber(etcd.url("py4"))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        seen = b"0"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if state(c, "RAC3") == "down":
                    seen = b"1"
                    break
                time.sleep(0.02)
        finally:
            os.write(w, seen)
            os._exit(0)
    os.close(w)
    etcd.put("py4/node/RAC3/state", "down")
    seen = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert seen == b"1", "the child saw the record written after the fork"
    # The parent's subscriber gets the record at its own pace (the child
    # may see it first): waited for as the child waited, not read at once
    # (a CI run under load read `up` here just after the child's answer).
    wait_until(lambda: state(c, "RAC3") == "down", 30)


def test_an_ons_relay_publishes_fan_lines_to_the_fleet(etcd: Etcd) -> None:
    here, there = subscriber(etcd.url("py5")), subscriber(etcd.url("py5"))
    line = "SERVICEMEMBER VERSION=1.0 service=svc instance=RAC3 status=down reason=FAILURE"
    rev = here.publish_event(line)
    assert rev > 0 and state(here, "RAC3") == "down"
    wait_until(lambda: state(there, "RAC3") == "down", 30)
    with pytest.raises(ra.EventParseError):
        here.publish_event("not an event")
    with pytest.raises(ra.FeedUnavailableError, match="no topology.feed"):
        ra.Cluster("nodes = RAC1, RAC2, RAC3").publish_event(line)


class _NoPools:
    """What racaffinity.otel reads of a NodePools, without pools: the feed's
    instruments come from the cluster alone."""

    closed = False

    def __init__(self, cluster: ra.Cluster) -> None:
        self.cluster = cluster

    def items(self):
        return []


def test_otel_reports_the_feeds_health(etcd: Etcd) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from racaffinity.otel import instrument

    def points(reader: InMemoryMetricReader) -> Dict[str, List]:
        out: Dict[str, List] = {}
        data = reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend((dict(p.attributes), p.value) for p in m.data.data_points)
        return out

    c = subscriber(etcd.url("py-otel"))
    etcd.put("py-otel/node/RAC9/state", "down")  # refused: no such node
    last = etcd.put("py-otel/node/RAC1/state", "down")
    wait_until(lambda: feed(c)["revision"] >= last, 30)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(_NoPools(c), meter_provider=provider)
    pts = points(reader)
    cluster = {"racaffinity.cluster": c.metrics()["cluster"]}
    f = feed(c)
    assert pts["racaffinity.feed.connected"] == [(cluster, 1)], pts
    assert pts["racaffinity.feed.revision"] == [(cluster, f["revision"])]
    assert pts["racaffinity.feed.lag"] == [(cluster, 0)]
    assert pts["racaffinity.feed.records.applied"] == [(cluster, f["applied"])]
    assert pts["racaffinity.feed.records.refused"] == [(cluster, 1)]
    handle.uninstrument()
    provider.shutdown()

    plain = ra.Cluster("nodes = RAC1, RAC2")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    handle = instrument(_NoPools(plain), meter_provider=provider)
    assert not [n for n in points(reader) if n.startswith("racaffinity.feed.")], "no feed, no feed instruments"
    handle.uninstrument()
    provider.shutdown()
    plain.close()
    c.close()
