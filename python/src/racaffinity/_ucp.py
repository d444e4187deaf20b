"""Seed 002 (UCP) parity: affinity contexts that follow a scope's rules, and
the connection affinity callback's policy and context. The pools' upkeep
(planned drains, the partition-map loader) is in `_pools_async`.

Every routing decision is the core's (`Cluster::pin_context_for`,
`racaffinity_context_pick`): this module converts arguments, calls the library
and reacts to the route it returns.
"""

from __future__ import annotations

import datetime
import enum
import weakref
from typing import Any, Awaitable, Callable, Mapping, Protocol, Union

from ._cluster import Cluster
from ._routes import Route, RouteKind, Scope, context_pick, lease_begin, lease_release, new_, route_of
from ._errors import InvalidArgumentError, keeping_last_error
from ._lib import NULL, lib

__all__ = [
    "AffinityContext",
    "AffinityPolicy",
    "AsyncPartitionMapLoader",
    "ConnectionAffinityCallback",
    "ConnectionAffinityContext",
    "PartitionMapLoader",
]


_BALANCED = int(RouteKind.BALANCED)
_NEUTRAL = int(lib.RACAFFINITY_OUTCOME_NEUTRAL)


def _release(h: Any, key: int) -> None:
    # Every level: pin() nests, and nobody is left to unpin the others. A
    # closed cluster took its pins with it (INVALID_HANDLE); this may run as
    # a finalizer, so the thread's last error is kept.
    keeping_last_error(lib.racaffinity_context_release, h, key, NULL)


class AffinityContext:
    """A pin context that follows one scope's rules (`Cluster.affinity_context`).
    It belongs to no thread or task: whoever holds it routes with it.
    `pin()` places the pin, `pick()`-style routing goes through the pools.
    `close()` (or garbage collection) releases it."""

    __slots__ = ("cluster", "key", "scope", "_release", "__weakref__")

    def __init__(self, cluster: Cluster, scope: int) -> None:
        out = new_("uint64_t *")
        rc = lib.racaffinity_context_new(cluster._h, out)
        if rc:
            cluster._raise(rc)
        self.cluster = cluster
        self.key = int(out[0])
        self.scope = Scope(scope) if scope in set(int(s) for s in Scope) else scope
        self._release = weakref.finalize(self, _release, cluster._h, self.key)

    def pin(self) -> Route:
        """Pins the context by its scope's rules (new, or one level deeper)."""
        out = new_("racaffinity_route *")
        rc = lib.racaffinity_context_pin_for(self.cluster._h, self.key, int(self.scope), out)
        if rc:
            self.cluster._raise(rc)
        return route_of(self.cluster, out)

    def close(self) -> None:
        """Releases the pin at every level `pin()` placed. Idempotent."""
        self._release()

    def __repr__(self) -> str:
        name = self.scope.name if isinstance(self.scope, Scope) else self.scope
        return f"<racaffinity.AffinityContext {name} key={self.key}>"


class AffinityPolicy(enum.Enum):
    """UCP's `ConnectionAffinityCallback.AffinityPolicy`."""

    TRANSACTION_BASED_AFFINITY = "TRANSACTION_BASED_AFFINITY"
    WEBSESSION_BASED_AFFINITY = "WEBSESSION_BASED_AFFINITY"


def _policy(v: Any) -> AffinityPolicy:
    if v is None:
        return AffinityPolicy.TRANSACTION_BASED_AFFINITY
    if isinstance(v, AffinityPolicy):
        return v
    name = getattr(v, "name", v)  # another enum with UCP's member names
    if isinstance(name, str):
        try:
            return AffinityPolicy[name.upper()]
        except KeyError:
            pass
    raise InvalidArgumentError(f"affinity policy {v!r} is not one of {[p.name for p in AffinityPolicy]}")


class ConnectionAffinityCallback(Protocol):
    """What `NodePools(..., affinity_callback=obj)` needs: UCP's four methods
    in snake_case. Any object with them will do."""

    def set_affinity_policy(self, policy: AffinityPolicy) -> None: ...

    def get_affinity_policy(self) -> AffinityPolicy: ...

    def set_connection_affinity_context(self, context: Any) -> bool: ...

    def get_connection_affinity_context(self) -> Any: ...


class ConnectionAffinityContext:
    """The context the pools hand the callback: opaque, printable (instance,
    policy, since). Dropping every reference to it (setting the callback's
    context to None) releases the affinity; a soft move sets a new one."""

    __slots__ = ("_owner", "_context", "node", "instance", "policy", "since")

    def __init__(self, owner: Any, context: AffinityContext, node: int, instance: str, policy: AffinityPolicy) -> None:
        self._owner = owner
        self._context = context
        self.node = node
        self.instance = instance
        self.policy = policy
        self.since = datetime.datetime.now(datetime.timezone.utc)

    def __repr__(self) -> str:
        return (
            f"ConnectionAffinityContext(instance={self.instance}, policy={self.policy.name},"
            f" since={self.since.isoformat()})"
        )

    __str__ = __repr__


def callback_lease(pools: Any, cb: Any) -> Any:
    """Leases the node for one connection by the callback's context (the raw
    `racaffinity_lease` buffer): the context's instance, or a new affinity
    handed to the callback. The core decides (placement, soft move, strict
    refusal, `aff=FALSE` release); this reacts to the route it returns."""
    c = pools.cluster
    policy = _policy(cb.get_affinity_policy())
    cur = cb.get_connection_affinity_context()
    ctx = (
        cur
        if isinstance(cur, ConnectionAffinityContext) and cur._owner is pools and cur.policy is policy
        else None
    )
    buf = new_("racaffinity_lease *")
    if ctx is not None:
        rc = context_pick(c._h, ctx._context.key, buf)
        if rc:
            c._raise(rc)  # strict: StrictAffinityError
        if buf.kind != _BALANCED:
            if buf.node != ctx.node:
                # Soft failover moved the affinity: a fresh context names the new instance.
                try:
                    cb.set_connection_affinity_context(
                        ConnectionAffinityContext(pools, ctx._context, buf.node, c.node_name(buf.node), policy)
                    )
                except BaseException:
                    lease_release(c._h, buf, _NEUTRAL)  # no connection will carry it
                    raise
            return buf
        # The instance released the context (aff=FALSE): place a new affinity.
        lease_release(c._h, buf, _NEUTRAL)
        buf = new_("racaffinity_lease *")
    scope = Scope.SESSION if policy is AffinityPolicy.WEBSESSION_BASED_AFFINITY else Scope.TRANSACTION
    ac = ctx._context if ctx is not None else AffinityContext(c, int(scope))
    route = ac.pin()
    cb.set_connection_affinity_context(ConnectionAffinityContext(pools, ac, route.node, route.name, policy))
    rc = lease_begin(c._h, route.node, buf)
    if rc:
        c._raise(rc)
    return buf


PartitionMapLoader = Callable[[], Mapping[int, str]]
"""Returns the whole partition -> instance name map (seed 002 §10.4.1.3)."""

AsyncPartitionMapLoader = Callable[[], Union[Mapping[int, str], Awaitable[Mapping[int, str]]]]
"""`AsyncNodePools`' loader: a `PartitionMapLoader` (run in a thread), or a
coroutine function (or any function returning an awaitable) of the map."""
