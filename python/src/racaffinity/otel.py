"""OpenTelemetry metrics for racaffinity's node pools (needs `opentelemetry-api`).

    from racaffinity.otel import instrument
    handle = instrument(pools)                  # the global MeterProvider, or meter_provider=...
    ...
    handle.uninstrument()

The names are OpenTelemetry's database-client connection metrics, one pool per
node, with the attribute `db.client.connection.pool.name` = `<cluster>-<node>`
(the pool names Java's `AffinityDataSource` gives its node pools), and the
core's affinity counters, named as the Java Micrometer binder names them:

| instrument | kind | from |
|---|---|---|
| `db.client.connection.count` (`db.client.connection.state` = `idle` / `used`) | observable up-down counter | `idle`: psycopg_pool's `get_stats()`; `used`: the connections borrowed through the hooks below and not returned (not those being made) |
| `db.client.connection.pending_requests`, `.max`, `.idle.min` | observable up-down counters | `get_stats()` |
| `db.client.connection.wait_time`, `.use_time` (s; buckets `DURATION_BUCKETS`) | histograms | each `getconn` / `putconn` of a node pool |
| `db.client.connection.timeouts` | counter | each `PoolTimeout` of a node pool |
| `racaffinity.node.picks`, `.affinity_hits`, `.repins`, `.strict_refusals`, `.failures` (`racaffinity.cluster`, `racaffinity.node`) | observable counters | `cluster.metrics()` |
| `racaffinity.node.in_flight`; `racaffinity.node.status` (1 for the current `racaffinity.node.state`: `up` / `draining` / `down`) | observable up-down counters | `cluster.metrics()` |
| deprecated, gone in the next release: `racaffinity.node.state` (1 for the current `racaffinity.node.state.value`), the same as `racaffinity.node.status` | observable up-down counter | `cluster.metrics()` |
| `racaffinity.scope.hits`, `.placements`, `.repins`, `.fallbacks`, `.strict_refusals` (`racaffinity.scope`); `racaffinity.scope.live` | observable counters; up-down counter | `cluster.metrics()` |
| with `topology.feed` only: `racaffinity.feed.connected` (1 or 0), `.revision`, `.lag` (`racaffinity.cluster`) | observable up-down counters | `cluster.metrics()["feed"]` |
| with `topology.feed` only: `racaffinity.feed.records.applied`, `.records.refused` | observable counters | `cluster.metrics()["feed"]` |

Wait and use times are measured around the node pools' own `getconn` and
`putconn`, which every `pools.connection()` goes through; a pool that replaces
a drained node's pool is instrumented at the next collection.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple

try:
    from opentelemetry import metrics as _otel_metrics
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "racaffinity.otel needs the OpenTelemetry API: pip install 'racaffinity[otel]' "
        "(or opentelemetry-api)"
    ) from e

import psycopg_pool

from ._errors import ClosedError

if TYPE_CHECKING:  # pragma: no cover
    from ._cluster import Cluster

__all__ = ["instrument", "Instrumentation"]

_Callback = Callable[[CallbackOptions], Iterable[Observation]]

POOL = "db.client.connection.pool.name"
_HOOKED = ("getconn", "putconn")
STATE = "db.client.connection.state"
CLUSTER = "racaffinity.cluster"
NODE = "racaffinity.node"
SCOPE = "racaffinity.scope"
# The node's state as an attribute of racaffinity.node.status (OpenTelemetry's hw.status /
# hw.state pattern). Before, the instrument was racaffinity.node.state with the attribute
# racaffinity.node.state.value: a name that was also a namespace, which OpenTelemetry's
# naming rules advise against. The old pair is served one release more, deprecated.
NODE_STATE = "racaffinity.node.state"
DEPRECATED_NODE_STATE = "racaffinity.node.state.value"
NODE_STATES = ("up", "draining", "down")
NODE_COUNTERS = {
    "picks": "Units of work routed to the node",
    "affinity_hits": "Picks of the node by an existing affinity",
    "repins": "Affinities moved to the node off an unavailable one",
    "strict_refusals": "Strict refusals naming the node",
    "failures": "Units of work on the node that ended in a node failure",
}
SCOPES = ("transaction", "session", "data", "thread")
# The topology feed's health (name suffix -> (field of metrics()["feed"], description)),
# named as Java's binders name it (java/micrometer FeedMeter).
FEED_LEVELS = {
    "connected": ("connected", "1 while a watch on the topology feed is open and answering, else 0"),
    "revision": ("revision", "The etcd revision up to which every feed record is applied"),
    "lag": ("lag", "Feed records written after the applied revision, at the last check"),
}
FEED_COUNTERS = {
    "records.applied": ("applied", "Feed records that changed or confirmed this cluster's view"),
    "records.refused": ("refused", "Feed records refused (malformed or unknown node); nothing changed"),
}
# Bucket bounds (seconds) of the duration histograms, the same as Java's binders: Prometheus
# histograms of both languages aggregate only when their bounds agree, and the SDK's
# default bounds (0, 5, 10, ... 10000) suit milliseconds, not seconds.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
SCOPE_COUNTERS = {
    "hits": "Requests routed by an existing affinity of the scope",
    "placements": "Affinities of the scope placed on a node",
    "repins": "Affinities of the scope moved off an unavailable node",
    "fallbacks": "Requests of the scope balanced because their node was unavailable",
    "strict_refusals": "Requests of the scope refused in strict mode",
}


def instrument(pools: Any, meter_provider: Any = None) -> "Instrumentation":
    """Registers the metrics of `pools` (a `NodePools` or `AsyncNodePools`)
    with `meter_provider` (default: OpenTelemetry's global one)."""
    return Instrumentation(pools, meter_provider)



_I64_MAX = (1 << 63) - 1


def _int64(value: int) -> int:
    """The core's u64 counter, capped at 2**63 - 1: OTel's data points are
    int64 and the OTLP encoder refuses the whole batch for one value past
    it; Java's binders cap alike (docs/java-datasource.md)."""
    return value if value <= _I64_MAX else _I64_MAX

class Instrumentation:
    """The instruments of one `NodePools`; `uninstrument()` undoes the pool hooks."""

    def __init__(self, pools: Any, meter_provider: Any = None) -> None:
        from . import __version__

        self._pools: Any = pools  # None once uninstrumented
        self._cluster: Optional[Cluster] = pools.cluster  # None once uninstrumented
        first = self._cluster.metrics()
        self._cluster_name = first["cluster"]
        provider = meter_provider if meter_provider is not None else _otel_metrics.get_meter_provider()
        meter = provider.get_meter("racaffinity", __version__)
        self._lock = threading.Lock()
        self._hooked: Dict[int, Tuple[Any, str]] = {}  # id(pool) -> (pool, pool name)
        # id(connection) -> (monotonic time of getconn, id(its pool))
        self._checked_out: Dict[int, Tuple[float, int]] = {}
        self._mine: Dict[int, Dict[str, Any]] = {}  # id(pool) -> the hooks this installed
        self._live: List[bool] = [True]  # emptied by uninstrument(): the hooks pass through
        self._closed = False

        self._wait = meter.create_histogram(
            "db.client.connection.wait_time", unit="s",
            description="The time it took to obtain an open connection from the pool",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self._use = meter.create_histogram(
            "db.client.connection.use_time", unit="s",
            description="The time between borrowing a connection and returning it to the pool",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self._timeouts = meter.create_counter(
            "db.client.connection.timeouts", unit="{timeout}",
            description="The number of connection timeouts that have occurred trying to obtain a connection from the pool")
        meter.create_observable_up_down_counter(
            "db.client.connection.count", [self._observe_count], unit="{connection}",
            description="The number of connections that are currently in state described by the state attribute")
        meter.create_observable_up_down_counter(
            "db.client.connection.pending_requests", [self._stat_callback("requests_waiting")],
            unit="{request}", description="The number of current pending requests for an open connection")
        meter.create_observable_up_down_counter(
            "db.client.connection.max", [self._stat_callback("pool_max")], unit="{connection}",
            description="The maximum number of open connections allowed")
        meter.create_observable_up_down_counter(
            "db.client.connection.idle.min", [self._stat_callback("pool_min")], unit="{connection}",
            description="The minimum number of idle open connections allowed")
        for name, description in NODE_COUNTERS.items():
            meter.create_observable_counter(
                f"racaffinity.node.{name}", [self._node_callback(name)], description=description)
        meter.create_observable_up_down_counter(
            "racaffinity.node.in_flight", [self._node_callback("in_flight")],
            description="Leases on the node not yet released")
        meter.create_observable_up_down_counter(
            "racaffinity.node.status", [self._state_callback(NODE_STATE)],
            description="1 for the node's current state (racaffinity.node.state), 0 for the others")
        meter.create_observable_up_down_counter(
            "racaffinity.node.state", [self._state_callback(DEPRECATED_NODE_STATE)],
            description="Deprecated: racaffinity.node.status (attribute racaffinity.node.state), the same "
                        "points; this name goes in the next release")
        for name, description in SCOPE_COUNTERS.items():
            meter.create_observable_counter(
                f"racaffinity.scope.{name}", [self._scope_callback(name)], description=description)
        meter.create_observable_up_down_counter(
            "racaffinity.scope.live", [self._scope_callback("live")],
            description="Affinities of the scope the core holds")
        # The feed is configuration: a cluster without one never gains one, so no instruments.
        if first.get("feed") is not None:
            for name, (key, description) in FEED_LEVELS.items():
                meter.create_observable_up_down_counter(
                    f"racaffinity.feed.{name}", [self._feed_callback(key)], description=description)
            for name, (key, description) in FEED_COUNTERS.items():
                meter.create_observable_counter(
                    f"racaffinity.feed.{name}", [self._feed_callback(key)], description=description)
        self._hook_pools()

    # -- the pool hooks --------------------------------------------------------------

    def _pool_name(self, node: int) -> str:
        cluster = self._cluster
        assert cluster is not None  # only hooking calls it, never once _closed
        return f"{self._cluster_name}-{cluster.node_name(node)}"

    def _hook_pools(self) -> List[Tuple[Any, str]]:
        """(pool, name) of every node pool now, hooking the ones not yet hooked
        (a drained node's pool is replaced by a new one)."""
        out = []
        with self._lock:
            if self._closed or self._pools.closed:
                return []
            listed = set()
            for node, pool in self._pools.items():
                # Hooked even while closed: psycopg_pool calls a pool that has
                # not opened yet closed too (`AsyncNodePools` opens in `async
                # with`, after `instrument()`), and its first borrows must be
                # measured.
                entry = self._hooked.get(id(pool))
                if entry is None or entry[0] is not pool:
                    entry = (pool, self._pool_name(node))
                    self._hook(pool, entry[1])
                    self._hooked[id(pool)] = entry
                listed.add(id(pool))
                # A closed pool keeps the counts of its last moment (one
                # connection `used` for ever): no point is better than that.
                if not pool.closed:
                    out.append(entry)
            # A pool no longer its node's (retired at a Down, a drain, a
            # reconnect back-off) is let go: kept, every failover's pools
            # would live as long as this object. Its hooks stay on it and
            # still take back the connections it lent.
            for key in [k for k in self._hooked if k not in listed]:
                del self._hooked[key]
                self._mine.pop(key, None)
        return out

    def _hook(self, pool: Any, name: str) -> None:
        attrs = {POOL: name}
        getconn, putconn = pool.getconn, pool.putconn
        # What uninstrument() puts back: None for the pool class's own method.
        below = {a: pool.__dict__.get(a) for a in _HOOKED}
        checked_out, wait, use, timeouts, live = self._checked_out, self._wait, self._use, self._timeouts, self._live

        # What both wrappers record, around the pool's own calls; nothing once
        # uninstrumented (another instrumentation may have wrapped these
        # wrappers, so they can stay in the chain after that).
        key = id(pool)

        def got(t0: float, conn: Any) -> Any:
            if live:
                now = time.monotonic()
                wait.record(now - t0, attrs)
                checked_out[id(conn)] = (now, key)
            return conn

        def returning(conn: Any) -> None:
            out = checked_out.pop(id(conn), None)
            if out is not None and live:
                use.record(time.monotonic() - out[0], attrs)

        if isinstance(pool, psycopg_pool.AsyncConnectionPool):

            async def agetconn(timeout: Optional[float] = None) -> Any:
                t0 = time.monotonic()
                try:
                    return got(t0, await getconn(timeout))
                except psycopg_pool.PoolTimeout:
                    if live:
                        timeouts.add(1, attrs)
                    raise

            async def aputconn(conn: Any) -> None:
                returning(conn)
                await putconn(conn)

            hooks: Dict[str, Any] = {"getconn": agetconn, "putconn": aputconn}
        else:

            def sgetconn(timeout: Optional[float] = None) -> Any:
                t0 = time.monotonic()
                try:
                    return got(t0, getconn(timeout))
                except psycopg_pool.PoolTimeout:
                    if live:
                        timeouts.add(1, attrs)
                    raise

            def sputconn(conn: Any) -> None:
                returning(conn)
                putconn(conn)

            hooks = {"getconn": sgetconn, "putconn": sputconn}
        for attr, fn in hooks.items():
            fn._racaffinity_below = (live, below[attr])
            setattr(pool, attr, fn)
        self._mine[id(pool)] = hooks

    def uninstrument(self) -> None:
        """Removes this instrumentation's pool hooks (another one's stay;
        a pool already replaced keeps them, passing through); the
        observable instruments report nothing more. Idempotent."""
        with self._lock:
            self._closed = True
            self._live.clear()
            for key, (pool, _name) in self._hooked.items():
                for attr, fn in self._mine.get(key, {}).items():
                    if pool.__dict__.get(attr) is not fn:
                        continue  # wrapped by a later instrumentation: passes through now
                    # Unwrap this one and any uninstrumented one below it.
                    below = fn._racaffinity_below[1]
                    while below is not None and hasattr(below, "_racaffinity_below") and not below._racaffinity_below[0]:
                        below = below._racaffinity_below[1]
                    if below is None:
                        pool.__dict__.pop(attr, None)
                    else:
                        setattr(pool, attr, below)
            self._hooked.clear()
            self._mine.clear()
            # The SDK keeps the callbacks (so this object) as long as the meter
            # provider: they must not keep the pools and the cluster too.
            self._pools = None
            self._cluster = None

    # -- observable callbacks --------------------------------------------------------

    def _stats(self) -> Iterable[Tuple[Dict[str, int], str]]:
        for pool, name in self._hook_pools():
            yield pool.get_stats(), name

    def _observe_count(self, _options: CallbackOptions) -> Iterable[Observation]:
        # `used` is what the getconn hooks handed out and putconn has not
        # taken back: psycopg_pool's `pool_size - pool_available` also
        # counts the connections it is still making (a pool connecting to
        # a silent node showed them all in use).
        hooked = self._hook_pools()
        held: Dict[int, int] = {}
        for _t0, key in list(self._checked_out.values()):
            held[key] = held.get(key, 0) + 1
        for pool, name in hooked:
            yield Observation(pool.get_stats().get("pool_available", 0), {POOL: name, STATE: "idle"})
            yield Observation(held.get(id(pool), 0), {POOL: name, STATE: "used"})

    def _stat_callback(self, key: str) -> _Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            for st, name in self._stats():
                yield Observation(st.get(key, 0), {POOL: name})

        return observe

    def _metrics(self) -> Optional[Dict[str, Any]]:
        cluster = self._cluster
        if self._closed or cluster is None or cluster.closed:
            return None
        try:
            return cluster.metrics()
        except ClosedError:  # closed since the check: as if closed before
            return None

    def _node_callback(self, key: str) -> _Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            m = self._metrics()
            for n in m["nodes"] if m else ():
                yield Observation(_int64(n[key]), {CLUSTER: self._cluster_name, NODE: n["name"]})

        return observe

    def _state_callback(self, attribute: str) -> _Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            m = self._metrics()
            for n in m["nodes"] if m else ():
                for state in NODE_STATES:
                    yield Observation(
                        1 if n["state"] == state else 0,
                        {CLUSTER: self._cluster_name, NODE: n["name"], attribute: state},
                    )

        return observe

    def _scope_callback(self, key: str) -> _Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            m = self._metrics()
            if not m:
                return
            for scope in SCOPES:
                yield Observation(_int64(m["scopes"][scope][key]), {CLUSTER: self._cluster_name, SCOPE: scope})

        return observe

    def _feed_callback(self, key: str) -> _Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            m = self._metrics()
            feed = m.get("feed") if m else None
            if feed is not None:
                yield Observation(_int64(int(feed[key])), {CLUSTER: self._cluster_name})

        return observe
