"""What the sync and async node pools share (`racaffinity.pools`): the
routing of a connection to a lease and a node's pool, the pools' arguments,
the affinity callback and the branches left in doubt."""

from __future__ import annotations

import math
import os
import threading
import weakref
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ._args import BytesLike, DataKey, bytes_arg, i64_arg
from ._cluster import Cluster
from ._cluster import _request_span as request_span
from ._errors import ConfigError, UnknownNodeError
from ._lib import ffi, lib
from ._cluster import _HOST_LEASES as HOST_LEASES
from ._routes import (
    HOST_LEASE_BASE,
    HOST_LEASE_NODES,
    LEASE_T,
    Outcome,
    PoolHostLease,
    context_pick,
    end_lease,
    new_,
    new_pool_host_lease,
)
from ._scopes import SCOPES, SESSION, TX, PinScope, SessionScope, Transaction, context_call
from ._ucp import callback_lease

__all__ = ["Base", "connect_timeout", "end_lease", "OK", "FAILED", "NEUTRAL"]

OK, FAILED, NEUTRAL = int(Outcome.OK), int(Outcome.FAILED), int(Outcome.NEUTRAL)


def _span(b: bytes) -> Any:
    """A `uint8_t[]` view of `b` for a request field (no copy)."""
    return ffi.from_buffer("uint8_t[]", b)

# The core keeps this much of a failed load's text (MAX_LOAD_ERROR_BYTES).
_LOAD_ERROR_BYTES = 512


def load_error_text(text: str) -> str:
    """A failed partition-map load's text as the core can take it: a C
    string (a NUL is shown as `\\0`), UTF-8 (a lone surrogate, as from a file
    name decoded with surrogateescape, is shown escaped) and cut to what the
    core keeps, so a long message (an exception quoting the whole result)
    is no longer than the 1 MiB a string argument may be."""
    b = text.replace("\0", "\\0").encode("utf-8", "backslashreplace")[:_LOAD_ERROR_BYTES]
    return b.decode("utf-8", "ignore")


def connect_timeout(timeout: Optional[float]) -> int:
    """libpq's `connect_timeout` (whole seconds, at least 2) for a pool whose
    `getconn` waits `timeout`: a connect to a node that accepts and never
    answers must end, or the pool's attempt hangs without limit."""
    return max(2, math.ceil(timeout)) if timeout else 10


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
        raise ConfigError(f"no connection string for node(s) {', '.join(missing)}")
    return out


class Base:
    """What the sync and async pools share: routing to a lease."""

    # Set in a forked child on node pools the parent made (`_forked_child`).
    _forked = False

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
        self._by_id: List[Any] = [None] * size  # its length never changes
        # The node ids below this a pinned borrow may count as a host lease
        # (`_acquire`, the pools' inline copy): 0 without host leases.
        self._host_nodes = min(size, HOST_LEASE_NODES) if HOST_LEASES else 0
        # What the pools' inline borrow reads, bound once (fixed for the
        # cluster's life): its pin variable and page, and whether a context
        # with no pin is balanced (not auto-pinned).
        self._pin_var = cluster._pin_var
        self._page = cluster._page
        self._balanced_inline = not cluster._auto_pin
        # Whether that balanced borrow is a host lease, which a node pool
        # ends in the page (`racaffinity_cluster_pick_host_begins`): one
        # call per borrow and release, not two.
        self._balanced_host = self._balanced_inline and HOST_LEASES
        # Raw lease buffers of ended borrows, reused by the balanced borrow
        # (list pop and append are atomic).
        self._lease_bufs: List[Any] = []
        self._heartbeat_on = heartbeat
        self.heartbeat_interval = float(heartbeat_interval) if heartbeat_interval is not None else cluster.heartbeat_interval
        if not self.heartbeat_interval > 0:
            raise ValueError("heartbeat_interval must be > 0")
        self.probe_timeout = float(probe_timeout) if probe_timeout is not None else min(1.0, self.heartbeat_interval)
        if not self.probe_timeout > 0:  # 0 or less fails every probe: healthy nodes would go Down
            raise ValueError("probe_timeout must be > 0")
        self._closed = False
        # The binding's branch map: gtrid -> {xid string: node} of branches a
        # GlobalTransaction left in doubt (racaffinity.tpc), until a retry or
        # recover_all resolves them.
        self._doubt: Dict[str, Dict[str, int]] = {}
        self._doubt_lock = threading.Lock()
        # xid string -> (backend pid, monotonic start of its branch) of an
        # in-doubt branch whose session may still be running (racaffinity.tpc).
        self._doubt_sessions: Dict[str, Tuple[int, float]] = {}
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

    def _note_in_doubt(self, gtrid: str, node: int, xid: str, session: Optional[Tuple[int, float]] = None) -> None:
        """`session`: (backend pid, monotonic start of the branch) of the
        session whose answer was lost, which may still run what it holds."""
        with self._doubt_lock:
            self._doubt.setdefault(gtrid, {})[xid] = node
            if session is not None:
                self._doubt_sessions[xid] = session

    def _session_ended(self, xid: str) -> None:
        with self._doubt_lock:
            self._doubt_sessions.pop(xid, None)

    def _doubt_sessions_of(self, nodes: Iterable[int]) -> Dict[str, Tuple[int, float]]:
        """xid string -> (pid, began) of the in-doubt branches on `nodes`
        whose session was not seen ended."""
        wanted = set(nodes)
        with self._doubt_lock:
            return {
                x: s for x, s in self._doubt_sessions.items()
                if any(self._doubt.get(g, {}).get(x) in wanted for g in self._doubt)
            }

    def _forget_in_doubt(self, gtrid: str, xid: Optional[str]) -> None:
        """Forgets one branch (`xid`) or, with None, the whole gtrid."""
        with self._doubt_lock:
            branches = self._doubt.get(gtrid)
            if branches is None:
                return
            if xid is not None:
                branches.pop(xid, None)
                self._doubt_sessions.pop(xid, None)
            else:
                for x in branches:
                    self._doubt_sessions.pop(x, None)
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
        """Leases the node for the next connection and returns (lease, that
        node's pool): a raw `racaffinity_lease`, or a `PoolHostLease` (or
        `HostLease`) for a pinned borrow; end any with `end_lease`. Everything
        the context knows (its transaction, the key or session argument or
        the context's session, its pin) goes to the core in one
        `racaffinity_request_pick`, and the core decides which affinity
        applies (`Cluster::route`).

        The hot path of every connection, so it calls the library directly
        with a raw `racaffinity_lease` (no `Lease` object); `_Connection`
        releases it exactly once."""
        c = self.cluster
        if key is not None and session is not None:
            raise TypeError("pass either key= or session=, not both")
        scopes = SCOPES.get()
        f = scopes.get(self._serial) if scopes is not None else None
        if key is None and session is None and f is None and self._callback is None:
            pin = c._pin_var.get()
            if pin is not None:
                if HOST_LEASES:
                    # Pinned: a host lease on the pin's cached route (see
                    # HostLease), with its guarantees: served only while the
                    # routing epoch, read before the pin's cache, is the one
                    # the route was cached under.
                    page = c._page
                    epoch = page[0]
                    if pin.epoch == epoch:  # never so for an ended pin
                        node = pin.route.node
                        by_id = self._by_id
                        if node < HOST_LEASE_NODES and node < len(by_id):
                            pool = by_id[node]
                            if pool is not None:
                                pin.hits += 1
                                page[HOST_LEASE_BASE + node] += 1
                                lease = new_pool_host_lease(PoolHostLease)
                                lease.node = node
                                lease._live = epoch
                                return lease, pool
                    if pin.active:
                        # One call that also caches the route for the next borrow.
                        return self._pool_of(c._pick_host_or_raw(epoch))
            elif not c._auto_pin:
                # Balanced: one call, without context_call's pin handling.
                buf = new_(LEASE_T)
                rc = context_pick(self._h, 0, buf)
                if rc:
                    c._raise(rc)
                return self._pool_of(buf)
            # Nothing but (at most) a pin: the one-affinity call, without
            # building a request (cffi struct writes cost more than the
            # routing).
            buf = new_(LEASE_T)
            context_call(c, context_pick, buf)  # its pin, an auto-pin or balancing
            return self._pool_of(buf)
        cb = self._callback
        if cb is not None and key is None and session is None and (f is None or f[TX] is None):
            # UCP's connection affinity callback: its context decides (below an
            # explicit key, session argument or transaction; above scopes).
            return self._pool_of(callback_lease(self, cb))
        buf = new_(LEASE_T)
        req = new_("racaffinity_route_request *")
        keep = []  # the request points into these until the call returns
        if f is not None and f[TX] is not None:
            gtrid = _span(f[TX].gtrid)
            keep.append(gtrid)
            req.gtrid, req.gtrid_len = gtrid, len(gtrid)
        if key is not None:
            if isinstance(key, int) and not isinstance(key, bool):
                req.key_i64, req.key_is_i64 = i64_arg(key), 1
            else:
                k = request_span(bytes_arg(key, "key"), "key")
                keep.append(k)
                req.key, req.key_len = k, len(k)
        if session is None and f is not None:
            session = f[SESSION]
        if session is not None:
            s = request_span(bytes_arg(session, "session key"), "session key")
            keep.append(s)
            req.session, req.session_len = s, len(s)
        pin = c._pin_var.get()
        if pin is not None and pin.active:
            req.context = pin.key
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
            end_lease(c, buf, NEUTRAL)
            self._no_pool(node)
        return buf, pool

    def _no_pool(self, node: int) -> None:
        raise UnknownNodeError(f"no pool for node {self.cluster.node_name(node)}")

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
            raise UnknownNodeError(f"no pool for node #{node}")
        return pool

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self._closed

    def items(self) -> List[Tuple[int, Any]]:
        """(node id, pool) for every node with a pool, in id order."""
        return [(i, p) for i, p in enumerate(self._by_id) if p is not None]

    def __repr__(self) -> str:
        nodes = ", ".join(f"{name}(#{i})" for i, (name, _dsn) in sorted(self._dsns.items()))
        hb = f" heartbeat={self.heartbeat_interval:g}s" if self._heartbeat_on else ""
        state = " closed" if self._closed else ""
        return f"<racaffinity.pools.{type(self).__name__} [{nodes}]{hb}{state}>"


# Every NodePools and AsyncNodePools made, for `_forked_child`.
LIVE_NODE_POOLS: "weakref.WeakSet[Base]" = weakref.WeakSet()

# Why a borrow in a forked child fails (`_reroute`).
FORKED = "these node pools were made before os.fork(), over the parent's sessions: a forked child makes its own"


def _forked_child() -> None:
    """Closes, in a forked child, every node pools object the parent made,
    without a word to the server: its pooled connections, its borrowed ones
    and its heartbeat's probes are the parent's sessions, and psycopg_pool's
    workers, the upkeep and the heartbeat are threads (or tasks) the fork did
    not copy. A borrow there would share a session with the parent, and a
    close() would send Terminate on each. Marked closed, psycopg_pool's
    getconn refuses, and both close()s return at once; the objects are
    left to the collector, whose psycopg finalizer ends a connection only
    in the process that made it."""
    for pools in list(LIVE_NODE_POOLS):
        pools._forked = True
        pools._closed = True
        for pool in pools._by_id:
            if pool is not None:
                pool._closed = True
        for drained in pools._drained.values():  # type: ignore[attr-defined]
            for pool in drained:
                pool._closed = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)
