"""SQLAlchemy 2.x engines whose connections the cluster routes.

    from racaffinity.sqlalchemy import create_engine, route

    engine = create_engine(cluster, {"RAC1": "postgresql+psycopg://app@db1/app",
                                     "RAC2": "postgresql+psycopg://app@db2/app"},
                           pool_size=5, pool_pre_ping=True)
    with Session(engine) as s:                   # balanced by the core
        ...
    with cluster.pin():                          # every checkout on one node
        ...
    with route(key=42), Session(engine) as s:    # the data key's node
        ...
    with cluster.transaction(b"order-42"):       # the gtrid's node, for XA
        ...

Underneath, one SQLAlchemy pool per node (`QueuePool`, or
`AsyncAdaptedQueuePool` for `create_async_engine`), created on first use
with the engine's pool arguments. Each checkout asks the core for a node
(its transaction, the `route()` key or session, the session scope, the
pin, else load balancing: the same order as `racaffinity.pools`) and holds
a lease until the connection is returned; a connection that SQLAlchemy
invalidated during the checkout for a node failure (a disconnect, a failed
pre-ping whose reconnect failed) reports the node's failure, which counts
towards passive ejection; one terminated session or an application's
`invalidate()` does not. SQLAlchemy's pool events registered on the engine fire for every
node's connections, and `pool_pre_ping` pings each as usual; a failed ping
invalidates the pooled connections of that node only.

A node gone Down has its pool retired at once (fast connection failover,
`_Watch`), and with `replay=True` a request (`with request(engine) as req:
req.execute(...)`) is recorded and replayed once elsewhere when a
recoverable failure interrupts it and the commit outcome allows it
(docs/continuity.md; the walk is `NodePools.request()`'s).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple, Type, Union, cast

from ._extras import require

require(__name__, "sqlalchemy", "sqlalchemy")

import sqlalchemy  # noqa: E402 - after the check that names the extra
from sqlalchemy import exc as sa_exc  # noqa: E402
from sqlalchemy.engine import URL, Dialect, make_url  # noqa: E402
from sqlalchemy.pool import AsyncAdaptedQueuePool, Pool, QueuePool  # noqa: E402
from sqlalchemy.pool.base import _ConnectionFairy, _ConnectionRecord  # noqa: E402

from ._args import BytesLike, DataKey  # noqa: E402
from ._cluster import Cluster  # noqa: E402
from ._continuity import (  # noqa: E402
    AT_COMMIT,
    AT_START,
    COMMIT,
    DROP,
    FORCE,
    REPLAY,
    RUN,
    SESSION_STATE,
    XACT_QUERY,
    Recorder,
    CommitOutcome,
    ErrorClass,
    ResultsDiffer,
    classify_sqlstate,
    digest,
    mark_session_set,
    outcome_queries,
    read_text,
    recover,
    session_set,
)
from ._deadline import _armed  # noqa: E402
from ._pools_base import FAILED, NEUTRAL, OK, Base  # noqa: E402
from ._routes import HOST_LEASE_BASE, LEASE_T, NodeState, PoolHostLease, end_lease, lease_begin, new_  # noqa: E402
from ._routes import _END_OK, end_ok, new_pool_host_lease  # noqa: E402
from ._scopes import SCOPES  # noqa: E402
from ._state_changes import StateChanges  # noqa: E402

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["RoutingPool", "Request", "AsyncRequest", "create_engine", "create_async_engine", "request", "route"]

# (data key, session key, node id): the node id is a replay's, chosen by the core.
_ROUTE: contextvars.ContextVar[Optional[Tuple[Optional[DataKey], Optional[BytesLike], Optional[int]]]] = (
    contextvars.ContextVar("racaffinity_sqlalchemy_route", default=None)
)
_NO_ROUTE = (None, None, None)

# Engine arguments that configure the pool, as create_engine names them.
_POOL_ARGS = {
    "pool_size": "pool_size",
    "max_overflow": "max_overflow",
    "pool_timeout": "timeout",
    "pool_use_lifo": "use_lifo",
    "pool_recycle": "recycle",
    "pool_pre_ping": "pre_ping",
    "pool_reset_on_return": "reset_on_return",
    "echo_pool": "echo",
    "pool_logging_name": "logging_name",
}


@contextlib.contextmanager
def route(*, key: Optional[DataKey] = None, session: Optional[BytesLike] = None) -> Iterator[None]:
    """Connections checked out inside go to the node of data key `key`
    (partition map) or of web session `session` (session affinity). A
    transaction scope around it still wins, as everywhere."""
    if key is not None and session is not None:
        raise TypeError("pass either key= or session=, not both")
    token = _ROUTE.set((key, session, None))
    try:
        yield
    finally:
        _ROUTE.reset(token)


log = logging.getLogger("racaffinity.sqlalchemy")

# Put into a retired node pool's queue, one per waiting thread: the thread
# that gets it routes again (`RoutingPool._do_get`).
_RETIRED = object()

# Re-routes of one checkout whose node pool was retired while it waited.
_MAX_REROUTES = 3

# How often the failover watch reads the node states (seconds).
WATCH_INTERVAL = 0.2


def _abort(conn: Any) -> None:
    """Shuts a DB-API connection's socket down from another thread (its
    next call fails as a lost connection). A driver without `fileno()`
    keeps its connection: it fails on its own, later."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as s:
            s.shutdown(socket.SHUT_RDWR)
    except Exception:
        pass


class _Retired(Exception):
    """The node pool a checkout waited on was retired (its node went Down)."""


class _Watch:
    """Fast connection failover for a sync RoutingPool: a daemon thread
    that reads the node states every `WATCH_INTERVAL` and retires the pool
    of a node gone Down (`RoutingPool._retire`) or draining
    (`RoutingPool._drain`). It ends with its pools
    (weak references) or the cluster. A pool that replaces another
    (`recreate()`, an engine's dispose) takes over its watch's pools
    (`adopt`): the replaced pool's checked-out connections still need
    failover, and one thread per replacement would run until the cycle
    collector freed the replaced pool."""

    def __init__(self, pool: "RoutingPool") -> None:
        self._pools: List["weakref.ref[RoutingPool]"] = [weakref.ref(pool)]
        self._pools_lock = threading.Lock()  # `adopt` runs on another thread than `_run`
        self._halt = threading.Event()
        self._pid = os.getpid()
        # The states at start: a Down before the first round is a change too.
        self._last: Dict[int, NodeState] = {n: pool._cluster.node_state(n) for n in pool._router._dsns}
        # A node that went Down (or drained) and came back between two
        # rounds shows Up to both: only the core's count of its changes moved.
        self._changes = StateChanges(pool._cluster)  # after the states: as a round reads them
        # Nodes whose Down ended a planned drain, until they fail or come back.
        self._planned: Dict[int, bool] = {}
        threading.Thread(target=self._run, name="racaffinity-sqlalchemy-watch", daemon=True).start()

    def stop(self) -> None:
        self._halt.set()

    def adopt(self, other: "_Watch") -> None:
        """Stops `other` and watches its pools from now on, unless `other`
        is a forked parent's copy: those pools' sockets are the parent's
        (SQLAlchemy's `dispose(close=False)` in a child leaves them alone),
        and its lock may have been held by a thread the fork did not copy."""
        other.stop()
        if other._pid != os.getpid():
            return
        with other._pools_lock:
            theirs = list(other._pools)
            last = dict(other._last)
        with self._pools_lock:
            self._pools.extend(theirs)
            # Its states are older: a Down since its last round is still a change.
            for node, state in last.items():
                if node in self._last:
                    self._last[node] = state

    def _live_pools(self) -> List["RoutingPool"]:
        with self._pools_lock:
            pools = [p for p in (r() for r in self._pools) if p is not None]
            self._pools = [weakref.ref(p) for p in pools]
        return pools

    def _run(self) -> None:
        while not self._halt.wait(WATCH_INTERVAL):
            pools = self._live_pools()
            if not pools or pools[0]._cluster.closed:
                return
            try:
                self.round(pools)
            except Exception:  # a removed node, a closing cluster: log and go on
                log.debug("racaffinity: sqlalchemy failover watch failed", exc_info=True)
            del pools

    def round(self, pools: List["RoutingPool"]) -> None:
        cluster = pools[0]._cluster
        states = [(node, cluster.node_state(node)) for node in list(pools[0]._router._dsns)]
        missed = self._changes.moved(cluster)
        for node, state in states:
            with self._pools_lock:
                before = self._last.get(node)
                self._last[node] = state
            if state is NodeState.DOWN and before is not None and before is not NodeState.DOWN:
                # The end of a planned drain lets borrowed connections finish;
                # a failure (during a drain too) aborts them. The core tells
                # which: this round may never have seen the node Draining.
                planned = cluster.node_down_is_planned(node)
                self._planned[node] = planned
                for pool in pools:
                    pool._retire(node, hard=not planned)
            elif state is NodeState.DOWN and self._planned.get(node) and not cluster.node_down_is_planned(node):
                # Failed after its drain ended: the connections still
                # finishing there would hang on a dead node.
                self._planned[node] = False
                for pool in pools:
                    pool._abort_checked_out(node)
            elif state is not NodeState.DOWN:
                self._planned.pop(node, None)
                if state is NodeState.DRAINING:
                    for pool in pools:
                        pool._drain(node)
                if state is NodeState.UP and before is NodeState.UP and node in missed:
                    # Down (or Draining) and Up again since the last round,
                    # unseen: the pool's idle connections may be of sessions
                    # a restart ended. Retired as at a Down, whose cause is
                    # not known any more: connections in use finish, as at
                    # a drain; the next checkout makes a new pool.
                    log.info("racaffinity: node %s went Down or Draining and Up again between two watch rounds",
                             cluster.node_name(node))
                    for pool in pools:
                        pool._retire(node, hard=False)


class _Router(Base):
    """The routing half of `racaffinity.pools` (`Base._acquire`): node
    names and connection strings, the scopes, the affinity callback."""


def _node_failed(e: BaseException, dbapi: Any) -> bool:
    """Whether a checkout error is the node's failure: psycopg errors by
    SQLSTATE and connection state (`racaffinity._failures`), other drivers'
    by the DB-API class SQLAlchemy treats as operational; a pool that is
    merely full is never the node's."""
    if isinstance(e, sa_exc.TimeoutError):
        return False
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        pass
    else:
        if isinstance(e, psycopg.Error):
            from ._failures import is_node_failure

            return is_node_failure(e)
    operational = getattr(dbapi, "OperationalError", None)
    return operational is not None and isinstance(e, operational)


class RoutingPool(Pool):
    """A SQLAlchemy pool over one pool per node, each checkout routed by
    the cluster. Made by `create_engine` / `create_async_engine`; pass one
    as `pool=` only to build an engine by hand."""

    # The engine's (create_engine sets it on a pool it is given), never
    # Pool's connect-only stand-in: the pool serves an engine only.
    _dialect: Dialect

    def __init__(
        self,
        cluster: Cluster,
        urls: Mapping[str, Union[str, URL]],
        *,
        is_async: bool = False,
        pool_size: int = 5,
        max_overflow: int = 10,
        timeout: float = 30.0,
        use_lifo: bool = False,
        connect_args: Optional[Mapping[str, Any]] = None,
        recycle: int = -1,
        pre_ping: bool = False,
        reset_on_return: Any = True,
        echo: Any = None,
        logging_name: Optional[str] = None,
        dialect: Any = None,
        replay: bool = False,
        _dispatch: Any = None,
    ) -> None:
        if not isinstance(replay, bool):
            raise TypeError(f"replay must be a bool, not {type(replay).__name__}")
        self.replay = replay
        super().__init__(
            self._no_creator,
            recycle=recycle,
            echo=echo,
            logging_name=logging_name,
            reset_on_return=reset_on_return,
            pre_ping=pre_ping,
            dialect=dialect,
            _dispatch=_dispatch,
        )
        if not isinstance(urls, Mapping) or not urls:
            raise TypeError("urls must be a non-empty mapping of node name to database URL")
        parsed = {name: make_url(u) for name, u in urls.items()}
        drivers = {u.drivername for u in parsed.values()}
        if len(drivers) != 1:
            raise ValueError(f"every node needs the same dialect and driver, not {sorted(drivers)}")
        self._is_asyncio = is_async
        self._cluster = cluster
        self._router = _Router(
            cluster, {n: u.render_as_string(hide_password=False) for n, u in parsed.items()},
            False, None, None, None,
        )
        # Spelled as the cluster spells its nodes (names match in any case):
        # the node pools and recreate() look a URL up by that spelling.
        self._urls = {cluster.node_name(cluster.node_id(n)): u for n, u in parsed.items()}
        for node in self._router._dsns:
            self._router._by_id[node] = node  # _acquire wants an entry; the pool is made on first use
        self._h = self._router._h
        self._args: Dict[str, Any] = dict(pool_size=pool_size, max_overflow=max_overflow, timeout=timeout, use_lifo=use_lifo)
        self._connect_args = dict(connect_args or {})
        self._subs: Dict[int, _NodePoolBase] = {}
        self._subs_lock = threading.Lock()
        # checked-out record -> its lease (a raw racaffinity_lease)
        self._leases: Dict[Any, Any] = {}
        # The asyncio engine's queues are the loop's: the watch hands its
        # node pools' retirement to their loop (`_retire_on_loop`). None in
        # a forked child until its first checkout (`_after_fork`).
        self._watch: Optional[_Watch] = _Watch(self)
        # The node pools and leases a forked child inherited (the parent's
        # connections): kept, never used, closed or collected in the child.
        self._inherited: List[Any] = []
        _LIVE_POOLS.add(self)

    def _abort_checked_out(self, node: int) -> None:
        """Aborts the connections checked out on `node` (their socket shut
        down): their next call fails at once instead of hanging on it."""
        for rec, buf in list(self._leases.items()):
            conn = rec.dbapi_connection
            if buf.node == node and conn is not None:
                _abort(getattr(conn, "driver_connection", conn))

    def _retire(self, node: int, hard: bool) -> None:
        """A node gone Down: its pool is retired at once. Idle connections
        close; threads waiting on it route again; on a hard Down the
        connections checked out there are aborted (their socket shut down),
        so their next call fails at once instead of hanging on a dead node;
        the node's next checkout makes a new pool."""
        with self._subs_lock:
            old = self._subs.pop(node, None)
        if old is not None:
            old._racaffinity_retired = True
        if hard:
            # Also with no pool left (a drain retired it): its connections
            # still checked out are on the failed node.
            self._abort_checked_out(node)
        if old is None:
            return
        if self._is_asyncio:
            loop = old._racaffinity_loop
            if loop is not None:
                try:
                    loop.call_soon_threadsafe(_retire_on_loop, old)
                except RuntimeError:  # its loop is closed: nothing waits there
                    pass
            return
        old.dispose()  # the idle ones
        queue: Any = old._pool  # util.queue.Queue: its Condition and a put of the marker
        # A put wakes (and un-queues) one waiting thread: one each, as the
        # queue (pool_size long) makes room.
        deadline = time.monotonic() + 2.0
        while queue.not_empty._waiters and time.monotonic() < deadline:
            try:
                queue.put(_RETIRED, True, 0.05)
            except Exception:  # full: a woken thread has not taken its one yet
                pass

    def _drain(self, node: int) -> None:
        """A Draining node: its pool is retired (soft) when it holds an idle
        connection, so idle connections close at once and those in use
        close when returned, as in `NodePools`; checkouts that still go
        there (pinned work) make a new pool, retired in turn once one of
        its connections is back. One that holds none stays: retiring it
        would send its waiters to a new pool, past its size."""
        with self._subs_lock:
            sub = self._subs.get(node)
        if sub is not None and sub.checkedin() > 0:
            self._retire(node, hard=False)

    @staticmethod
    def _no_creator() -> Any:
        raise sa_exc.InvalidRequestError("RoutingPool connects through its node pools only")

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    # -- the node pools -------------------------------------------------------------

    def _sub(self, node: int) -> _NodePoolBase:
        sub = self._subs.get(node)
        if sub is not None:
            return sub
        with self._subs_lock:
            sub = self._subs.get(node)
            if sub is None:
                sub = self._new_sub(node)
                self._subs[node] = sub
        return sub

    def _connector(self, node: int, **extra: Any) -> Any:
        """The node's creator (the engine's own way: the dialect's connect
        arguments, `connect_args`, its `do_connect` hooks); `extra` are
        connect arguments that `connect_args` did not set."""
        dialect = self._dialect
        name = self._router._dsns[node][0]
        cargs, cparams = dialect.create_connect_args(self._urls[name])
        cparams = {**extra, **cparams, **self._connect_args}

        def connect(connection_record: Any = None) -> Any:
            # as create_engine's own creator: the dialect's do_connect hooks first
            if dialect._has_events:
                args, params = list(cargs), dict(cparams)
                for fn in dialect.dispatch.do_connect:
                    conn = fn(dialect, connection_record, args, params)
                    if conn is not None:
                        return conn
                return dialect.connect(*args, **params)
            return dialect.connect(*cargs, **cparams)

        return connect

    def _new_sub(self, node: int) -> _NodePoolBase:
        dialect = self._dialect
        name = self._router._dsns[node][0]
        connect = self._connector(node)
        base = AsyncAdaptedQueuePool if self._is_asyncio else QueuePool
        sub: _NodePoolBase = _node_pool_class(base)(
            connect,
            self,
            recycle=self._recycle,
            echo=self.echo,
            logging_name=f"{self.logging_name or 'racaffinity'}.{name}",
            reset_on_return=self._reset_on_return,
            pre_ping=self._pre_ping,
            dialect=dialect,
            **self._args,
        )
        # One set of listeners for every node: the engine's pool events (and
        # the dialect's own connect hooks) are registered on this pool.
        sub.__dict__["dispatch"] = self.dispatch
        return sub

    # -- checkout and return --------------------------------------------------------

    def _do_get(self) -> Any:
        if self._watch is None:
            self._after_fork()
        route = _ROUTE.get()
        if route is None and not self._is_asyncio:
            # A pinned checkout on its pin's cached route, inline: the rules
            # of `Base._acquire`'s first branch (its call and tuple, the node
            # pool's `_do_get` override and `super()` cost a third of the
            # routing pool's work), with that override's retirement checks.
            router = self._router
            pin = router._pin_var.get()
            if pin is not None and router._callback is None:
                scopes = SCOPES.get()
                if scopes is None or scopes.get(router._serial) is None:
                    page = router._page
                    epoch = page[0]  # before the pin's cache
                    if pin.epoch == epoch:  # never so for an ended pin
                        host = pin.route.node
                        sub = self._subs.get(host)
                        if sub is not None and host < router._host_nodes and not sub._racaffinity_retired:
                            pin.hits += 1
                            page[HOST_LEASE_BASE + host] += 1
                            buf = new_pool_host_lease(PoolHostLease)
                            buf.node = host
                            buf._live = epoch
                            try:
                                rec = sub._racaffinity_base_get(sub)
                                if rec is _RETIRED:
                                    raise _Retired()
                            except BaseException as e:
                                rec, buf = self._reroute(e, buf, None, None)
                            rec._racaffinity_invalidated = None
                            self._leases[rec] = buf
                            if rec._ConnectionRecord__pool._racaffinity_retired:
                                rec, buf = self._retired_under(rec, None, None)
                            return rec
        key, session, node = route or _NO_ROUTE
        if node is None:
            buf, _marker = self._router._acquire(key, session)
        else:
            buf = new_(LEASE_T)
            rc = lease_begin(self._h, node, buf)
            if rc:
                self._cluster._raise(rc)
        try:
            sub = self._subs.get(buf.node) or self._sub(buf.node)
            rec = sub._do_get()
        except BaseException as e:
            rec, buf = self._reroute(e, buf, key, session)
        rec._racaffinity_invalidated = None
        self._leases[rec] = buf
        if rec._ConnectionRecord__pool._racaffinity_retired:
            rec, buf = self._retired_under(rec, key, session)
        return rec

    def _retired_under(self, rec: Any, key: Any, session: Any) -> Tuple[Any, Any]:
        """`rec`'s node pool was retired while it was checked out (between
        the retirement check and its lease's store above, which the
        retirement's abort reads, in that order; the retirement sets the
        flag before it aborts): the record closes and the checkout routes
        again (returns the new record and lease, stored)."""
        for _ in range(_MAX_REROUTES):
            buf = self._leases.pop(rec)
            rec.close()
            rec, buf = self._reroute(_Retired(), buf, key, session)
            rec._racaffinity_invalidated = None
            self._leases[rec] = buf
            if not rec._ConnectionRecord__pool._racaffinity_retired:
                return rec, buf
        end_lease(self._cluster, self._leases.pop(rec), NEUTRAL)
        rec.close()
        raise sa_exc.TimeoutError("the node pools were retired while this checkout waited")

    def _reroute(self, e: BaseException, buf: Any, key: Any, session: Any) -> Tuple[Any, Any]:
        """The checkout of `buf`'s node failed with `e`: a retired node pool
        routes again (up to `_MAX_REROUTES` times; returns the record and its
        lease); any other failure ends the lease and propagates. Out of the
        common path, one checkout."""
        reroutes = 0
        while True:
            if not isinstance(e, _Retired):
                failed = _node_failed(e, self._dialect.loaded_dbapi)
                if failed:
                    # A request that began with this checkout starts where
                    # the core says (`Request`).
                    e._racaffinity_failed_node = int(buf.node)  # type: ignore[attr-defined]
                end_lease(self._cluster, buf, FAILED if failed else NEUTRAL)
                raise e
            # Its node went Down while this waited: the core routes again.
            end_lease(self._cluster, buf, NEUTRAL)
            if reroutes == _MAX_REROUTES:
                raise sa_exc.TimeoutError("the node pools were retired while this checkout waited") from None
            reroutes += 1
            buf, _marker = self._router._acquire(key, session)
            try:
                return self._sub(buf.node)._do_get(), buf
            except BaseException as again:
                e = again

    def _returned(self, rec: Any, detached: bool = False) -> None:
        """Ends the lease of a record coming back: FAILED when SQLAlchemy
        invalidated its connection during the checkout for a node failure
        (a disconnect, a failed reconnect) and it has none now; NEUTRAL when
        it was invalidated for anything else (one terminated session, the
        application's own `invalidate()`)."""
        buf = self._leases.pop(rec, None)
        if buf is not None:
            self._end_returned(rec, buf, detached)

    def _end_returned(self, rec: Any, buf: Any, detached: bool) -> None:
        if detached:
            outcome = NEUTRAL
        elif rec.dbapi_connection is not None:
            outcome = OK  # never invalidated, or reconnected at once
        else:
            outcome = FAILED if getattr(rec, "_racaffinity_invalidated", None) == "node" else NEUTRAL
        end_lease(self._cluster, buf, outcome)

    def _do_return_conn(self, record: Any) -> None:
        # Reached by a fairy's detach(), which hands the record to the
        # fairy's pool (this one) rather than to the record's. The record
        # goes back to the node pool it came from: the node's current pool
        # (`_sub`) would be made anew for a node retired meanwhile (removed,
        # Down), a pool no watch retires.
        buf = self._leases.get(record)
        self._returned(record, detached=True)
        if buf is not None:
            sub = _record_pool(record)
            if sub._racaffinity_retired:
                record.close()
            else:
                sub._put_back(record)

    def _invalidate(self, connection: Any, exception: Optional[BaseException] = None, _checkin: bool = True) -> None:
        # A failed pre-ping invalidates the pooled connections of its node
        # (the pool the record came from, as for a detach), not of every node.
        rec = getattr(connection, "_connection_record", None)
        buf = self._leases.get(rec) if rec is not None else None
        if buf is not None:
            _record_pool(rec)._invalidate(connection, exception, _checkin)
        else:
            super()._invalidate(connection, exception, _checkin)

    def _after_fork(self) -> None:
        """The first checkout in a forked child that inherited this pool
        (its watch thread was not copied) without `engine.dispose(close=False)`:
        the parent's node pools and checked-out records are set aside, as
        that dispose does (their sockets are the parent's: not pooled, not
        closed, not aborted, and kept from the collector, whose close would
        end the parent's sessions), and the child's own watch starts."""
        with self._subs_lock:
            if self._watch is not None:
                return
            self._inherited.append((self._subs, self._leases))
            self._subs = {}
            self._leases = {}
            self._watch = _Watch(self)

    # -- the Pool interface ----------------------------------------------------------

    def recreate(self) -> "RoutingPool":
        self.logger.info("Pool recreating")
        # Over the nodes the cluster has now: one removed since has no pool
        # to make (and would fail the new pool's construction).
        live = {n.name for n in self._cluster.nodes}
        new = RoutingPool(
            self._cluster,
            {name: url for name, url in self._urls.items() if name in live},
            is_async=self._is_asyncio,
            connect_args=self._connect_args,
            recycle=self._recycle,
            pre_ping=self._pre_ping,
            reset_on_return=self._reset_on_return,
            echo=self.echo,
            logging_name=self._orig_logging_name,
            dialect=self._dialect,
            replay=self.replay,
            _dispatch=self.dispatch,
            **self._args,
        )
        if self._watch is not None and new._watch is not None:
            new._watch.adopt(self._watch)
        return new

    def dispose(self) -> None:
        # not the watch: an engine's dispose() keeps the engine usable
        for sub in list(self._subs.values()):
            sub.dispose()
        self.logger.info("Pool disposed. %s", self.status())

    def status(self) -> str:
        parts = [f"{self._router._dsns[n][0]}: {s.status()}" for n, s in sorted(self._subs.items())]
        return "RoutingPool(" + "; ".join(parts) + ")"

    def node_pool(self, node: Union[int, str]) -> QueuePool:
        """The SQLAlchemy pool of one node (by id or name)."""
        return self._sub(self._cluster.node_id(node))

    def size(self) -> int:
        return sum(s.size() for s in self._subs.values())

    def checkedin(self) -> int:
        return sum(s.checkedin() for s in self._subs.values())

    def checkedout(self) -> int:
        return sum(s.checkedout() for s in self._subs.values())

    def overflow(self) -> int:
        return sum(s.overflow() for s in self._subs.values())

    def timeout(self) -> float:
        return float(self._args["timeout"])


# Every RoutingPool alive, for `_forked_child`.
_LIVE_POOLS: "weakref.WeakSet[RoutingPool]" = weakref.WeakSet()


def _forked_child() -> None:
    # No thread is started here: a child that never checks out (one that
    # execs, a worker that makes its own engine) needs none.
    global _PARENT
    _PARENT = os.getppid()
    for pool in list(_LIVE_POOLS):
        pool._watch = None
        # A lock a parent's thread held at the fork would never be released.
        pool._subs_lock = threading.Lock()
        for rec in list(pool._leases):
            _disown(rec)


# The process that forked this one (`_forked_child`), for `_ParentsConnection`.
_PARENT = 0


class _ParentsConnection(_ConnectionFairy):
    """A forked child's copy of a connection its parent had checked out
    (`_disown`). It has no DB-API connection, so SQLAlchemy's reset, close
    and collection send nothing on the parent's socket; what would use one
    (a statement's cursor, a commit) raises the driver's `InterfaceError`
    naming the fork, where the bare fairy failed an `assert` (a
    StatementError wrapping AssertionError). It reads as closed, so the
    dialect takes that error for a lost connection: SQLAlchemy invalidates
    the child's `Connection` (PendingRollbackError until it is rolled
    back), whose next statement then checks out a connection of the
    child's own."""

    __slots__ = ()

    # The dialect's is_disconnect reads these (psycopg: `closed or broken`).
    closed = True
    broken = True

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        raise self._belongs_to_the_parent()

    def commit(self) -> None:
        raise self._belongs_to_the_parent()

    def rollback(self) -> None:
        raise self._belongs_to_the_parent()

    def _belongs_to_the_parent(self) -> Exception:
        # A node pool's: the engine's dialect, never Pool's connect-only stand-in.
        dialect = cast(Dialect, self._pool._dialect)
        return dialect.loaded_dbapi.InterfaceError(
            f"this connection belongs to the parent process (pid {_PARENT}): it was checked out before "
            "os.fork(), and its session is the parent's, so this forked child runs nothing on it; roll "
            "back, and the next statement checks out a connection of the child's own"
        )


def _disown(rec: Any) -> None:
    """Makes the child's copy of a connection the parent had checked out
    an invalidated one, before the child's code runs (it may drop that
    copy without ever checking out): SQLAlchemy resets a connection on its
    way back, on its collection (the fairy's finalizer) or its close (a
    `with` block the child unwinds), and that ROLLBACK, sent on the
    parent's socket, would end the parent's open transaction under it. A
    record with no fairy is not in use (the finalizer returns at once); a
    fairy without its DB-API connection is not valid, so a close skips the
    rollback and sends nothing, and a statement on it fails in the child
    (`_ParentsConnection`) instead of running in the parent's session."""
    ref = rec.fairy_ref
    rec.fairy_ref = None
    fairy = ref() if ref is not None else None
    if fairy is not None:
        fairy.dbapi_connection = None
        fairy.__class__ = _ParentsConnection


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def _record_pool(record: Any) -> Any:
    """The node pool a checked-out record came from."""
    return record._ConnectionRecord__pool


def _retire_on_loop(old: Any) -> None:
    """A retired asyncio node pool, on its loop: the tasks waiting on its
    queue fail with `_Retired` at once (they route again), and its idle
    connections close (an async driver closes inside SQLAlchemy's greenlet)."""
    from sqlalchemy.util import greenlet_spawn

    queue = old._pool.__dict__.get("_queue")  # memoized: absent if never used
    for getter in list(getattr(queue, "_getters", ())):
        if not getter.done():
            getter.set_exception(_Retired())
    task = asyncio.ensure_future(greenlet_spawn(old.dispose))
    _DISPOSING.add(task)
    task.add_done_callback(_DISPOSING.discard)


# The retired pools' dispose tasks (the loop keeps only weak references).
_DISPOSING: Set[asyncio.Future[Any]] = set()


if TYPE_CHECKING:

    class _NodePoolBase(QueuePool):
        """What `_node_pool_class` adds to its base, for the checker."""

        _outer: RoutingPool
        _racaffinity_retired: bool
        _racaffinity_loop: Any

        @staticmethod
        def _racaffinity_base_get(pool: Any) -> Any: ...

        def _put_back(self, record: Any) -> None: ...


def _node_pool_class(base: Type[QueuePool]) -> Any:
    cached = _NODE_POOL_CLASSES.get(base)
    if cached is not None:
        return cached

    base_return = base._do_return_conn

    class _NodePool(base):  # type: ignore[misc, valid-type]
        """One node's pool inside a RoutingPool."""

        def __init__(self, creator: Any, outer: RoutingPool, **kw: Any) -> None:
            super().__init__(creator, **kw)
            self._outer = outer

        _racaffinity_retired = False
        # An asyncio pool's event loop (where its retirement runs).
        _racaffinity_loop: Any = None

        def _do_get(self) -> Any:
            if self._racaffinity_retired:
                raise _Retired()
            if self._is_asyncio and self._racaffinity_loop is None:
                try:
                    self._racaffinity_loop = asyncio.get_running_loop()
                except RuntimeError:  # not on a loop: its retirement has none to run on
                    pass
            rec = super()._do_get()
            if rec is _RETIRED:
                raise _Retired()
            return rec

        def _do_return_conn(self, record: Any) -> None:
            # `RoutingPool._returned` with its OK host lease end inline (its
            # two calls cost as much as their work).
            outer = self._outer
            buf = outer._leases.pop(record, None)
            if buf is not None:
                if buf.__class__ is PoolHostLease and record.dbapi_connection is not None:
                    epoch = buf._live
                    page = outer._router._page
                    if epoch and page[0] == epoch:
                        buf._live = 0
                        i = HOST_LEASE_BASE + buf.node
                        try:
                            page[i] += _END_OK
                        except (ValueError, OverflowError):
                            end_ok(page, i)  # the success bits wrap
                    else:
                        end_lease(outer._cluster, buf, OK)
                else:
                    outer._end_returned(record, buf, False)
            if self._racaffinity_retired:
                record.close()  # its node went Down: not pooled again
                return
            base_return(self, record)

        def _put_back(self, record: Any) -> None:
            base_return(self, record)

        # The base's checkout without this class's checks, for
        # `RoutingPool._do_get`'s inline path, which makes them itself.
        _racaffinity_base_get = staticmethod(base._do_get)

        def _create_connection(self) -> Any:
            return _Record(self)

    _NodePool.__name__ = _NodePool.__qualname__ = f"Node{base.__name__}"
    _NODE_POOL_CLASSES[base] = _NodePool
    return _NodePool


_NODE_POOL_CLASSES: Dict[type, Any] = {}


class _Record(_ConnectionRecord):
    """A node pool's connection record that remembers why SQLAlchemy
    invalidated it during a checkout: "node" for the node's failure, else
    "session" (the lease's outcome, `RoutingPool._returned`)."""

    _racaffinity_invalidated: Optional[str] = None

    def invalidate(self, e: Optional[BaseException] = None, soft: bool = False) -> None:
        cause = e.orig if isinstance(e, sa_exc.DBAPIError) and e.orig is not None else e
        outer = getattr(_record_pool(self), "_outer", None)
        dbapi = outer._dialect.loaded_dbapi if outer is not None else None
        node = cause is not None and not soft and _node_failed(cause, dbapi)
        if node or self._racaffinity_invalidated is None:
            self._racaffinity_invalidated = "node" if node else "session"
        buf = outer._leases.get(self) if node and outer is not None else None
        if buf is not None:
            # A pooled record's reconnect at checkout failed: a request that
            # began with this checkout starts where the core says (`Request`).
            try:
                cause._racaffinity_failed_node = int(buf.node)  # type: ignore[union-attr]
            except AttributeError:
                pass
        super().invalidate(e, soft)


def _split_kwargs(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    pool_kw = {}
    for k, pk in _POOL_ARGS.items():
        if k in kwargs:
            pool_kw[pk] = kwargs.pop(k)
    for k in ("poolclass", "pool", "creator"):
        if k in kwargs:
            raise TypeError(f"{k}= is not for a routed engine: it has one pool per node (pool_* arguments set them)")
    if "connect_args" in kwargs:
        pool_kw["connect_args"] = kwargs.pop("connect_args")
    if "replay" in kwargs:
        pool_kw["replay"] = kwargs.pop("replay")
        if pool_kw["replay"] is True and "AUTOCOMMIT" in (
            kwargs.get("isolation_level"),
            (kwargs.get("execution_options") or {}).get("isolation_level"),
        ):
            raise ValueError(
                "replay=True needs transactions: isolation_level AUTOCOMMIT commits each statement"
                " as it runs, which a replay would commit again"
            )
    return pool_kw


def _check_replay(engine: Any) -> None:
    pool = engine.pool
    if pool.replay and engine.dialect.name != "postgresql":
        if pool._watch is not None:
            pool._watch.stop()
        raise ValueError(
            f"replay=True needs a PostgreSQL dialect (its commit outcome is pg_xact_status), not {engine.dialect.name}"
        )


def create_engine(cluster: Cluster, urls: Mapping[str, Union[str, URL]], **kwargs: Any) -> sqlalchemy.Engine:
    """`sqlalchemy.create_engine` over the cluster's nodes: `urls` maps each
    node name to its database URL (one dialect and driver for all). The
    `pool_*` arguments (`pool_size`, `max_overflow`, `pool_timeout`,
    `pool_pre_ping`, `pool_recycle`, ...) configure each node's pool;
    `replay=True` makes `request(engine)` record and replay (PostgreSQL
    dialects); every other argument goes to SQLAlchemy."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a racaffinity.Cluster, not {type(cluster).__name__}")
    pool = RoutingPool(cluster, urls, is_async=False, **_split_kwargs(kwargs))
    first = next(iter(pool._urls.values()))
    engine = sqlalchemy.create_engine(first, pool=pool, **kwargs)
    _check_replay(engine)
    return engine


def create_async_engine(cluster: Cluster, urls: Mapping[str, Union[str, URL]], **kwargs: Any) -> Any:
    """`create_engine` for asyncio (`sqlalchemy.ext.asyncio.create_async_engine`,
    an async driver such as `postgresql+psycopg`)."""
    from sqlalchemy.ext.asyncio import create_async_engine as _create

    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a racaffinity.Cluster, not {type(cluster).__name__}")
    pool = RoutingPool(cluster, urls, is_async=True, **_split_kwargs(kwargs))
    first = next(iter(pool._urls.values()))
    engine = _create(first, pool=pool, **kwargs)
    _check_replay(engine.sync_engine)
    return engine


# -- request replay ----------------------------------------------------------------

# The connect timeout of an outcome check's own connection (psycopg drivers;
# `connect_args` wins): a blackholed node cannot hold the check.
_ASK_CONNECT_TIMEOUT = 2


def _error_class(e: BaseException) -> ErrorClass:
    """An error's class for replay: the driver's SQLSTATE
    (`classify_sqlstate`); without one, recoverable when the connection is
    lost (an `OperationalError` of psycopg without SQLSTATE: reset, closed,
    timed out; or one SQLAlchemy invalidated the connection for)."""
    orig = e.orig if isinstance(e, sa_exc.DBAPIError) and e.orig is not None else e
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if isinstance(state, str) and state:
        return classify_sqlstate(state)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        pass
    else:
        if isinstance(orig, psycopg.OperationalError):
            return ErrorClass.RECOVERABLE
    if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
        return ErrorClass.RECOVERABLE
    return ErrorClass.NOT_RECOVERABLE


def _freeze(result: Any) -> Tuple[Any, Tuple[int, Optional[bytes]]]:
    """What a statement answered (row count, digest of its rows), compared
    on a replay, and the result to hand the application: the rows are read
    ahead into a `FrozenResult` and handed out as a new `Result` over them,
    so the application still reads them all (and a replay's rows can be
    compared before anything is handed out)."""
    if not result.returns_rows:
        return result, digest(result.rowcount, None)
    frozen = result.freeze()
    rows = list(frozen.data)
    return frozen(), digest(len(rows), rows)


def _driver(conn: Any) -> Any:
    """The driver's own connection under a SQLAlchemy `Connection` (what a
    deadline shuts down)."""
    dbapi = conn.connection.dbapi_connection
    return getattr(dbapi, "driver_connection", dbapi)


def _in_transaction(conn: Any) -> bool:
    """Whether the server still has the request's transaction open
    (psycopg's and psycopg2's `info.transaction_status`: 0 is idle, no
    transaction); True for a driver that does not tell."""
    status = getattr(getattr(_driver(conn), "info", None), "transaction_status", None)
    return status is None or int(status) != 0


def _session_lost(conn: Any) -> bool:
    """Whether the driver's connection under `conn` is lost (psycopg:
    closed or broken; psycopg2: closed), so that an error of a lost
    connection that ends the request is its own: one of that shape may come
    from anywhere in the block (a nested request's node, a connect to
    another service), and blaming it on this healthy connection would
    count its node failed. True for a driver that does not tell; False once
    SQLAlchemy invalidated it, which blamed its own error already."""
    try:
        driver = _driver(conn)
    except Exception:
        return False
    if driver is None:
        return False
    closed = getattr(driver, "closed", None)
    broken = getattr(driver, "broken", None)
    if closed is None and broken is None:
        return True
    return bool(closed or broken)


class Request(Recorder):
    """`with request(engine) as req:` — one transaction on the node the
    core routes to, whose statements (`req.execute(statement, params)`)
    are recorded with a digest of their results when the engine has
    `replay=True`. On a recoverable error the core decides, step by step,
    whether the commit in flight is checked (and forced), whether the
    request is replayed once on another node, or the original error
    surfaces with a `ReplayRefused` cause: the same walk as
    `NodePools.request()` (docs/continuity.md). Committed at the end of the
    block, rolled back on the application's own exception."""

    def __init__(
        self, engine: Any, key: Optional[DataKey], session: Optional[BytesLike], call_timeout: Optional[float]
    ) -> None:
        pool = getattr(engine, "pool", None)
        if not isinstance(pool, RoutingPool):
            raise TypeError("request() needs an engine of racaffinity.sqlalchemy.create_engine")
        if key is not None and session is not None:
            raise TypeError("pass either key= or session=, not both")
        if call_timeout is not None and not call_timeout > 0:
            raise ValueError("call_timeout must be > 0 (or None: no deadline)")
        super().__init__(pool.replay)
        self._engine = engine
        self._pool: RoutingPool = pool
        self._key = key
        self._session = session
        self._call_timeout = call_timeout
        self._conn: Any = None
        # It ran SQL text that sets session state (`_leave_session_state`).
        self._session_text = False
        # A statement's error left its transaction aborted (no ROLLBACK TO
        # SAVEPOINT since): it can only roll back, which a replay of the
        # statements that succeeded, and its commit, would not.
        self._aborted = False

    @property
    def node(self) -> str:
        """The name of the node the request runs on now."""
        return self._pool._cluster.node_name(self._node)

    @property
    def backend_pid(self) -> Optional[int]:
        """The server process of the request's connection now (psycopg;
        None for a driver that does not tell)."""
        info = getattr(_driver(self._connected()), "info", None)
        pid = getattr(info, "backend_pid", None)
        return int(pid) if pid is not None else None

    @property
    def connection(self) -> Any:
        """The SQLAlchemy `Connection` underneath. What runs on it (an ORM
        `Session(bind=...)` included) is not recorded, so a request that
        asks for it is not replayed."""
        self._replayable = False
        return self._conn

    def _connected(self) -> Any:
        """The request's connection; the error SQLAlchemy gives for a
        closed one once it is gone."""
        conn = self._conn
        if conn is None:
            raise sa_exc.ResourceClosedError(self._gone())
        return conn

    def _checkout(self, node: Optional[int]) -> Any:
        # A replay's node, else the request's own key or session; without
        # either, the `route()` around the request stays, as for any checkout.
        if node is not None:
            token = _ROUTE.set((None, None, node))
        elif self._key is not None or self._session is not None:
            token = _ROUTE.set((self._key, self._session, None))
        else:
            token = None
        try:
            conn = self._engine.connect()
        finally:
            if token is not None:
                _ROUTE.reset(token)
        self._conn = conn
        rec = conn.connection._connection_record
        # The lease is the routing pool's that handed the record out: an
        # engine.dispose() since the request began replaced `self._pool`.
        self._node = int(_record_pool(rec)._outer._leases[rec].node)
        if getattr(_driver(conn), "autocommit", False):
            # AUTOCOMMIT (an engine's `execution_options` may set it): each
            # statement commits as it runs, and a replay would commit it again.
            self._replayable = False
        if session_set(_driver(conn)):
            # An earlier request left session state set by SQL text on this
            # pooled connection: a replay's new connection would not have it.
            self._replayable = False
            self._why = SESSION_STATE
        return conn

    def _bounded(self) -> Any:
        conn = self._conn
        if self._call_timeout is None:
            return contextlib.nullcontext()
        # SQLAlchemy invalidates the connection whose call the deadline
        # ended (the driver sees it closed): nothing to close here.
        return _armed(_driver(conn), self._call_timeout, lambda: None)

    def __enter__(self) -> "Request":
        self._enter_once()
        try:
            self._checkout(None)
        except Exception as e:
            # The checkout found the node failed (it could not connect):
            # nothing ran yet, so the request starts where the core says.
            orig = e.orig if isinstance(e, sa_exc.DBAPIError) and e.orig is not None else e
            failed = getattr(orig, "_racaffinity_failed_node", None)
            if not self._replayable or failed is None:
                raise
            self._node = failed
            self._recover(e, AT_START)
        return self

    def execute(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        """`Connection.execute` in the request's transaction, recorded. The
        rows of a statement that returns rows are read ahead (the `Result`
        handed back is buffered)."""
        self._connected()  # before the try: nothing to recover
        controls = False
        if self._pool.replay and isinstance(statement, sqlalchemy.TextClause):
            controls, sets_session = read_text(statement.text)
            # Once this request ends the state is the connection's, in no
            # later request's record.
            self._session_text |= sets_session
        if self._replayable:
            parameters = _copy_params(parameters)
            if controls:
                # What ran before it may be committed (or rolled back), and
                # its own reply may be lost after it did: only the block's
                # COMMIT has its outcome checked.
                self._replayable = False
        try:
            with self._bounded():
                result = self._conn.execute(statement, parameters, execution_options=execution_options)
                if not _in_transaction(self._conn):
                    self._replayable = False  # the transaction ended, however the statement hid it
                self._aborted = False  # none runs in an aborted one but a ROLLBACK (TO SAVEPOINT)
                out, answered = _freeze(result) if self._replayable else (result, None)
        except Exception as e:
            self._note_aborted(e)
            return self._recover(e, (statement, parameters, execution_options))
        if answered is not None:  # else not replayable: nothing to keep
            self._record((statement, parameters, execution_options), answered)
        return out

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            self._exit(et, ev)
        finally:
            self._ended = True

    def _exit(self, et: Any, ev: Any) -> None:
        if et is not None:
            self._drop(ev)
            return
        self._connected()  # nothing to commit, nor to recover
        try:
            self._commit()
        except Exception as e:
            self._note_aborted(e)
            try:
                self._recover(e, AT_COMMIT)
            except BaseException:
                self._drop(e)
                raise

    def _note_aborted(self, e: BaseException) -> None:
        """A statement (or the block's COMMIT) failed with `e`: a transaction
        an earlier error aborted is not replayed (its end is a rollback),
        and `e` may have aborted it (libpq's INERROR, 3). (An error that is
        not recoverable is not replayed anyway: a ROLLBACK TO SAVEPOINT
        after it makes the transaction whole again.)"""
        if self._aborted and _error_class(e) is ErrorClass.RECOVERABLE:
            self._replayable = False
        try:
            status = getattr(getattr(_driver(self._conn), "info", None), "transaction_status", None)
        except Exception:  # no connection, or SQLAlchemy invalidated it
            status = None
        self._aborted = status is not None and int(status) == 3

    def _commit(self) -> None:
        conn = self._conn
        self._committing = False
        with self._bounded():
            self._xid, self._pid = conn.exec_driver_sql(XACT_QUERY).one()
        self._committing = True
        with self._bounded():
            conn.commit()
        self._committing = False
        self.outcome = "committed"
        self._leave_session_state(conn)
        self._conn = None
        conn.close()

    def _leave_session_state(self, conn: Any) -> None:
        if self._session_text:
            try:
                mark_session_set(_driver(conn))
            except Exception:
                pass  # invalidated: the pool makes a new connection

    def _drop(self, e: Optional[BaseException]) -> None:
        """Gives the failed connection back: invalidated when its session is
        lost (its lease FAILED for a node failure), else rolled back."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Rolled back, but a session advisory lock or a prepared statement
        # outlives a rollback: erring towards refusing.
        self._leave_session_state(conn)
        try:
            if (
                e is not None
                and not isinstance(e, ResultsDiffer)
                and _error_class(e) is ErrorClass.RECOVERABLE
                and _session_lost(conn)
            ):
                conn.invalidate(e)
        except Exception:
            pass
        try:
            conn.close()
        except Exception:
            pass

    def _recover(self, original: BaseException, then: Any) -> Any:
        """Drives the shared recovery walk (`racaffinity._continuity.recover`),
        as `NodePools.request()` does: the decisions are the core's and the
        walk's; the I/O is this engine's."""
        walk = recover(self._pool._cluster, self, original, then, _error_class)
        sent: Any = None
        thrown: Optional[Exception] = None
        while True:
            try:
                op, arg = walk.send(sent) if thrown is None else walk.throw(thrown)
            except StopIteration as done:
                return done.value
            sent, thrown = None, None
            try:
                if op == RUN:
                    sent = self._run(arg)
                elif op == DROP:
                    self._drop(arg)
                elif op == REPLAY:
                    self._checkout(arg)
                elif op == COMMIT:
                    self._commit()
                else:
                    sent = self._ask(arg, op)
            except Exception as x:
                thrown = x

    def _ask(self, node: int, what: str) -> CommitOutcome:
        """On `node`, over a connection of its own (not pooled): the outcome
        of the commit in flight (`check`), or end its backend first
        (`force`) and wait for it to be gone. Any failure is an unknown
        outcome."""
        if self._xid is None:
            return CommitOutcome.UNKNOWN
        pool = self._pool
        extra = {"connect_timeout": _ASK_CONNECT_TIMEOUT} if "psycopg" in (pool._dialect.driver or "") else {}
        try:
            raw = pool._connector(node, **extra)()
        except Exception:
            return CommitOutcome.UNKNOWN
        bound = float(pool._connect_args.get("connect_timeout", _ASK_CONNECT_TIMEOUT))
        try:
            with _armed(getattr(raw, "driver_connection", raw), bound, lambda: None):
                cur = raw.cursor()
                for query in outcome_queries(self._xid, self._pid or 0, what == FORCE, int(bound * 1000)):
                    cur.execute(query)
                row = cur.fetchone()
            return CommitOutcome.from_pg_xact_status(row[0] if row else None)
        except Exception:
            return CommitOutcome.UNKNOWN
        finally:
            try:
                raw.close()
            except Exception:
                pass

    def _run(self, recorded: Tuple[Any, Any, Any]) -> Tuple[Any, Tuple[int, Optional[bytes]]]:
        statement, parameters, options = recorded
        with self._bounded():
            return _freeze(self._conn.execute(statement, parameters, execution_options=options))


def _copy_params(parameters: Any) -> Any:
    """The parameters as they are now (the application may change its dict
    after the call; a replay runs what ran)."""
    if isinstance(parameters, Mapping):
        return dict(parameters)
    if isinstance(parameters, (list, tuple)):
        return [dict(p) if isinstance(p, Mapping) else p for p in parameters]
    return parameters


class AsyncRequest:
    """`async with request(async_engine) as req:` — `Request` for the
    asyncio engine: the same request, run the way SQLAlchemy runs its sync
    core under asyncio (a greenlet per call), so every step of it is the
    sync one's."""

    def __init__(self, engine: Any, key: Any, session: Any, call_timeout: Optional[float]) -> None:
        self._engine = engine
        self._sync = Request(engine.sync_engine, key, session, call_timeout)
        self._async_conn: Optional[AsyncConnection] = None

    @property
    def node(self) -> str:
        return self._sync.node

    @property
    def replays(self) -> int:
        return self._sync.replays

    @property
    def backend_pid(self) -> Optional[int]:
        return self._sync.backend_pid

    @property
    def outcome(self) -> Optional[str]:
        return self._sync.outcome

    @property
    def connection(self) -> Optional[AsyncConnection]:
        """The SQLAlchemy `AsyncConnection` over the request's connection
        (`Request.connection` as asyncio has it): what runs on it (an ORM
        `AsyncSession(bind=...)` included) is not recorded, so a request
        that asks for it is not replayed. None once the request has ended."""
        conn = self._sync.connection
        if conn is None:
            return None
        if self._async_conn is None or self._async_conn.sync_connection is not conn:
            from sqlalchemy.ext.asyncio import AsyncConnection

            # One proxy per connection, so that what the application keeps
            # (a session's bind) is what the next read gives.
            self._async_conn = AsyncConnection(self._engine, conn)
        return self._async_conn

    async def __aenter__(self) -> "AsyncRequest":
        from sqlalchemy.util import greenlet_spawn

        await greenlet_spawn(self._sync.__enter__)
        return self

    async def execute(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        from sqlalchemy.util import greenlet_spawn

        return await greenlet_spawn(self._sync.execute, statement, parameters, execution_options=execution_options)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        from sqlalchemy.util import greenlet_spawn

        await greenlet_spawn(self._sync.__exit__, et, ev, tb)


def request(
    engine: Any,
    *,
    key: Optional[DataKey] = None,
    session: Optional[BytesLike] = None,
    call_timeout: Optional[float] = None,
) -> Any:
    """A request on an engine of `create_engine` (`with`) or
    `create_async_engine` (`async with`): one transaction on the node the
    core routes to (`key=`, `session=` as `route()`; a `cluster.pin()` or
    transaction scope around it as for any checkout), whose statements
    `req.execute(...)` runs and, with `replay=True`, records, so that a
    recoverable failure is replayed once elsewhere when the commit outcome
    allows it (docs/continuity.md). `call_timeout`: a statement or the
    COMMIT that gets no answer within it fails as a lost connection."""
    if hasattr(engine, "sync_engine"):
        return AsyncRequest(engine, key, session, call_timeout)
    return Request(engine, key, session, call_timeout)
