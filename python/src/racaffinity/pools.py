"""Node pools over psycopg 3: one `psycopg_pool` pool per node.

    pools = NodePools(cluster, {"RAC1": dsn1, "RAC2": dsn2, "RAC3": dsn3})
    with pools.connection() as conn:                 # the context's pin, else balanced
        ...
    with pools.connection(key=4711) as conn: ...     # data affinity
    with pools.connection(session=sid) as conn: ...  # web-session affinity
    with cluster.transaction("gtrid-42"):            # every branch, every thread: one node
        with pools.connection() as conn: ...

Routing is the core's. The pools add:
- health feedback: every connection is a lease; a node failure (see
  `racaffinity._failures`: a lost, refused or timed-out connection, or a pool
  that cannot connect to its node) releases it FAILED, once, which feeds
  passive ejection, and is re-raised; application errors release NEUTRAL;
- an optional heartbeat (a daemon thread, or an asyncio task for
  `AsyncNodePools`) that probes every node with `SELECT 1` each
  `heartbeat_interval` and reports the result (`racaffinity_probe_report`);
- two-phase commit over psycopg's `tpc_*` API and recovery
  (`global_transaction`, `recover_all`; see `racaffinity.tpc`).

Needs `pip install racaffinity[postgres]` (psycopg 3 and psycopg_pool).
Connection strings and credentials are never shown in `repr`, logs or the
exceptions this module raises.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import psycopg
import psycopg_pool

from ._args import I64_MAX, I64_MIN, BytesLike, DataKey, bytes_arg
from ._cluster import Cluster
from ._routes import Outcome, context_pick, lease_release, new_
from ._scopes import SCOPES, PinScope, SessionScope, Transaction, context_call
from ._errors import ConfigError, KeyOverflowError, UnknownNodeError
from ._failures import ConnectAttempts, is_node_failure
from ._lib import ffi, lib
from ._ucp import PartitionMapLoader, Upkeep, callback_lease
from .tpc import GlobalTransaction, RecoveryReport, recover_all


__all__ = ["NodePools", "AsyncNodePools", "is_node_failure"]

log = logging.getLogger("racaffinity.pools")

_OK, _FAILED, _NEUTRAL = int(Outcome.OK), int(Outcome.FAILED), int(Outcome.NEUTRAL)


def _span(b: bytes) -> Any:
    """A `uint8_t[]` view of `b` for a request field (no copy)."""
    return ffi.from_buffer("uint8_t[]", b)

def _connect_timeout(timeout: Optional[float]) -> int:
    """libpq's `connect_timeout` (whole seconds, at least 2) for a pool whose
    `getconn` waits `timeout`: a connect to a node that accepts and never
    answers must end, or the pool's attempt hangs without limit."""
    return max(2, math.ceil(timeout)) if timeout else 10


def _tracked(base: Any, attempts: ConnectAttempts) -> Any:
    """A subclass of psycopg's connection class `base` whose `connect` feeds
    `attempts`, so a pool timeout can tell "cannot reach the node" from
    "busy" (`racaffinity._failures`)."""
    if asyncio.iscoroutinefunction(base.connect):

        class _AsyncTracked(base):  # type: ignore[misc, valid-type]
            @classmethod
            async def connect(cls, *args: Any, **kwargs: Any) -> Any:
                token = attempts.started()
                try:
                    conn = await super().connect(*args, **kwargs)
                except BaseException as e:
                    attempts.finished(token, e)
                    raise
                attempts.finished(token, None)
                return conn

        return _AsyncTracked

    class _Tracked(base):  # type: ignore[misc, valid-type]
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            token = attempts.started()
            try:
                conn = super().connect(*args, **kwargs)
            except BaseException as e:
                attempts.finished(token, e)
                raise
            attempts.finished(token, None)
            return conn

    return _Tracked


def _pool_kwargs(
    connect_kwargs: Mapping[str, Any], timeout: Optional[float], pool_kwargs: Dict[str, Any], base: Any
) -> Tuple[Dict[str, Any], ConnectAttempts]:
    """The keyword arguments of one node's pool: the connect arguments (with
    a bounded `connect_timeout` unless given) and a tracked connection class."""
    if "kwargs" in pool_kwargs:
        raise TypeError("pass connection arguments as connect_kwargs=, not kwargs=")
    kwargs = dict(connect_kwargs)
    kwargs.setdefault("connect_timeout", _connect_timeout(timeout))
    attempts = ConnectAttempts()
    extra = dict(pool_kwargs)
    extra["connection_class"] = _tracked(extra.pop("connection_class", base), attempts)
    extra["kwargs"] = kwargs
    return extra, attempts


def _node_dsns(cluster: Cluster, dsns: Mapping[str, str]) -> Dict[int, Tuple[str, str]]:
    """node id -> (name, dsn); every live node needs one."""
    if not isinstance(dsns, Mapping):
        raise TypeError(f"dsns must be a mapping of node name to connection string, not {type(dsns).__name__}")
    out: Dict[int, Tuple[str, str]] = {}
    for name, dsn in dsns.items():
        if not isinstance(dsn, str):
            raise TypeError(f"the connection string of node {name!r} must be a str")
        node = cluster.node_id(name)  # UnknownNodeError for a name the cluster lacks
        out[node] = (cluster.node_name(node), dsn)
    missing = [n.name for n in cluster.nodes if n.id not in out]
    if missing:
        raise ConfigError(f"no connection string for node(s) {', '.join(missing)}", 7)
    return out


class _Base:
    """What the sync and async pools share: routing to a lease."""

    def __init__(
        self,
        cluster: Cluster,
        dsns: Mapping[str, str],
        heartbeat: bool,
        heartbeat_interval: Optional[float],
        probe_timeout: Optional[float],
        connect_kwargs: Optional[Mapping[str, Any]],
    ) -> None:
        if not isinstance(cluster, Cluster):
            raise TypeError(f"cluster must be a racaffinity.Cluster, not {type(cluster).__name__}")
        self.cluster = cluster
        self._serial = cluster._serial
        self._h = cluster._h
        self._dsns = _node_dsns(cluster, dsns)
        self._connect_kwargs = dict(connect_kwargs or {})
        size = max(self._dsns) + 1 if self._dsns else 0
        self._by_id: List[Any] = [None] * size
        self._heartbeat_on = heartbeat
        self.heartbeat_interval = float(heartbeat_interval) if heartbeat_interval is not None else cluster.heartbeat_interval
        if not self.heartbeat_interval > 0:
            raise ValueError("heartbeat_interval must be > 0")
        self.probe_timeout = float(probe_timeout) if probe_timeout is not None else min(1.0, self.heartbeat_interval)
        self._closed = False
        # The binding's branch map: gtrid -> {xid string: node} of branches a
        # GlobalTransaction left in doubt (racaffinity.tpc), until a retry or
        # recover_all resolves them.
        self._doubt: Dict[str, Dict[str, int]] = {}
        self._doubt_lock = threading.Lock()
        # Seed 002 (UCP): the connection affinity callback (racaffinity._ucp).
        self._callback: Any = None

    def _set_callback(self, cb: Any) -> None:
        if cb is not None:
            missing = [
                m
                for m in (
                    "set_affinity_policy",
                    "get_affinity_policy",
                    "set_connection_affinity_context",
                    "get_connection_affinity_context",
                )
                if not callable(getattr(cb, m, None))
            ]
            if missing:
                raise TypeError(f"affinity_callback {type(cb).__name__} lacks {', '.join(missing)}")
        self._callback = cb

    @property
    def affinity_callback(self) -> Any:
        """The connection affinity callback (UCP's, in snake_case), or None."""
        return self._callback

    # -- in-doubt branches (kept for racaffinity.tpc) -----------------------------

    @property
    def in_doubt(self) -> Dict[str, List[str]]:
        """gtrid -> Xids (as strings) of the branches this process left in
        doubt and has not resolved yet."""
        with self._doubt_lock:
            return {g: sorted(x) for g, x in self._doubt.items()}

    def _note_in_doubt(self, gtrid: str, node: int, xid: str) -> None:
        with self._doubt_lock:
            self._doubt.setdefault(gtrid, {})[xid] = node

    def _forget_in_doubt(self, gtrid: str, xid: Optional[str]) -> None:
        """Forgets one branch (`xid`) or, with None, the whole gtrid."""
        with self._doubt_lock:
            branches = self._doubt.get(gtrid)
            if branches is None:
                return
            if xid is not None:
                branches.pop(xid, None)
            if xid is None or not branches:
                del self._doubt[gtrid]

    def _in_doubt_branches(self) -> Dict[str, Dict[str, int]]:
        """gtrid -> {xid string: node} (a copy)."""
        with self._doubt_lock:
            return {g: dict(x) for g, x in self._doubt.items()}

    def _node_dsn(self, node: int) -> str:
        return self._dsns[node][1]

    # -- routing ----------------------------------------------------------------

    def _acquire(self, key: Optional[DataKey], session: Optional[BytesLike]) -> Tuple[Any, Any]:
        """Leases the node for the next connection and returns (lease
        buffer, that node's pool). Everything the context knows (its
        transaction, the key or session argument or the context's session,
        its pin) goes to the core in one `racaffinity_request_pick`, and the
        core decides which affinity applies (`Cluster::route`).

        The hot path of every connection, so it calls the library directly
        with a raw `racaffinity_lease` (no `Lease` object); `_Connection`
        releases it exactly once."""
        c = self.cluster
        if key is not None and session is not None:
            raise TypeError("pass either key= or session=, not both")
        scopes = SCOPES.get()
        f = scopes.get(self._serial) if scopes is not None else None
        cb = self._callback
        if cb is not None and key is None and session is None and (f is None or f[1] is None):
            # UCP's connection affinity callback: its context decides (below an
            # explicit key, session argument or transaction; above scopes).
            return self._pool_of(callback_lease(self, cb))
        buf = new_("racaffinity_lease *")
        if key is None and session is None and (f is None or (f[1] is None and f[2] is None)):
            # Nothing but (at most) a pin: the one-affinity call, without
            # building a request (this is the common case, and cffi struct
            # writes cost more than the routing).
            context_call(c, context_pick, buf)  # its pin, an auto-pin or balancing
            return self._pool_of(buf)
        req = new_("racaffinity_route_request *")
        keep = []  # the request points into these until the call returns
        if f is not None and f[1] is not None:
            gtrid = _span(f[1].gtrid)
            keep.append(gtrid)
            req.gtrid, req.gtrid_len = gtrid, len(gtrid)
        if key is not None:
            if isinstance(key, int) and not isinstance(key, bool):
                if not I64_MIN <= key <= I64_MAX:
                    raise KeyOverflowError(f"int key {key} does not fit in 64 bits", 4)
                req.key_i64, req.key_is_i64 = key, 1
            else:
                k = _span(bytes_arg(key, "key"))
                keep.append(k)
                req.key, req.key_len = k, len(k)
        if session is None and f is not None:
            session = f[2]
        if session is not None:
            s = _span(bytes_arg(session, "session key"))
            keep.append(s)
            req.session, req.session_len = s, len(s)
        if f is not None and f[0] is not None and f[0].active:
            req.context = f[0].key
        rc = lib.racaffinity_request_pick(self._h, req, buf)
        if rc:
            c._raise(rc)
        return self._pool_of(buf)

    def _pool_of(self, buf: Any) -> Tuple[Any, Any]:
        c = self.cluster
        node = buf.node
        by_id = self._by_id
        pool = by_id[node] if node < len(by_id) else None
        if pool is None:
            lease_release(self._h, buf, _NEUTRAL)
            raise UnknownNodeError(f"no pool for node {c.node_name(node)}", 8)
        return buf, pool

    # -- conveniences that delegate to the cluster --------------------------------

    def pin(self) -> PinScope:
        """`cluster.pin()`: connections inside go to the pinned node."""
        return self.cluster.pin()

    def transaction(self, gtrid: BytesLike, *, prefer_pinned: bool = False) -> Transaction:
        """`cluster.transaction(gtrid)`: connections inside go to the gtrid's node."""
        return self.cluster.transaction(gtrid, prefer_pinned=prefer_pinned)

    def session(self, key: BytesLike) -> SessionScope:
        """`cluster.session(key)`: connections inside go to the session's node."""
        return self.cluster.session(key)

    def node_pool(self, node: Union[int, str]) -> Any:
        """The psycopg_pool pool of a node (by id or name)."""
        node = self.cluster.node_id(node)
        pool = self._by_id[node] if node < len(self._by_id) else None
        if pool is None:
            raise UnknownNodeError(f"no pool for node #{node}", 8)
        return pool

    def items(self) -> List[Tuple[int, Any]]:
        """(node id, pool) for every node with a pool, in id order."""
        return [(i, p) for i, p in enumerate(self._by_id) if p is not None]

    def __repr__(self) -> str:
        nodes = ", ".join(f"{name}(#{i})" for i, (name, _dsn) in sorted(self._dsns.items()))
        hb = f" heartbeat={self.heartbeat_interval:g}s" if self._heartbeat_on else ""
        state = " closed" if self._closed else ""
        return f"<racaffinity.pools.{type(self).__name__} [{nodes}]{hb}{state}>"


# ---------------------------------------------------------------------------
# sync


class _Connection:
    """`with pools.connection() as conn:` — what psycopg_pool's
    `ConnectionPool.connection()` does (getconn; the connection's own context:
    commit on success, rollback on error; putconn), without its generator
    context manager and its `usage_ms` statistic, inside a lease released OK,
    or FAILED on a node failure (`is_node_failure`), else NEUTRAL."""

    __slots__ = ("_pools", "_key", "_session", "_timeout", "_buf", "_pool", "_conn")

    def __init__(self, pools: "NodePools", key: Any, session: Any, timeout: Optional[float]) -> None:
        self._pools = pools
        self._key = key
        self._session = session
        self._timeout = timeout

    def __enter__(self) -> psycopg.Connection:
        buf, pool = self._pools._acquire(self._key, self._session)
        since = time.monotonic()
        try:
            try:
                conn = pool.getconn(self._timeout)
            except psycopg_pool.PoolClosed:
                # A planned drain retired this node's pool meanwhile: its successor serves.
                current = self._pools._by_id[buf.node]
                if current is pool or current is None or self._pools._closed:
                    raise
                pool = current
                conn = pool.getconn(self._timeout)
        except BaseException as e:
            failed = is_node_failure(e, pool, waited_since=since)
            lease_release(self._pools._h, buf, _FAILED if failed else _NEUTRAL)
            raise
        self._buf, self._pool, self._conn = buf, pool, conn
        return conn.__enter__()

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        pool = self._pool
        outcome = _OK if et is None else (_FAILED if is_node_failure(ev, pool) else _NEUTRAL)
        try:
            self._conn.__exit__(et, ev, tb)
        except BaseException as e:
            if outcome == _OK:
                outcome = _FAILED if is_node_failure(e, pool) else _NEUTRAL
            raise
        finally:
            try:
                pool.putconn(self._conn)
            finally:
                lease_release(self._pools._h, self._buf, outcome)


class NodePools(_Base):
    """One `psycopg_pool.ConnectionPool` per node.

    `dsns` maps every node name of `cluster` to its libpq connection string;
    `connect_kwargs` go to every connection (e.g. `{"password": ...}`), other
    keyword arguments to every `ConnectionPool` (`min_size`, `max_size`,
    `timeout`, …). With `heartbeat=True` a daemon thread probes each node
    every `heartbeat_interval` seconds (default: the cluster's
    `heartbeat.interval`) with `SELECT 1` on a dedicated probe connection,
    within `probe_timeout`, and reports each result. Close the pools (or use
    them as a context manager) to stop the heartbeat and close every pool."""

    def __init__(
        self,
        cluster: Cluster,
        dsns: Mapping[str, str],
        *,
        heartbeat: bool = False,
        heartbeat_interval: Optional[float] = None,
        probe_timeout: Optional[float] = None,
        connect_kwargs: Optional[Mapping[str, Any]] = None,
        min_size: int = 1,
        max_size: Optional[int] = None,
        timeout: float = 30.0,
        affinity_callback: Any = None,
        partition_map_loader: Optional[PartitionMapLoader] = None,
        partition_map_reload: Optional[float] = None,
        upkeep_interval: float = 0.2,
        **pool_kwargs: Any,
    ) -> None:
        super().__init__(cluster, dsns, heartbeat, heartbeat_interval, probe_timeout, connect_kwargs)
        self.timeout = timeout
        self._set_callback(affinity_callback)
        self._pool_args = (min_size, max_size, timeout, dict(pool_kwargs))
        self._upkeep: Optional[Upkeep] = None
        self._heartbeat: Optional[_Heartbeat] = None
        if not upkeep_interval > 0:
            raise ValueError("upkeep_interval must be > 0")
        if partition_map_reload is not None and not partition_map_reload > 0:
            raise ValueError("partition_map_reload must be > 0 (or None: at start and after HA events only)")
        try:
            for node in self._dsns:
                self._by_id[node] = self._new_pool(node, min_size, False)
            self._upkeep = Upkeep(self, upkeep_interval, partition_map_loader, partition_map_reload)
            self._upkeep.start()
        except BaseException:
            self.close()
            raise
        if heartbeat:
            self._heartbeat = _Heartbeat(self)
            self._heartbeat.start()

    def _new_pool(self, node: int, min_size: int, draining: bool) -> Any:
        name, dsn = self._dsns[node]
        _min, max_size, timeout, pool_kwargs = self._pool_args
        extra, attempts = _pool_kwargs(self._connect_kwargs, timeout, pool_kwargs, psycopg.Connection)
        pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size if max_size is not None or min_size > 0 else max(1, _min),
            timeout=timeout,
            name=f"racaffinity-{name}",
            open=False,
            **extra,
        )
        pool._racaffinity_connects = attempts  # read by _failures.is_node_failure
        pool._racaffinity_draining = draining
        pool.open(wait=False)
        return pool

    # -- seed 002 (UCP): planned drains, the partition-map loader ------------------

    def _drain_node(self, node: int) -> None:
        """A Draining node's pool: idle connections close now, busy ones when
        returned (the pool is retired: psycopg_pool closes a connection put
        back into a closed pool), and its successor keeps no idle connection
        while the node drains."""
        pool = self._by_id[node]
        if pool is None or self._closed:
            return
        if pool._racaffinity_draining and pool.get_stats().get("pool_available", 0) == 0:
            return
        self._by_id[node] = self._new_pool(node, 0, True)
        pool.close(timeout=1.0)

    def _undrain_node(self, node: int) -> None:
        """The node is Up again: its pool grows back to `min_size`."""
        pool = self._by_id[node]
        min_size, max_size = self._pool_args[0], self._pool_args[1]
        if pool is not None and getattr(pool, "_racaffinity_draining", False) and not self._closed:
            pool.resize(min_size, pool.max_size if max_size is None else max_size)
            pool._racaffinity_draining = False

    def apply_event(self, line: Union[str, bytes]) -> int:
        """`cluster.apply_event(line)`, then pool upkeep at once: a planned
        drain (`reason=USER`, `drain_timeout=`) starts draining the node's
        pool, and the partition-map loader reloads after a state change."""
        changed = self.cluster.apply_event(line)
        if self._upkeep is not None:
            self._upkeep.round()
        return changed

    def reload_partition_map(self) -> bool:
        """Reloads the partition map from the loader now; False if the load
        failed (the last good map stays)."""
        if self._upkeep is None or self._upkeep.loader is None:
            raise ConfigError("these pools have no partition_map_loader")
        return self._upkeep.reload("reload_partition_map()")

    @property
    def partition_map_loads(self) -> Tuple[int, int, Optional[str]]:
        """(successful loads, failed loads, the last load's error or None)."""
        u = self._upkeep
        return (u.loads, u.load_failures, u.load_error) if u is not None else (0, 0, None)

    def connection(
        self, *, key: Optional[DataKey] = None, session: Optional[BytesLike] = None, timeout: Optional[float] = None
    ) -> "_Connection":
        """A connection from the node the core routes to (see `_lease` for
        the order: transaction, session/key argument, session scope, pin,
        load balancing), as a context manager."""
        return _Connection(self, key, session, timeout)

    def global_transaction(self, gtrid: str, **kwargs: Any) -> GlobalTransaction:
        """A two-phase (XA-style) transaction over psycopg's tpc_* API; see
        `racaffinity.tpc.GlobalTransaction`."""
        return GlobalTransaction(self, gtrid, **kwargs)

    def recover_all(self, action: str = "rollback", **kwargs: Any) -> RecoveryReport:
        """Resolves every in-doubt branch on every node; see `racaffinity.tpc.recover_all`."""
        return recover_all(self, action, **kwargs)

    def check_heartbeat(self) -> None:
        """Runs one heartbeat round now (probes every node and reports)."""
        hb = self._heartbeat or _Heartbeat(self)
        hb.tick()
        if self._heartbeat is None:
            hb.close_probes()

    def close(self, timeout: float = 5.0) -> None:
        """Stops the heartbeat and closes every pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        hb = getattr(self, "_heartbeat", None)
        if hb is not None:
            hb.stop()
        upkeep = getattr(self, "_upkeep", None)
        if upkeep is not None:
            upkeep.stop()
        for pool in self._by_id:
            if pool is not None:
                try:
                    pool.close(timeout=timeout)
                except Exception:  # pragma: no cover
                    log.exception("racaffinity: closing a node pool failed")

    def __enter__(self) -> "NodePools":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.close()


class _Heartbeat(threading.Thread):
    """Probes every node each interval; one probe per node in flight. A probe
    that has not answered within `probe_timeout` counts as a miss, and so
    does every round in which it is still stuck."""

    def __init__(self, pools: NodePools) -> None:
        super().__init__(name="racaffinity-heartbeat", daemon=True)
        self._pools = pools
        self._stop_event = threading.Event()
        self._probes: Dict[int, threading.Thread] = {}
        self._results: Dict[int, bool] = {}
        self._conns: Dict[int, Any] = {}
        self._lock = threading.Lock()

    def run(self) -> None:
        interval = self._pools.heartbeat_interval
        nxt = time.monotonic()
        while not self._stop_event.is_set():
            try:
                self.tick()
            except Exception:  # never let the heartbeat die
                log.exception("racaffinity: heartbeat round failed")
            nxt += interval
            now = time.monotonic()
            if nxt < now:  # fell behind (a slow round): do not burst
                nxt = now + interval
            if self._stop_event.wait(nxt - now):
                break
        self.close_probes()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=self._pools.probe_timeout + 2.0)

    def _probe(self, node: int, dsn: str) -> None:
        ok = False
        try:
            conn = self._conns.get(node)
            if conn is None or conn.closed:
                kw = dict(self._pools._connect_kwargs)
                kw.setdefault("connect_timeout", max(2, math.ceil(self._pools.probe_timeout)))
                conn = psycopg.connect(dsn, autocommit=True, **kw)
                self._conns[node] = conn
            conn.execute("SELECT 1")
            ok = True
        except Exception as e:
            # A node that answers with an error of its own (a missing role, a
            # wrong password) is alive: only a node failure is a miss.
            ok = not is_node_failure(e)
            log.debug("racaffinity: probe of node #%d failed: %s", node, type(e).__name__)
            conn = self._conns.pop(node, None)
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
        with self._lock:
            self._results[node] = ok

    def tick(self) -> None:
        pools = self._pools
        cluster = pools.cluster
        deadline = time.monotonic() + pools.probe_timeout
        started = []
        verdicts: Dict[int, bool] = {}
        for node, (_name, dsn) in pools._dsns.items():
            t = self._probes.get(node)
            if t is not None and t.is_alive():
                verdicts[node] = False  # the last probe is still stuck
                continue
            with self._lock:
                self._results.pop(node, None)
            t = threading.Thread(target=self._probe, args=(node, dsn), name=f"racaffinity-probe-{node}", daemon=True)
            self._probes[node] = t
            t.start()
            started.append(node)
        for node in started:
            self._probes[node].join(max(0.0, deadline - time.monotonic()))
            with self._lock:
                verdicts[node] = self._results.get(node, False)
        for node, ok in verdicts.items():
            try:
                cluster.report_probe(node, ok)
            except Exception as e:  # a closed cluster or a removed node
                log.debug("racaffinity: report_probe(#%d) failed: %s", node, e)

    def close_probes(self) -> None:
        for conn in list(self._conns.values()):
            try:
                conn.close()
            except Exception:
                pass
        self._conns.clear()


# ---------------------------------------------------------------------------
# async


class _AsyncConnection:
    """`async with pools.connection() as conn:` (see `_Connection`)."""

    __slots__ = ("_pools", "_key", "_session", "_timeout", "_buf", "_pool", "_conn")

    def __init__(self, pools: "AsyncNodePools", key: Any, session: Any, timeout: Optional[float]) -> None:
        self._pools = pools
        self._key = key
        self._session = session
        self._timeout = timeout

    async def __aenter__(self) -> psycopg.AsyncConnection:
        buf, pool = self._pools._acquire(self._key, self._session)
        since = time.monotonic()
        try:
            conn = await pool.getconn(self._timeout)
        except BaseException as e:
            failed = is_node_failure(e, pool, waited_since=since)
            lease_release(self._pools._h, buf, _FAILED if failed else _NEUTRAL)
            raise
        self._buf, self._pool, self._conn = buf, pool, conn
        return await conn.__aenter__()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        pool = self._pool
        outcome = _OK if et is None else (_FAILED if is_node_failure(ev, pool) else _NEUTRAL)
        try:
            await self._conn.__aexit__(et, ev, tb)
        except BaseException as e:
            if outcome == _OK:
                outcome = _FAILED if is_node_failure(e, pool) else _NEUTRAL
            raise
        finally:
            try:
                await pool.putconn(self._conn)
            finally:
                lease_release(self._pools._h, self._buf, outcome)


class AsyncNodePools(_Base):
    """One `psycopg_pool.AsyncConnectionPool` per node; the asyncio version of
    `NodePools` (same arguments). Open it in a running loop: `async with
    AsyncNodePools(...) as pools:` or `await pools.open()`. The heartbeat is
    an asyncio task. Pins and transactions follow the asyncio task's context."""

    def __init__(
        self,
        cluster: Cluster,
        dsns: Mapping[str, str],
        *,
        heartbeat: bool = False,
        heartbeat_interval: Optional[float] = None,
        probe_timeout: Optional[float] = None,
        connect_kwargs: Optional[Mapping[str, Any]] = None,
        min_size: int = 1,
        max_size: Optional[int] = None,
        timeout: float = 30.0,
        affinity_callback: Any = None,
        **pool_kwargs: Any,
    ) -> None:
        super().__init__(cluster, dsns, heartbeat, heartbeat_interval, probe_timeout, connect_kwargs)
        self.timeout = timeout
        self._set_callback(affinity_callback)
        for node, (name, dsn) in self._dsns.items():
            extra, attempts = _pool_kwargs(self._connect_kwargs, timeout, pool_kwargs, psycopg.AsyncConnection)
            pool = psycopg_pool.AsyncConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                name=f"racaffinity-{name}",
                open=False,
                **extra,
            )
            pool._racaffinity_connects = attempts  # read by _failures.is_node_failure
            self._by_id[node] = pool
        self._hb_task: Optional["asyncio.Task[None]"] = None
        self._probes: Dict[int, "asyncio.Task[bool]"] = {}
        self._conns: Dict[int, Any] = {}

    async def open(self) -> None:
        for pool in self._by_id:
            if pool is not None:
                await pool.open(wait=False)
        if self._heartbeat_on and self._hb_task is None:
            self._hb_task = asyncio.get_running_loop().create_task(self._heartbeat_loop(), name="racaffinity-heartbeat")

    def connection(
        self, *, key: Optional[DataKey] = None, session: Optional[BytesLike] = None, timeout: Optional[float] = None
    ) -> "_AsyncConnection":
        """`async with pools.connection(...) as conn:` (see `NodePools.connection`)."""
        return _AsyncConnection(self, key, session, timeout)

    async def _probe(self, node: int, dsn: str) -> bool:
        try:
            conn = self._conns.get(node)
            if conn is None or conn.closed:
                kw = dict(self._connect_kwargs)
                kw.setdefault("connect_timeout", max(2, math.ceil(self.probe_timeout)))
                conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **kw)
                self._conns[node] = conn
            await conn.execute("SELECT 1")
            return True
        except Exception as e:
            ok = not is_node_failure(e)  # an answering node is alive (see _Heartbeat._probe)
            log.debug("racaffinity: probe of node #%d failed: %s", node, type(e).__name__)
            conn = self._conns.pop(node, None)
            if conn is not None:
                try:
                    await conn.close()
                except Exception:
                    pass
            return ok

    async def check_heartbeat(self) -> None:
        """Runs one heartbeat round now."""
        started: Dict[int, "asyncio.Task[bool]"] = {}
        verdicts: Dict[int, bool] = {}
        for node, (_name, dsn) in self._dsns.items():
            t = self._probes.get(node)
            if t is not None and not t.done():
                verdicts[node] = False  # still stuck
                continue
            t = asyncio.ensure_future(self._probe(node, dsn))
            self._probes[node] = t
            started[node] = t
        if started:
            await asyncio.wait(list(started.values()), timeout=self.probe_timeout)
        for node, t in started.items():
            verdicts[node] = t.done() and not t.cancelled() and t.exception() is None and bool(t.result())
        for node, ok in verdicts.items():
            try:
                self.cluster.report_probe(node, ok)
            except Exception as e:
                log.debug("racaffinity: report_probe(#%d) failed: %s", node, e)

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        while True:
            try:
                await self.check_heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("racaffinity: heartbeat round failed")
            nxt += self.heartbeat_interval
            now = loop.time()
            if nxt < now:
                nxt = now + self.heartbeat_interval
            await asyncio.sleep(nxt - now)

    async def close(self, timeout: float = 5.0) -> None:
        """Stops the heartbeat and closes every pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._hb_task is not None:
            self._hb_task.cancel()
            try:
                await self._hb_task
            except BaseException:
                pass
        for t in self._probes.values():
            t.cancel()
        for conn in list(self._conns.values()):
            try:
                await conn.close()
            except Exception:
                pass
        self._conns.clear()
        for pool in self._by_id:
            if pool is not None:
                await pool.close(timeout=timeout)

    async def __aenter__(self) -> "AsyncNodePools":
        await self.open()
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        await self.close()
