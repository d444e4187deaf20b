"""Context-local affinity state: each context's (thread's or asyncio
task's) pin, transaction and session per cluster, and the scopes that set
them (`PinScope`, `Transaction`, `SessionScope`)."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from ._errors import INVALID_HANDLE, ClosedError, UnknownTransactionError, keeping_last_error
from ._lib import NULL, lib
from ._routes import PLACED, Route, new_, route_of

if TYPE_CHECKING:  # pragma: no cover
    from ._cluster import Cluster

__all__ = ["PinScope", "Transaction", "SessionScope", "SCOPES", "TX", "SESSION", "slot", "set_slot", "context_call"]


# Transactions and sessions: one ContextVar for all clusters, cluster serial
# -> frame (transaction, session key). The dict and the frames in a context
# are never mutated: entering a scope sets a new dict, so contexts copied
# earlier (new tasks, copy_context().run) keep what they had. Leaving a scope
# puts its slot back to the value it replaced, whatever the order scopes are
# left in. Pins live apart, in a ContextVar per cluster (`Cluster._pin_var`,
# same rules): a pinned route is the hot path, and one ContextVar read costs
# less than that read plus a dict lookup and a subscript.
TX, SESSION = 0, 1
EMPTY: Tuple[Any, Any] = (None, None)
SCOPES: contextvars.ContextVar[Optional[Dict[int, Tuple[Any, Any]]]] = contextvars.ContextVar(
    "racaffinity_scopes", default=None
)


def slot(serial: int, slot: int) -> Any:
    d = SCOPES.get()
    if d is None:
        return None
    f = d.get(serial)
    return f[slot] if f is not None else None


def set_slot(serial: int, slot: int, value: Any) -> Any:
    """Sets one slot of this cluster's frame; returns the value it replaced."""
    d = SCOPES.get()
    old = d.get(serial, EMPTY) if d is not None else EMPTY
    f = list(old)
    previous = f[slot]
    f[slot] = value
    new = dict(d) if d else {}
    if f == [None, None]:
        new.pop(serial, None)
    else:
        new[serial] = tuple(f)
    SCOPES.set(new or None)
    return previous


class _Pin:
    """One explicit context pin (a `racaffinity_context_new` key). `active`
    turns False when the library reports the pin released, so a context
    that still holds this object afterwards (a task that outlived the scope
    that created it) stops using it instead of re-pinning a dead key.

    An auto-pin (`thread.auto_pin`: the first pick of an unpinned context
    pins it) has no scope to release it: it carries the cluster handle and
    is released when no context holds it any more (its task finished, its
    thread exited), or by `Cluster.unpin_all()`.

    The pin also caches its route (`Cluster.route()`): `route` may be served
    without calling the library while the cluster's routing epoch word still
    reads `epoch` (0: nothing cached; the library's epochs start at 1). An
    inactive pin's `epoch` is always 0 (`end()`), so that a hit needs no
    second check. `hits` counts the routes served so; the part not yet
    `merged` is added to the library's metrics before they are read, when the
    cached node changes, and when the pin goes.

    `hits += 1` is not atomic across threads: two OS threads sharing one pin
    (a context copied into a thread inside the scope, as `asyncio.to_thread`
    does) may lose a count between them; routes stay correct."""

    __slots__ = ("key", "active", "_auto", "epoch", "route", "hits", "merged", "_h", "__weakref__")

    def __init__(self, key: int, auto: Any = None) -> None:
        self.key = key
        self.active = True
        self._auto = auto  # the cluster handle of an auto-pin
        self.epoch = 0
        # Read only while `epoch` is not 0, when a route is cached: typed as
        # that route so that the hot paths reading it need no None check.
        self.route: Route = None  # type: ignore[assignment]
        self.hits = 0
        self.merged = 0
        self._h: Any = None  # the cluster handle, once a route was cached

    def end(self) -> None:
        """Marks the pin released: no context uses it or its cache again."""
        self.active = False
        self.epoch = 0

    def merge_hits(self) -> None:
        n = self.hits - self.merged
        if n > 0 and self._h is not None and self.route is not None:
            self.merged += n
            lib.racaffinity_cluster_count_host_hits(self._h, self.route.node, n)  # a closed cluster: INVALID_HANDLE

    def cache(self, h: Any, route: Route, epoch: int) -> None:
        """Caches `route`, read from the library after the epoch word read `epoch`."""
        if self.route is not None and self.route.node != route.node:
            self.merge_hits()
            self.hits = self.merged = 0
        self._h = h
        self.route = route
        # Another thread sharing this pin may have ended it since the caller
        # checked `active`. One statement with no call in it: the GIL does
        # not switch threads inside it, nor inside end().
        self.epoch = epoch if self.active else 0

    def __del__(self) -> None:
        # Library calls only when there is something to hand back, each
        # keeping the thread's last error (see keeping_last_error).
        try:
            if self.hits > self.merged:
                keeping_last_error(self.merge_hits)
        except Exception:  # interpreter shutdown
            pass
        if self._auto is not None and self.active:
            self.end()
            try:
                # A closed cluster: INVALID_HANDLE.
                keeping_last_error(lib.racaffinity_context_release, self._auto, self.key, NULL)
            except Exception:  # interpreter shutdown
                pass


def context_call(c: "Cluster", fn: Any, out: Any) -> None:
    """`fn` (`racaffinity_context_pick` or `route_of`) for the current context:
    through its pin, else (`thread.auto_pin`) through a new auto-pin of this
    context, else as context 0, which is never pinned: load balancing. Python
    pins contexts (threads, tasks), never OS threads, so the OS-thread entry
    points are not used (an OS thread runs many tasks)."""
    h = c._h
    pin = c._pin_var.get()
    if pin is not None and pin.active:
        rc = fn(h, pin.key, out)
        if rc:
            c._raise(rc)
        if out.kind == PLACED:
            # A new pin on a key that was pinned: its last scope released it
            # during this call (another thread), and auto-pin made a pin no
            # scope will release. Undo it; the context is unpinned now.
            pin.end()
            lib.racaffinity_context_release(h, pin.key, NULL)
        return
    if c._auto_pin:
        key = new_("uint64_t *")
        rc = lib.racaffinity_context_new(h, key)
        if rc:
            c._raise(rc)
        rc = fn(h, key[0], out)  # the core auto-pins the new key
        if rc:
            c._raise(rc)
        c._pin_var.set(_Pin(int(key[0]), h))
        return
    rc = fn(h, 0, out)
    if rc:
        c._raise(rc)


class PinScope:
    """`with cluster.pin() as route:` pins the current context (thread or
    asyncio task) to a node; picks inside reuse it. Nested scopes in the same
    context deepen the same pin. A task or `contextvars.copy_context()` run
    created inside the scope shares it (it is nested in the same scope), and
    stops using it once the last scope holding it exits; tasks and threads
    started outside any scope never share a pin."""

    __slots__ = ("_cluster", "_pin", "_new", "_prev", "_route")

    def __init__(self, cluster: "Cluster") -> None:
        self._cluster = cluster
        self._pin: Optional[_Pin] = None
        self._new = False
        self._prev: Optional[_Pin] = None
        self._route: Optional[Route] = None

    @property
    def route(self) -> Optional[Route]:
        """The pinned route as of entering the scope."""
        return self._route

    def __enter__(self) -> Route:
        if self._pin is not None:
            raise RuntimeError("this pin scope is already entered; call cluster.pin() again for a new one")
        c = self._cluster
        cur = c._pin_var.get()
        out = new_("racaffinity_route *")
        if cur is not None and cur.active:
            rc = lib.racaffinity_context_pin(c._h, cur.key, out)
            if rc:
                c._raise(rc)
            self._pin = cur
        else:
            key = new_("uint64_t *")
            rc = lib.racaffinity_context_new(c._h, key)
            if rc:
                c._raise(rc)
            pin = _Pin(int(key[0]))
            rc = lib.racaffinity_context_pin(c._h, pin.key, out)
            if rc:
                c._raise(rc)
            self._pin = pin
            self._new = True
            self._prev = cur
            c._pin_var.set(pin)
        self._route = route_of(c, out)
        return self._route

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        pin = self._pin
        if pin is None:
            return
        c = self._cluster
        released = new_("bool *")
        rc = lib.racaffinity_context_unpin(c._h, pin.key, released)
        if released[0] or rc:
            pin.end()
        if self._new:
            c._pin_var.set(self._prev)
        self._pin = self._prev = None
        self._new = False
        if rc and not (rc == INVALID_HANDLE and c._closed):
            c._raise(rc)

    async def __aenter__(self) -> Route:
        return self.__enter__()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)


class Transaction:
    """One branch of global transaction `gtrid` (XA gtrid bytes, 1..=64).

    `with cluster.transaction(gtrid) as tx:` begins (or joins) a branch on
    entry (`racaffinity_tx_begin`: every branch, from any thread or process,
    gets the same node) and ends it on exit (`racaffinity_tx_end`). Inside,
    pools route every connection of this cluster to `tx.node`."""

    __slots__ = ("_cluster", "gtrid", "_prefer_pinned", "_begin", "_prev", "_ended")

    def __init__(self, cluster: "Cluster", gtrid: bytes, prefer_pinned: bool = False) -> None:
        self._cluster = cluster
        self.gtrid = gtrid
        self._prefer_pinned = prefer_pinned
        self._begin: Optional[Route] = None
        self._prev: Optional[Transaction] = None
        self._ended = False

    @property
    def begin_route(self) -> Route:
        """The route this branch got at its begin."""
        if self._begin is None:
            raise RuntimeError("the transaction branch has not begun (use it in a with statement)")
        return self._begin

    @property
    def node(self) -> int:
        return self.begin_route.node

    @property
    def name(self) -> str:
        return self.begin_route.name

    def route(self) -> Route:
        """Where 2PC commands for this gtrid go now (`racaffinity_tx_route`)."""
        return self._cluster.tx_route(self.gtrid)

    def prepared(self) -> None:
        """Marks the transaction prepared: it never moves again."""
        self._cluster.tx_prepared(self.gtrid)

    def complete(self) -> None:
        """Forgets the whole transaction (every branch ended)."""
        self._cluster.tx_complete(self.gtrid)
        self._ended = True

    def __enter__(self) -> "Transaction":
        c = self._cluster
        if self._begin is not None:
            raise RuntimeError("this transaction branch is already entered")
        pinned = None
        if self._prefer_pinned and c.pinned():
            pinned = c.route()
        self._begin = c.tx_begin(self.gtrid) if pinned is None else c.tx_begin_on(self.gtrid, pinned.node)
        self._prev = set_slot(c._serial, TX, self)
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        c = self._cluster
        set_slot(c._serial, TX, self._prev)
        self._prev = None
        if not self._ended:
            self._ended = True
            try:
                c.tx_end(self.gtrid)
            except (UnknownTransactionError, ClosedError):
                if et is None:
                    raise

    async def __aenter__(self) -> "Transaction":
        return self.__enter__()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)

    def __repr__(self) -> str:
        where = f" on {self._begin!r}" if self._begin is not None else ""
        return f"Transaction(gtrid={self.gtrid!r}{where})"


class SessionScope:
    """`with cluster.session(key) as route:` one request of web session `key`:
    routes it (`racaffinity_session_route`) and makes pools route this
    cluster's connections inside by the session. The session's affinity
    outlives the scope; end it with `cluster.end_session(key)`."""

    __slots__ = ("_cluster", "key", "_prev", "route", "_entered")

    def __init__(self, cluster: "Cluster", key: bytes) -> None:
        self._cluster = cluster
        self.key = key
        self._prev: Optional[bytes] = None
        self.route: Optional[Route] = None
        self._entered = False

    def __enter__(self) -> Route:
        # A second entry would overwrite the session to restore at the
        # first's exit: the one in force before the scope would be lost.
        if self._entered:
            raise RuntimeError("this session scope is already entered; call session() again for a new one")
        c = self._cluster
        self.route = c.route_session(self.key)
        self._prev = set_slot(c._serial, SESSION, self.key)
        self._entered = True
        return self.route

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        set_slot(self._cluster._serial, SESSION, self._prev)
        self._prev = None
        self._entered = False

    async def __aenter__(self) -> Route:
        return self.__enter__()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.__exit__(et, ev, tb)


# ---------------------------------------------------------------------------
# the cluster
