"""Routes, leases, node states and the enums of the header, plus the
library calls of the hot path bound once."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, NamedTuple, Union

from ._args import enum_arg
from ._errors import ClosedError, InvalidArgumentError, InvalidLeaseError, keeping_last_error
from ._lib import ffi, lib

if TYPE_CHECKING:  # pragma: no cover
    from ._cluster import Cluster

__all__ = ["NodeState", "RouteKind", "Outcome", "Scope", "Route", "Lease", "HostLease", "Node", "route_of", "end_lease", "PoolHostLease"]


class NodeState(enum.IntEnum):
    """`racaffinity_node_state`."""

    UP = int(lib.RACAFFINITY_NODE_STATE_UP)
    DRAINING = int(lib.RACAFFINITY_NODE_STATE_DRAINING)
    DOWN = int(lib.RACAFFINITY_NODE_STATE_DOWN)


class RouteKind(enum.IntEnum):
    """`racaffinity_route_kind`: how a node was chosen."""

    BALANCED = int(lib.RACAFFINITY_ROUTE_KIND_BALANCED)
    AFFINITY = int(lib.RACAFFINITY_ROUTE_KIND_AFFINITY)
    PLACED = int(lib.RACAFFINITY_ROUTE_KIND_PLACED)
    REPINNED = int(lib.RACAFFINITY_ROUTE_KIND_REPINNED)
    FALLBACK = int(lib.RACAFFINITY_ROUTE_KIND_FALLBACK)
    PANIC = int(lib.RACAFFINITY_ROUTE_KIND_PANIC)


class Outcome(enum.IntEnum):
    """`racaffinity_outcome`: how a leased unit of work ended."""

    OK = int(lib.RACAFFINITY_OUTCOME_OK)
    FAILED = int(lib.RACAFFINITY_OUTCOME_FAILED)
    NEUTRAL = int(lib.RACAFFINITY_OUTCOME_NEUTRAL)


class Scope(enum.IntEnum):
    """`racaffinity_scope`: an affinity scope with its own strict switch."""

    THREAD = int(lib.RACAFFINITY_SCOPE_THREAD)
    TRANSACTION = int(lib.RACAFFINITY_SCOPE_TRANSACTION)
    SESSION = int(lib.RACAFFINITY_SCOPE_SESSION)
    DATA = int(lib.RACAFFINITY_SCOPE_DATA)


# Hot-path lookups: plain tuples and module globals, not Enum(...) calls.
# Enum members bound once too: on Python 3.11 `Outcome.OK` is a descriptor
# call that costs half a call into the library.
_OK, _FAILED, _NEUTRAL = Outcome.OK, Outcome.FAILED, Outcome.NEUTRAL
_OUTCOMES = {int(o): o for o in Outcome}
KINDS = tuple(sorted(RouteKind, key=int))
STATES = tuple(sorted(NodeState, key=int))

context_pick = lib.racaffinity_context_pick
lease_release = lib.racaffinity_lease_release
lease_begin = lib.racaffinity_lease_begin
new_ = ffi.new
LEASE_T = ffi.typeof("racaffinity_lease *")  # ffi.new(LEASE_T) skips parsing the type's name
PLACED = int(lib.RACAFFINITY_ROUTE_KIND_PLACED)



class Route:
    """A routing decision: `node` (dense id in config order), `kind`, and the
    node's `name`."""

    __slots__ = ("node", "kind", "_cluster")

    def __init__(self, cluster: "Cluster", node: int, kind: RouteKind) -> None:
        self._cluster = cluster
        self.node = node
        self.kind = kind

    @property
    def name(self) -> str:
        """The node's (instance) name."""
        return self._cluster.node_name(self.node)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Route):
            return (self.node, self.kind) == (other.node, other.kind)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.node, int(self.kind)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(node={self.node}, name={self._name_or_id()!r}, kind={self.kind.name})"

    def _name_or_id(self) -> str:
        try:
            return self.name
        except Exception:
            return f"#{self.node}"


def route_of(cluster: "Cluster", r: Any) -> Route:
    return Route(cluster, r.node, KINDS[r.kind])


class Lease(Route):
    """A unit of work in flight on a node. Release it exactly once with an
    `Outcome` (a second release raises `InvalidLeaseError`). As a context
    manager it releases OK on a normal exit and NEUTRAL on an exception (the
    exception says nothing about the node; report node failures with
    `release(Outcome.FAILED)`). A lease garbage-collected without a release
    is released NEUTRAL."""

    # `_live`: truthy until released. Every kind of lease keeps its state in
    # this one slot, so that `__exit__`, `__del__` and `released` are written
    # once for all of them at the cost of no extra store.
    __slots__ = ("_buf", "_live", "_h")
    _live: Union[bool, int]  # True, or a host lease's epoch; 0 or False once released

    def __init__(self, cluster: "Cluster", buf: Any) -> None:
        self._cluster = cluster
        self._h = cluster._h
        self._buf = buf
        self.node = buf.node
        self.kind = KINDS[buf.kind]
        self._live = True

    @property
    def released(self) -> bool:
        return not self._live

    def release(self, outcome: Union[Outcome, str, int] = _OK) -> None:
        """Releases the lease with `outcome`: an `Outcome` or its name
        (``"ok"``, ``"failed"``, ``"neutral"``)."""
        if outcome.__class__ is not Outcome:
            outcome = enum_arg(outcome, Outcome, "outcome")
        rc = lease_release(self._h, self._buf, outcome)
        if rc:
            self._cluster._raise(rc)
        self._live = False

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if self._live:
            try:
                self.release(_OK if et is None else _NEUTRAL)
            except ClosedError:
                # The body closed the cluster, and its leases went with it:
                # quiet, as pin scopes are (and Java's Lease.close()), so the
                # body's own exception is the one that propagates.
                self._live = False

    def __del__(self) -> None:
        # A lease dropped without release would count as in flight forever
        # (skewing least_outstanding): release it NEUTRAL.
        if self._live:
            try:
                keeping_last_error(self._release_quietly)
            except Exception:  # interpreter shutdown
                pass

    def _release_quietly(self) -> None:
        try:
            self.release(_NEUTRAL)
        except Exception:  # a closed cluster
            pass


def _refuse_second_release(lease: Any) -> None:
    name = lease._name_or_id() if isinstance(lease, Route) else f"#{lease.node}"
    raise InvalidLeaseError(f"lease on node {name} already released")


# The host lease table of the routing epoch page (see HostLease), as indexes
# into the page viewed as 64-bit words.
HOST_LEASE_NODES = int(lib.RACAFFINITY_HOST_LEASE_NODES)
HOST_LEASE_BASE = int(lib.RACAFFINITY_HOST_LEASE_OFFSET) // 8  # stripe 0: every Python thread writes under the GIL
PAGE_BYTES = int(lib.RACAFFINITY_HOST_LEASE_OFFSET) + 8 * int(lib.RACAFFINITY_HOST_LEASE_STRIPES) * HOST_LEASE_NODES
_END_OK = int(lib.RACAFFINITY_HOST_LEASE_END_OK)
_WORD = (1 << 64) - 1  # what the page's words hold
host_lease_end = lib.racaffinity_cluster_host_lease_end
pick_host_leasable = lib.racaffinity_context_pick_host_leasable
pick_host_begins = lib.racaffinity_cluster_pick_host_begins


def end_ok(page: Any, i: int) -> None:
    """Ends a host lease OK on word `i` of `page` (the caller checked the
    epoch): one fewer in flight, one more success. The success bits wrap
    (2^40 of them); the page's unsigned words refuse the carry, so a wrap
    stores the sum modulo 2^64. Every end makes the add inline and calls
    this only when it fails (a call costs 40-60 ns, a third of the end:
    `timeit`, 85 ns inline against 130 ns through a helper)."""
    try:
        page[i] += _END_OK
    except (ValueError, OverflowError):
        page[i] = (page[i] + _END_OK) & _WORD


class HostLease(Lease):
    """A lease on a pinned context's cached route, counted in the library's
    page without calling it: the pick adds one to the node's host lease word,
    and an OK or NEUTRAL release while the routing epoch has not moved takes
    it off again (an OK also counts a success). A failure, or a release after
    the epoch moved (the node may have been ejected or marked down), reports
    the outcome to the library.

    The library only reads these words, and only Python threads of this
    cluster write them, each `page[i] += n` under the GIL: CPython checks
    for a thread switch at calls and backward jumps, never between the
    subscript read, the addition and the store, so no update is lost.
    `Cluster` uses host leases only while the GIL is enabled. Few fields,
    set once: on this path each attribute store costs about as much as the
    atomic add a Java host makes."""

    __slots__ = ()  # `_live` holds the epoch read before the pick (never 0)

    # Cluster.pick() sets these four fields itself on its hot path; a new
    # field must be set there too.
    def __init__(self, cluster: "Cluster", node: int, kind: RouteKind, epoch: int) -> None:
        self._cluster = cluster
        self.node = node
        self.kind = kind
        self._live = epoch

    def release(self, outcome: Union[Outcome, str, int] = _OK) -> None:
        if outcome.__class__ is not Outcome:
            # The member, not its int: the rules below compare by identity,
            # and "failed" as an int was a NEUTRAL end the library never saw.
            value = enum_arg(outcome, Outcome, "outcome")
            outcome = _OUTCOMES.get(value)  # type: ignore[assignment]
            if outcome is None:
                raise InvalidArgumentError(f"outcome: {value} is not one of ok, failed, neutral")
        epoch = self._live
        if not epoch:
            _refuse_second_release(self)
        self._live = 0
        page = self._cluster._page
        i = HOST_LEASE_BASE + self.node
        if page[0] == epoch and outcome is not _FAILED:
            try:
                page[i] += _END_OK if outcome is _OK else -1
            except (ValueError, OverflowError):
                end_ok(page, i)  # the success bits wrap (only an OK end adds to them)
            return
        page[i] -= 1
        rc = host_lease_end(self._cluster._h, self.node, outcome)
        if rc:
            self._cluster._raise(rc)


_OK_I, _FAILED_I = int(_OK), int(_FAILED)


class PoolHostLease:
    """A node pool's host lease: a pinned borrow served from its pin's
    cached route (`HostLease`'s rules), with only what ending it needs: the
    node and the epoch read before it began (0 once ended). No finalizer: the
    pools end every lease they make, as they end their raw library leases
    (which have none either), and a `__del__` cost a fifth of the borrow."""

    __slots__ = ("node", "_live")
    node: int
    _live: int  # the epoch read before the borrow; 0 once ended

    @property
    def released(self) -> bool:
        return not self._live


new_pool_host_lease = PoolHostLease.__new__


def end_lease(c: "Cluster", buf: Any, outcome: int) -> None:
    """Ends a node pool's lease with an int outcome: a raw `racaffinity_lease`
    through the library; a `PoolHostLease` (or a `HostLease`) in the page, by
    `HostLease.release`'s rules. The pools' release sites ignore the
    library's result code, as they always have."""
    cls = buf.__class__
    if cls is not PoolHostLease and cls is not HostLease:
        lease_release(c._h, buf, outcome)
        return
    end_host_lease(c, buf, outcome)


def end_host_lease(c: "Cluster", buf: Any, outcome: int) -> None:
    """`end_lease` of a host lease: any object with `PoolHostLease`'s two
    fields (the node pools' connection objects are their own)."""
    epoch = buf._live
    if not epoch:
        _refuse_second_release(buf)
    buf._live = 0
    page = c._page
    i = HOST_LEASE_BASE + buf.node
    if outcome != _FAILED_I and page[0] == epoch:
        if outcome == _OK_I:
            try:
                page[i] += _END_OK
            except (ValueError, OverflowError):
                end_ok(page, i)  # the success bits wrap
        else:
            page[i] -= 1
        return
    page[i] -= 1
    host_lease_end(c._h, buf.node, outcome)


class Node(NamedTuple):
    """A live node: id, name and current state."""

    id: int
    name: str
    state: NodeState


# A NamedTuple's generated __new__ belongs to a made-up module, so its string
# annotations (this module's `from __future__ import annotations`) resolve
# nowhere: the API reference would show `ForwardRef('NodeState')`.
Node.__new__.__module__ = __name__

