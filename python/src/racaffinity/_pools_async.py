"""Node pools over psycopg_pool: `AsyncNodePools`, the one source of the
pools' logic. `_pools_sync.py` is generated from `_pools_async.py` by
`tools/async_to_sync.py` (`make lint` fails when it is out of date), as
psycopg_pool does: edit `_pools_async.py`, then run the tool. Blocks under
`if _ASYNC:` exist only in the async pools, their `else:` only in the sync
ones."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import time
import weakref
from collections import abc
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, Union

import psycopg
import psycopg_pool
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from ._acompat import AEvent, ALock, acancel, ais_alive, ajoin, aspawn, await_all, await_event
from ._args import BytesLike, DataKey
from ._cluster import Cluster
from ._deadline import abounded, shut_down
from ._errors import ConfigError
from ._failures import is_node_failure
from ._failures import ConnectAttempts
from ._weak import members
from ._pools_base import FAILED, FORKED, LIVE_NODE_POOLS, NEUTRAL, OK, Base, connect_timeout, load_error_text
from ._continuity import AT_COMMIT, AT_START, COMMIT, DROP, FORCE, REPLAY, RUN, XACT_QUERY, CommitOutcome, ErrorClass
from ._continuity import (
    SESSION_STATE,
    Recorder,
    classify_sqlstate,
    digest_sets,
    mark_session_set,
    outcome_queries,
    read_text,
    recover,
    session_set,
)
from ._routes import HOST_LEASE_BASE, LEASE_T, PoolHostLease, context_pick, end_host_lease, end_lease, end_ok
from ._routes import lease_begin, lease_release, new_, pick_host_begins, _END_OK

# The class of a raw library lease (`ffi.new(LEASE_T)`), told apart from a
# host lease by one identity test.
_RAW_LEASE = new_(LEASE_T).__class__
from ._scopes import SCOPES
from ._state_changes import StateChanges
from ._ucp import AsyncPartitionMapLoader
from ._tpc_async import AsyncGlobalTransaction, recover_all
from ._tpc_types import RecoveryReport

_ASYNC = True

__all__ = ["AsyncNodePools"]

log = logging.getLogger("racaffinity.pools")

_monotonic = time.monotonic
_pool_log = logging.getLogger("psycopg.pool")  # psycopg_pool's, for what it logs itself

LOADER_SOURCE = "loader"


def _tracked(base: Type[psycopg.AsyncConnection[Any]], attempts: ConnectAttempts, conns: Any) -> Any:
    """A subclass of psycopg's connection class `base` whose `connect` feeds
    `attempts`, so a pool timeout can tell "cannot reach the node" from
    "busy" (`racaffinity._failures`), and adds each connection to `conns`
    (a `WeakSet`: the pool's connections, which a hard Down looks through
    for the borrowed ones)."""

    class _AsyncTracked(base):  # type: ignore[valid-type, misc]  # mypy takes no class variable as a base
        # psycopg's own `__aenter__` returns the connection: a borrow then
        # skips the call (a thirtieth of a bare checkout), not a subclass's.
        _racaffinity_enter_is_self = base.__aenter__ is psycopg.AsyncConnection.__aenter__

        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            token = attempts.started()
            try:
                conn = await super().connect(*args, **kwargs)
            except BaseException as e:
                attempts.finished(token, e)
                raise
            attempts.finished(token, None)
            # Never checked out: `_AliveCheck` reads it without a default,
            # and a time infinitely long ago needs no test of its own.
            conn._racaffinity_checked_out = -math.inf
            conn._racaffinity_borrowed = False  # by `connection()`, now
            conn._racaffinity_checking = False  # under the checkout check, now
            conn._racaffinity_settings_changed = False  # see `_check_intrans_gen`
            conns.add(conn)
            return conn

        def _check_intrans_gen(self, attribute: str) -> Any:
            # psycopg calls this before it changes autocommit,
            # isolation_level, read_only or deferrable, whichever way: the
            # borrow's end then reads one flag rather than four settings
            # (a thirtieth of a bare checkout) to know whether to put them back.
            self._racaffinity_settings_changed = True
            return super()._check_intrans_gen(attribute)

    return _AsyncTracked


# A connection used this recently skips the check on checkout (HikariCP's
# aliveBypassWindowMs, 500 ms): a busy pool pays nothing, and a connection
# that sat idle while its node stopped answering is found out at checkout.
# Unless its node failed since it was last checked out: then it is checked.
ALIVE_BYPASS = 0.5

# Raw lease buffers a node pools object keeps for reuse (`_lease_bufs`).
KEPT_LEASE_BUFS = 16

# Re-routes of one checkout whose node's pool was retired while it waited
# (a Down, a drain): each goes to the core again, within the same wait.
MAX_REROUTES = 3


class _AliveCheck:
    """The pool's `check`: a pooled connection idle for `ALIVE_BYPASS` or
    more answers an empty query within `bound`, else the pool discards it
    (the deadline shuts its socket: a blackholed node cannot hold the
    checkout), and a node failure is noted as the pool's last attempt, so
    the `PoolTimeout` that follows counts against the node.

    Every checkout runs it: `_AsyncNodePool._check_connection` makes the
    bypass test itself (a call less than psycopg_pool's, which calls the
    `check=` it was given) and calls `probe` only for the query."""

    __slots__ = ("attempts", "bound")

    def __init__(self, attempts: ConnectAttempts, bound: float) -> None:
        self.attempts = attempts
        self.bound = bound

    async def __call__(self, conn: Any) -> None:
        now = _monotonic()
        last = conn._racaffinity_checked_out
        conn._racaffinity_checked_out = now
        if now - last < ALIVE_BYPASS and last > self.attempts.node_failed_at:
            return
        await self.probe(conn)

    async def probe(self, conn: Any) -> None:
        autocommit = conn.autocommit
        try:
            async with abounded(conn, self.bound):
                await psycopg_pool.AsyncConnectionPool.check_connection(conn)
        except Exception as e:
            self.attempts.check_failed(e)
            raise
        except BaseException:
            # psycopg_pool's check turns autocommit on for its query and
            # back off in a `finally` it enters only once the switch
            # returned, and psycopg may yield to the loop after making it:
            # a cancel there left the connection in autocommit, which the
            # pool takes back so (the next borrower's transaction would
            # commit statement by statement). Put back, or closed: the pool
            # discards a closed connection.
            if conn.autocommit != autocommit and not conn.closed:
                try:
                    await conn.set_autocommit(autocommit)
                finally:
                    if conn.autocommit != autocommit:
                        await conn.close()
            raise


def pool_kwargs(
    connect_kwargs: Mapping[str, Any], timeout: Optional[float], pool_kwargs: Dict[str, Any]
) -> Tuple[Dict[str, Any], ConnectAttempts, Any]:
    """The keyword arguments of one node's pool: the connect arguments (with
    a bounded `connect_timeout` unless given), a tracked connection class and
    the checkout check (`_AliveCheck`, unless the caller passes `check=`);
    with the pool's `ConnectAttempts` and the `WeakSet` of its connections."""
    if "kwargs" in pool_kwargs:
        raise TypeError("pass connection arguments as connect_kwargs=, not kwargs=")
    kwargs = dict(connect_kwargs)
    kwargs.setdefault("connect_timeout", connect_timeout(timeout))
    attempts = ConnectAttempts()
    extra = dict(pool_kwargs)
    conns: Any = weakref.WeakSet()
    extra["connection_class"] = _tracked(extra.pop("connection_class", psycopg.AsyncConnection), attempts, conns)
    extra["kwargs"] = kwargs
    if extra.get("check") is None:
        bound = float(kwargs["connect_timeout"] or 10)
        if timeout is not None:
            bound = min(bound, timeout)
        extra["check"] = _AliveCheck(attempts, bound)
    return extra, attempts, conns


# What a `connection()` context holds in place of its connection once left:
# a second exit does nothing, and a new entry is refused as for an entered one.
_LEFT: Any = object()


class _AsyncConnection(PoolHostLease):
    """`async with pools.connection() as conn:` — what psycopg_pool's
    `connection()` does (getconn; the connection's own context: commit on
    success, rollback on error; putconn), without its generator context
    manager and its `usage_ms` statistic, inside a lease released OK, or
    FAILED on a node failure (`is_node_failure`), else NEUTRAL.

    A borrow served from its pin's cached route is its own host lease: it
    holds `PoolHostLease`'s two fields, and its `_buf` is None, so such a
    borrow makes one object, not two (the second cost a tenth of the
    wrapper's work). `_end` ends either kind. (None, not the object itself:
    a borrow referring to itself would be garbage only the cycle collector
    frees, each counting toward its next run, and never freed where the
    application turned it off.)

    This class is `connection()` without arguments, the common call: its
    key, session, timeout and node are the class's None and it sets only
    `_pools` (each store is a fortieth of the wrapper's work);
    `_ConnectionWithArgs` holds them. `failed_node` is set only by a
    failed borrow, and read only by a request, whose borrows have args."""

    __slots__ = ("_pools", "_buf", "_pool", "_conn", "failed_node")
    _pools: AsyncNodePools
    _buf: Any  # a raw lease, or None: the borrow is its own host lease
    _pool: Any  # the node's _AsyncNodePool
    _conn: Any  # psycopg's connection, with the pools' own _racaffinity_* fields
    failed_node: Optional[int]
    _key: Any = None
    _session: Any = None
    _timeout: Optional[float] = None
    _node: Optional[int] = None  # a node another decision chose (a replay's)
    _plain = True  # no key, session or node: the inline borrows may serve it

    def _route(self) -> Tuple[Any, Any]:
        pools = self._pools
        if self._node is None:
            return pools._acquire(self._key, self._session)
        buf = new_("racaffinity_lease *")
        rc = lease_begin(pools._h, self._node, buf)
        if rc:
            pools.cluster._raise(rc)
        return pools._pool_of(buf)

    def _end(self, buf: Any, outcome: int) -> None:
        if buf is None:
            end_host_lease(self._pools.cluster, self, outcome)
        else:
            end_lease(self._pools.cluster, buf, outcome)

    async def __aenter__(self) -> psycopg.AsyncConnection:
        # The two common borrows inline, with `Base._acquire`'s rules (its
        # call and the tuples cost a tenth of the wrapper's work): a pinned
        # context on its pin's cached route (a host lease, no library call),
        # and a context with nothing but balancing (one call, which hands an
        # Up node's lease to the page: its release makes none). Anything
        # else, or a miss, goes through `_acquire`.
        if self._conn is not None:
            # Set by a borrow: a second would overwrite it and leak the first.
            # (None from `connection()`: a missing slot's AttributeError, caught
            # here, cost a tenth of the wrapper's work.)
            raise RuntimeError("this connection() context is already entered; call connection() again for another")
        pools = self._pools
        pin = pools._pin_var.get()
        buf = pool = None  # routed once `pool` is set; `buf` None: the borrow is its own host lease
        if self._plain and pools._callback is None:
            scopes = SCOPES.get()
            if scopes is None or scopes.get(pools._serial) is None:
                if pin is not None:
                    # The epoch is read before the pin's cache: served only
                    # while it is the one the route was cached under.
                    page = pools._page
                    epoch = page[0]
                    if pin.epoch == epoch:  # never so for an ended pin
                        node = pin.route.node
                        if node < pools._host_nodes:  # 0 without host leases
                            pool = pools._by_id[node]
                            if pool is not None:
                                pin.hits += 1
                                page[HOST_LEASE_BASE + node] += 1
                                self.node = node
                                self._live = epoch
                elif pools._balanced_host:
                    bufs = pools._lease_bufs
                    try:
                        buf = bufs.pop()
                    except IndexError:
                        buf = new_(LEASE_T)
                    # Before the call: an end after any change since goes to the library.
                    page = pools._page
                    epoch = page[0]
                    rc = pick_host_begins(pools._h, buf)
                    if rc:
                        bufs.append(buf)
                        pools.cluster._raise(rc)
                    if not buf.token:  # the library leased nothing: Python begins the lease
                        # Read before the buffer goes back: another thread's
                        # borrow may pop it and pick into it at once.
                        node = buf.node
                        bufs.append(buf)
                        try:
                            pool = pools._by_id[node]
                        except IndexError:
                            pool = None
                        if pool is None:
                            pools._no_pool(node)  # raises; nothing was leased
                        # At once: until then balancing does not count it.
                        page[HOST_LEASE_BASE + node] += 1
                        self.node = node
                        self._live = epoch
                        buf = None
                    else:  # the library's lease, released at the end (then the buffer is reused)
                        buf, pool = pools._pool_of(buf)
                elif pools._balanced_inline:  # a build without the GIL: no host leases
                    bufs = pools._lease_bufs
                    try:
                        buf = bufs.pop()
                    except IndexError:
                        buf = new_(LEASE_T)
                    rc = context_pick(pools._h, 0, buf)
                    if rc:
                        pools.cluster._raise(rc)
                    try:
                        pool = pools._by_id[buf.node]
                    except IndexError:
                        pool = None
                    if pool is None:
                        buf, pool = pools._pool_of(buf)  # raises
        if pool is None:
            buf, pool = pools._acquire(self._key, self._session) if self._node is None else self._route()
        since = _monotonic()
        try:
            conn = await pool.getconn(self._timeout)
        except BaseException as e:
            buf, pool, conn = await self._reroute(e, buf, pool, since)
        conn._racaffinity_borrowed = True
        if pool._racaffinity_retired:
            buf, pool, conn = await self._retired_under(buf, pool, conn, since)
        self._buf, self._pool, self._conn = buf, pool, conn
        # `conn` is Any (it carries the pools' own fields); what is handed out is typed.
        entered: psycopg.AsyncConnection
        if conn._racaffinity_enter_is_self:
            entered = conn
            return entered
        try:
            entered = await conn.__aenter__()
            return entered
        except BaseException as e:
            await self._not_entered(e)
            raise

    async def _not_entered(self, e: BaseException) -> None:
        """The connection's own context failed to enter with `e`: no exit
        will run for this block, so the connection goes back now (as
        psycopg_pool's `connection()` gives it back) and the lease ends."""
        pool, conn, buf = self._pool, self._conn, self._buf
        self._conn = None
        conn._racaffinity_borrowed = False
        failed = conn.broken and is_node_failure(e, pool)
        if failed:
            self._pools._node_failed(pool)
        try:
            await pool.putconn(conn)
        finally:
            self._end(buf, FAILED if failed else NEUTRAL)

    async def _reroute(self, e: BaseException, buf: Any, pool: Any, since: float) -> Tuple[Any, Any, Any]:
        """The checkout from `pool` (begun at `since`) failed with `e`: a
        retired pool routes again, up to `MAX_REROUTES` times within the same
        wait; any other failure ends the lease and propagates. Out of the
        common path, which is one checkout."""
        pools = self._pools
        reroutes = 0
        while True:
            if not isinstance(e, psycopg_pool.PoolClosed):
                failed = is_node_failure(e, pool, waited_since=since)
                if failed:
                    pools._node_failed(pool)
                    self.failed_node = int((self if buf is None else buf).node)
                self._end(buf, FAILED if failed else NEUTRAL)
                raise e
            # The node went Down or drains, and its pool was retired while
            # this waited (fast connection failover): the core routes again
            # (the node's successor pool, or another node), within what is
            # left of the wait.
            self._end(buf, NEUTRAL)
            if pools._closed or reroutes == MAX_REROUTES:
                if pools._forked:
                    raise psycopg_pool.PoolClosed(FORKED) from e
                raise e
            reroutes += 1
            wait = self._timeout if self._timeout is not None else pool.timeout
            timeout = max(0.0, since + wait - time.monotonic())
            buf, pool = self._route()
            try:
                conn = await pool.getconn(timeout)
            except BaseException as again:
                e = again
                continue
            conn._racaffinity_borrowed = True
            if not pool._racaffinity_retired:
                return buf, pool, conn
            e = await _give_back(pool, conn)

    def _left_after_fork(self, et: Any) -> None:
        """The block was entered in the parent and is left in a forked
        child: the connection is the parent's session. Its commit or
        rollback here would end the parent's transaction under it, and
        giving it back to the (closed) pool would close it, a Terminate on
        the parent's socket. The child ends nothing there and leaves the
        connection to the parent (psycopg's finalizer ends a connection only
        in the process that made it); only the child's copy of the lease
        ends. A block that ends normally raises: nothing in it committed."""
        buf, self._conn = self._buf, _LEFT
        self._end(buf, NEUTRAL)
        if et is None:
            raise psycopg_pool.PoolClosed(f"{FORKED}; this block was entered before the fork and nothing in it was committed")

    async def _retired_under(self, buf: Any, pool: Any, conn: Any, since: float) -> Tuple[Any, Any, Any]:
        """`pool` handed `conn` out and was retired before the borrow marked
        it borrowed (what a hard Down aborts, and what keeps a drained pool
        known): the connection goes back (the retired pool closes it) and
        the borrow routes again. The borrow marks it, then reads the flag;
        the retirement sets the flag, then reads the marks: one of the two
        sees the other."""
        return await self._reroute(await _give_back(pool, conn), buf, pool, since)

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        conn = self._conn
        if conn is _LEFT:
            # Left already: as with psycopg_pool's connection(), a second exit
            # does nothing. The connection is the pool's again (maybe another
            # borrower's), and its lease has ended.
            return
        if self._pools._forked:
            self._left_after_fork(et)
            return
        pool = self._pool
        self._conn = _LEFT
        # The node is blamed only when its connection itself failed (broken:
        # lost, not closed by its owner), as the SQLAlchemy pool blames an
        # invalidated connection only: an error of the same shape may come
        # from anywhere in the block (a nested borrow's node, a connect to
        # another service).
        outcome = OK if et is None else (FAILED if conn.broken and is_node_failure(ev, pool) else NEUTRAL)
        try:
            await conn.__aexit__(et, ev, tb)
        except BaseException as e:
            if outcome == OK:
                outcome = FAILED if conn.broken and is_node_failure(e, pool) else NEUTRAL
            raise
        finally:
            conn._racaffinity_borrowed = False
            if outcome == FAILED:
                self._pools._node_failed(pool)
            if conn._racaffinity_settings_changed:
                # psycopg_pool gives a connection back as its borrower left
                # it: one left in autocommit ran the next borrower's block
                # statement by statement, committed whatever it raised.
                await _put_back_settings(pool, conn)
            try:
                await pool.putconn(conn)
            finally:
                buf = self._buf
                if buf is None:  # its own host lease
                    # `end_host_lease`'s OK end inline (its call cost as
                    # much as its work); `end_ok` makes the wrap.
                    epoch = self._live
                    page = self._pools._page
                    if outcome == OK and page[0] == epoch:  # an ended lease's 0 never matches
                        self._live = 0
                        i = HOST_LEASE_BASE + self.node
                        try:
                            page[i] += _END_OK
                        except (ValueError, OverflowError):
                            end_ok(page, i)  # the success bits wrap
                    else:
                        end_host_lease(self._pools.cluster, self, outcome)
                elif buf.__class__ is _RAW_LEASE:
                    pools = self._pools
                    lease_release(pools._h, buf, outcome)  # its result ignored, as `end_lease` does
                    # Reused by the next balanced borrow (`ffi.new` costs
                    # as much as the wrapper's own work); a few only: the
                    # borrows with a key or a session bring their own.
                    bufs = pools._lease_bufs
                    if len(bufs) < KEPT_LEASE_BUFS:
                        bufs.append(buf)
                else:
                    end_lease(self._pools.cluster, buf, outcome)


class _ConnectionWithArgs(_AsyncConnection):
    """`connection(key=..., session=..., timeout=...)`, a request's borrow
    (a timeout) or a replay's (a node): its slots over the class's Nones."""

    __slots__ = ("_key", "_session", "_timeout", "_node", "_plain")

    def __init__(
        self, pools: AsyncNodePools, key: Any, session: Any, timeout: Optional[float], node: Optional[int] = None
    ) -> None:
        self._pools = pools
        self._key = key
        self._session = session
        self._timeout = timeout
        self._node = node
        self._plain = key is None and session is None and node is None
        self._conn = None
        self.failed_node = None  # the node a failed borrow found failed


_new_connection = _AsyncConnection.__new__


def _error_class(e: BaseException) -> ErrorClass:
    """An error's class for replay: its SQLSTATE's (`classify_sqlstate`), or
    recoverable for an `OperationalError` without one (libpq lost the
    connection: reset, closed, timed out)."""
    state = getattr(e, "sqlstate", None)
    if isinstance(e, psycopg.Error) and state:
        return classify_sqlstate(state)
    if isinstance(e, psycopg.OperationalError):
        return ErrorClass.RECOVERABLE
    return ErrorClass.NOT_RECOVERABLE


async def _digest(cur: Any) -> Tuple[int, Optional[bytes]]:
    """What a statement answered (row count, digest of its rows, of every
    result set), compared on a replay. The rows are read ahead and the
    cursor rewound to its first set, so the application still reads them all."""
    sets: List[Tuple[int, Optional[List[Any]]]] = []
    while True:
        rows = await cur.fetchall() if cur.description is not None else None
        sets.append((cur.rowcount, rows))
        if not cur.nextset():
            break
    if len(sets) > 1:
        await cur.set_result(0)
    elif rows is not None:
        await cur.scroll(0, "absolute")
    return digest_sets(sets)


def _query_text(query: Any, conn: Any) -> Optional[str]:
    """The SQL of a query as psycopg takes it (str, bytes, `sql.Composable`,
    a template's fixed parts), None when it cannot be read."""
    if isinstance(query, str):
        return query
    if isinstance(query, (bytes, bytearray, memoryview)):
        return bytes(query).decode("utf-8", "replace")
    if isinstance(query, psycopg.sql.Composable):
        try:
            return query.as_string(conn)
        except Exception:
            return None
    strings = getattr(query, "strings", None)
    if isinstance(strings, tuple) and all(isinstance(x, str) for x in strings):
        return " ".join(strings)
    return None


# What `_RecordedCursor` is mixed into at run time (`_recorded_cursor`), for
# the checker only: its `super()` calls are that cursor's methods.
if TYPE_CHECKING:
    _CursorBase = psycopg.AsyncCursor[Any]
else:
    _CursorBase = object


class _RecordedCursor(_CursorBase):
    """The cursor `req.execute` hands back (a subclass of the connection's
    `cursor_factory`, `_recorded_cursor`). What the application runs on it
    itself (`execute`, `executemany`, `copy`, `stream`) or on its
    `connection` is not recorded, so a replay would drop it and report
    success: any of them makes the request not replayable."""

    __slots__ = ()
    _request: Recorder
    _conn: Any
    # psycopg reads `connection` itself while it runs a statement: only the
    # application's reads, once the cursor is handed out, count.
    _handed_out = False

    @property
    def connection(self) -> Any:
        if self._handed_out:
            self._request._replayable = False
        return self._conn

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._request._replayable = False
        return await super().execute(*args, **kwargs)

    async def executemany(self, *args: Any, **kwargs: Any) -> None:
        self._request._replayable = False
        await super().executemany(*args, **kwargs)

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        self._request._replayable = False
        return super().copy(*args, **kwargs)

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        self._request._replayable = False
        return super().stream(*args, **kwargs)


_recorded_classes: Dict[type, type] = {}


async def _recorded_cursor(request: Recorder, conn: Any, query: Any, params: Any) -> Any:
    """Runs `query` on a new `_RecordedCursor` of `conn`, of the class its
    `cursor_factory` makes (a `ClientCursor` stays one)."""
    base = conn.cursor_factory
    cls = _recorded_classes.get(base)
    if cls is None:
        cls = _recorded_classes.setdefault(base, type("RecordedCursor", (_RecordedCursor, base), {}))
    cur = cls(conn)
    cur._request = request
    await base.execute(cur, query, params)
    return cur


def _hand_out(cur: Any) -> Any:
    if cur is not None:
        cur._handed_out = True
    return cur


# What a request's statement leaves when its transaction goes on.
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

class _AsyncRequest(Recorder):
    """`async with pools.request() as req:` — one transaction whose
    statements (`await req.execute(query, params)`) are recorded; on a
    recoverable error the core decides, step by step, whether the commit in
    flight is checked (and forced), whether the request is replayed once on
    another node, or the original error surfaces with a `ReplayRefused`
    cause (docs/continuity.md). A statement that fails is replayed with
    those before it, and the block goes on; a failed COMMIT is checked
    first, then replayed and committed. Committed at the end of the block,
    rolled back on the application's own exception."""

    def __init__(
        self, pools: AsyncNodePools, key: Any, session: Any, timeout: Optional[float], call_timeout: Optional[float]
    ) -> None:
        if call_timeout is not None and not call_timeout > 0:
            raise ValueError("call_timeout must be > 0 (or None: no deadline)")
        super().__init__(pools.replay)
        self._pools = pools
        self._key = key
        self._session = session
        self._timeout = timeout
        self._call_timeout = call_timeout
        self._cm: Optional[_AsyncConnection] = None
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
        return self._pools.cluster.node_name(self._node)

    @property
    def backend_pid(self) -> int:
        """The server process of the request's connection now."""
        return int(self._connected().info.backend_pid)

    def _connected(self) -> Any:
        """The request's connection; the error psycopg gives for a closed
        one once it is gone."""
        conn = self._conn
        if conn is None:
            raise psycopg.OperationalError(self._gone())
        return conn

    @property
    def connection(self) -> Any:
        """The underlying psycopg connection. What runs on it is not
        recorded, so a request that asks for it is not replayed."""
        self._replayable = False
        return self._conn

    async def __aenter__(self) -> _AsyncRequest:
        self._enter_once()
        cm = _ConnectionWithArgs(self._pools, self._key, self._session, self._timeout)
        try:
            try:
                self._conn = await cm.__aenter__()
            except Exception as e:
                # The borrow found the node failed (it could not connect within the
                # wait): nothing ran yet, so the request starts where the core says.
                if not self._replayable or cm.failed_node is None:
                    raise
                self._node = cm.failed_node
                await self._recover(e, AT_START)
                return self
            self._cm, self._node = cm, (cm if cm._buf is None else cm._buf).node
            self._check_autocommit()
            self._check_session_set()
        except BaseException as e:
            # A `with` whose entry raised runs no exit: a Ctrl-C (or a
            # cancel) once a connection was borrowed gives it back now, with
            # its lease, or both stayed out for good.
            self._ended = True
            await self._drop(e)
            raise
        return self

    def _check_session_set(self) -> None:
        # An earlier request on this pooled connection set session state by
        # SQL text (`SET search_path`...): this one runs with it, and a
        # replay's new connection would not.
        if session_set(self._conn):
            self._replayable = False
            self._why = SESSION_STATE

    def _check_autocommit(self) -> None:
        # An autocommit connection (a pool's `configure` may set it)
        # commits each statement as it runs: a replay would commit it again.
        if self._conn.autocommit:
            self._replayable = False

    async def execute(self, query: Any, params: Any = None) -> Any:
        """Runs a statement in the request's transaction and records it."""
        conn = self._connected()  # before the try: nothing to recover
        if self._pools.replay:
            text = _query_text(query, conn)
            controls, sets_session = (True, True) if text is None else read_text(text)
            # Once this request ends the state is the connection's, in no
            # later request's record (an unreadable text counts).
            self._session_text |= sets_session
            if self._replayable:
                params = _params_as_run(params)
                if controls:
                    # What ran before it may be committed (or rolled back),
                    # and the statement's own reply may be lost after it
                    # did: only the block's COMMIT has its outcome checked.
                    self._replayable = False
        try:
            async with abounded(self._conn, self._call_timeout):
                cur = await self._execute(query, params)
            if self._conn.info.transaction_status not in _IN_TRANSACTION:
                self._replayable = False  # the transaction ended, however the text hid it
            self._aborted = False  # none runs in an aborted one but a ROLLBACK (TO SAVEPOINT)
            digest = await _digest(cur) if self._replayable else (0, None)
        except Exception as e:
            self._note_aborted(e)
            return _hand_out(await self._recover(e, (query, params)))
        self._record((query, params), digest)
        return _hand_out(cur)

    async def _execute(self, query: Any, params: Any) -> Any:
        return await _recorded_cursor(self, self._conn, query, params)

    def _note_aborted(self, e: BaseException) -> None:
        """A statement (or the block's COMMIT) failed with `e`: a transaction
        an earlier error aborted is not replayed (its end is a rollback),
        and `e` may have aborted it. (An error that is not recoverable is
        not replayed anyway: a ROLLBACK TO SAVEPOINT after it makes the
        transaction whole again.)"""
        if self._aborted and _error_class(e) is ErrorClass.RECOVERABLE:
            self._replayable = False
        conn = self._conn
        self._aborted = conn is not None and conn.info.transaction_status == TransactionStatus.INERROR

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            await self._exit(et, ev, tb)
        finally:
            self._ended = True

    async def _exit(self, et: Any, ev: Any, tb: Any) -> None:
        if self._pools._forked:
            # Entered in the parent before os.fork(): no COMMIT on the
            # parent's session (the connection's own exit says why).
            cm, self._cm, self._conn = self._cm, None, None
            if cm is not None:
                await cm.__aexit__(et, ev, tb)
            return
        if et is not None:
            await self._drop(ev)
            return
        self._connected()  # nothing to commit, nor to recover
        try:
            await self._commit()
        except Exception as e:
            self._note_aborted(e)
            try:
                await self._recover(e, AT_COMMIT)
            except BaseException:
                await self._drop(e)
                raise
        except BaseException as e:
            # A cancel or Ctrl-C in the COMMIT: nothing is recovered, but
            # the connection and its lease must not leak.
            await self._drop(e)
            raise

    async def _commit(self) -> None:
        conn = self._conn
        self._committing = False
        # The id that tells the outcome later, and the backend that could
        # still commit it: taken before COMMIT, in the transaction.
        async with abounded(conn, self._call_timeout):
            # Tuples whatever row factory the application's connections use.
            cur = conn.cursor(row_factory=tuple_row)
            await cur.execute(XACT_QUERY)
        self._xid, self._pid = await cur.fetchone()
        self._committing = True
        async with abounded(conn, self._call_timeout):
            await conn.commit()
        self._committing = False
        self.outcome = "committed"
        self._leave_session_state()
        # The connection goes back to the pool: nothing may run on it from
        # here (`_connected`), it may be another borrower's next.
        cm, self._cm, self._conn = self._cm, None, None
        if cm is not None:
            await cm.__aexit__(None, None, None)

    async def _drop(self, e: BaseException) -> None:
        """Gives the failed connection back (its lease FAILED for a node
        failure, else NEUTRAL)."""
        # Rolled back, but a session advisory lock or a prepared statement
        # outlives a rollback: erring towards refusing.
        self._leave_session_state()
        cm, self._cm, self._conn = self._cm, None, None
        if cm is not None:
            try:
                await cm.__aexit__(type(e), e, e.__traceback__)
            except Exception:
                pass

    def _leave_session_state(self) -> None:
        if self._session_text:
            mark_session_set(self._conn)

    async def _recover(self, original: BaseException, then: Any) -> Any:
        """Drives the shared recovery walk (`_continuity.recover`): its
        decisions are the same for every request type, its I/O is this one's."""
        walk = recover(self._pools.cluster, self, original, then, _error_class)
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
                    sent = await self._run(arg)
                elif op == DROP:
                    await self._drop(arg)
                elif op == REPLAY:
                    await self._replay_on(arg)
                elif op == COMMIT:
                    await self._commit()
                else:
                    sent = await self._ask(arg, op)
            except Exception as x:
                thrown = x

    async def _ask(self, node: int, what: str) -> CommitOutcome:
        """On `node`, over a connection of its own: the outcome of the
        commit in flight (`check`), or end its backend first (`force`) and
        wait for it to be gone. Any failure is an unknown outcome."""
        pools = self._pools
        if self._xid is None:
            return CommitOutcome.UNKNOWN
        kw = dict(pools._connect_kwargs)
        kw.setdefault("connect_timeout", connect_timeout(pools.probe_timeout))
        bound = float(kw["connect_timeout"] or 10)
        # The application's row factory and autocommit setting are not the
        # check's: it reads tuples, and runs outside any transaction.
        kw.update(autocommit=True, row_factory=tuple_row)
        kw.pop("cursor_factory", None)
        try:
            conn = await psycopg.AsyncConnection.connect(pools._node_dsn(node), **kw)
        except Exception:
            return CommitOutcome.UNKNOWN
        try:
            async with abounded(conn, bound):
                for query in outcome_queries(self._xid, self._pid or 0, what == FORCE, int(bound * 1000)):
                    cur = await conn.execute(query)
                row = await cur.fetchone()
            return CommitOutcome.from_pg_xact_status(row[0] if row else None)
        except Exception:
            return CommitOutcome.UNKNOWN
        finally:
            try:
                await conn.close()
            except Exception:
                pass

    async def _replay_on(self, node: int) -> None:
        await self._pools._renew_if_backing_off(node)
        cm = _ConnectionWithArgs(self._pools, None, None, self._timeout, node)
        self._conn = await cm.__aenter__()
        self._cm = cm
        self._check_autocommit()
        # Session state an earlier request set on this connection would be
        # under the replay, and never was under the request.
        self._check_session_set()

    async def _run(self, statement: Tuple[Any, Any]) -> Tuple[Any, Tuple[int, Optional[bytes]]]:
        query, params = statement
        async with abounded(self._conn, self._call_timeout):
            cur = await self._execute(query, params)
        return cur, await _digest(cur)


class AsyncNodePools(Base):
    """One `psycopg_pool.AsyncConnectionPool` per node.

    `dsns` maps every node name of `cluster` to its libpq connection string;
    `connect_kwargs` go to every connection (e.g. `{"password": ...}`), other
    keyword arguments to every pool (`min_size`, `max_size`, `timeout`, …).
    With `heartbeat=True` every node is probed each `heartbeat_interval`
    seconds (default: the cluster's `heartbeat.interval`) with `SELECT 1` on
    a dedicated probe connection, within `probe_timeout`, and each result is
    reported. `affinity_callback` is UCP's connection affinity callback (four
    methods in snake_case); `partition_map_loader` returns the whole
    partition -> instance map, loaded at open, after each HA event and every
    `partition_map_reload` seconds. With `replay=True`, `request()` records
    its statements and replays a request a recoverable failure interrupted
    (docs/continuity.md). Close the pools (or use them as a context
    manager) to stop the heartbeat and the upkeep and close every pool.
    """

    if _ASYNC:
        __doc__ += """
    Open them in a running loop: `async with AsyncNodePools(...) as pools:`
    or `await pools.open()`; the heartbeat and the upkeep are asyncio tasks,
    and pins and transactions follow the asyncio task's context."""
    else:
        __doc__ += """
    They are open once constructed; the heartbeat and the upkeep are daemon
    threads, and pins and transactions follow the thread's context."""

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
        partition_map_loader: Optional[AsyncPartitionMapLoader] = None,
        partition_map_reload: Optional[float] = None,
        upkeep_interval: float = 0.2,
        replay: bool = False,
        **pool_kwargs: Any,
    ) -> None:
        if not isinstance(replay, bool):
            raise TypeError(f"replay must be a bool, not {type(replay).__name__}")
        if replay and (connect_kwargs or {}).get("autocommit"):
            raise ValueError(
                "replay=True needs transactions: connect_kwargs autocommit=True commits each statement"
                " as it runs, which a replay would commit again"
            )
        super().__init__(cluster, dsns, heartbeat, heartbeat_interval, probe_timeout, connect_kwargs)
        self.timeout = timeout
        self.replay = replay
        self._set_callback(affinity_callback)
        self._heartbeat: Optional[_AsyncHeartbeat] = None
        self._upkeep: Optional[_AsyncUpkeep] = None
        self._opened = False
        self._closing: Any = None  # the task of the close under way (`close()`)
        # The closes of retired pools still running (`_retire`).
        self._retiring: List[Any] = []
        # Node -> the pools its drains (and renewals) retired, whose
        # connections in use finish their requests: a hard Down of the node
        # aborts those too (they are on the failed node), also after the
        # node was Up again while they were in use.
        self._drained: Dict[int, List[Any]] = {}
        # Held while a node's pool is read and replaced (a drain, a Down, an
        # Up, a replay's renewal) and while close() begins: the upkeep and a
        # request's thread (or task) each replaced the pool they had read,
        # and the later store dropped the other's successor, left open.
        self._replace_lock = ALock()
        if not upkeep_interval > 0:
            raise ValueError("upkeep_interval must be > 0")
        if partition_map_reload is not None and not partition_map_reload > 0:
            raise ValueError("partition_map_reload must be > 0 (or None: at start and after HA events only)")
        self._pool_args = (min_size, max_size, timeout, dict(pool_kwargs))
        self._upkeep_args = (upkeep_interval, partition_map_loader, partition_map_reload)
        for node in self._dsns:
            self._by_id[node] = self._new_pool(node, min_size, False)
        LIVE_NODE_POOLS.add(self)
        if not _ASYNC:
            # The sync pools are open once constructed (their API since 0.1);
            # a failed open() closes them.
            self.open()

    def _new_pool(self, node: int, min_size: int, draining: bool) -> Any:
        """A node's pool, not opened yet."""
        name, dsn = self._dsns[node]
        first_min, max_size, timeout, extra_kwargs = self._pool_args
        extra, attempts, conns = pool_kwargs(self._connect_kwargs, timeout, extra_kwargs)
        pool = _AsyncNodePool(
            dsn,
            min_size=min_size,
            max_size=max_size if max_size is not None or min_size > 0 else max(1, first_min),
            timeout=timeout,
            name=f"racaffinity-{name}",
            open=False,
            **extra,
        )
        pool._racaffinity_connects = attempts  # read by _failures.is_node_failure
        pool._racaffinity_draining = draining
        # Its connections: those borrowed by `connection()` now (marked
        # while they are) are what a hard Down aborts. Found when needed: a
        # borrow sets a flag rather than adding to and taking from a set.
        pool._racaffinity_conns = conns
        return pool

    def _node_failed(self, pool: Any) -> None:
        """A node failure on `pool`'s node: its connections are checked at
        their next checkout, and the upkeep looks at the node states now (an
        ejection may have taken it Down)."""
        pool._racaffinity_connects.node_failed_at = time.monotonic()
        if self._upkeep is not None:
            self._upkeep.poke()

    async def open(self) -> None:
        """Opens every pool, loads the partition map (with a loader) and
        starts the upkeep and the heartbeat. Idempotent; `PoolClosed` after
        `close()`."""
        if self._closed:  # would run again what close() stopped, and no later close() would
            raise psycopg_pool.PoolClosed("these node pools are closed")
        if self._opened:
            return
        self._opened = True
        # An open that fails part way (the first map load interrupted: a
        # cancel, Ctrl-C) closes what it opened: `async with` runs no exit
        # for a failed entry, and a second open() would return at once.
        try:
            await self._open()
        except BaseException:
            await self.close()
            raise

    async def _open(self) -> None:
        # The states the pools open under are the upkeep's first ones: a
        # change after this read is one it acts on.
        states = {node: self.cluster.node_state(node) for node, _pool in self.items()}
        for node, state in states.items():
            if state.name != "UP":
                # As a pool the upkeep saw go Down or drain: no idle
                # connection to the node, refilled at once when it is Up
                # (a min_size pool kept them, and refilled only at
                # psycopg_pool's reconnect back-off).
                self._by_id[node] = self._new_pool(node, 0, True)
                self._by_id[node]._racaffinity_connects.node_failed_at = time.monotonic()
            await self._by_id[node].open(wait=False)
        interval, loader, reload_interval = self._upkeep_args
        self._upkeep = _AsyncUpkeep(self, interval, loader, reload_interval, states)
        if loader is not None:
            await self._upkeep.reload("start")
        self._upkeep.start()
        if self._heartbeat_on:
            self._heartbeat = _AsyncHeartbeat(self)
            self._heartbeat.start()

    # -- seed 002 (UCP): planned drains, the partition-map loader ------------------

    async def _drain_node(self, node: int) -> None:
        """A Draining node's pool: idle connections close now, busy ones when
        returned (the pool is retired: psycopg_pool closes a connection put
        back into a closed pool), and its successor keeps no idle connection
        while the node drains."""
        async with self._replace_lock:
            pool = self._by_id[node]
            if pool is None or self._closed:
                return
            if pool._racaffinity_draining and pool.get_stats().get("pool_available", 0) == 0:
                return
            successor = self._new_pool(node, 0, True)
            await successor.open(wait=False)
            self._by_id[node] = successor
            # Kept whatever it holds now: a borrow it is serving finishes
            # on the node, and a hard Down later aborts it.
            self._drained[node] = [*_in_use(self._drained.get(node, ())), pool]
            await self._retire(pool)

    async def _down_node(self, node: int, hard: bool) -> None:
        """A node gone Down (FAN, operator, heartbeat, ejection): its pool is
        retired at once as for a drain (idle connections close, tasks
        waiting on it route again, its successor keeps no idle connection
        until the node is Up), and on a hard Down (not the end of a planned
        drain) its borrowed connections are aborted: their next call fails
        at once instead of waiting on a dead or hung node."""
        async with self._replace_lock:
            pool = self._by_id[node]
            if pool is None or self._closed:
                return
            successor = self._new_pool(node, 0, True)
            successor._racaffinity_connects.node_failed_at = time.monotonic()
            await successor.open(wait=False)
            # Flagged only once its successor is in place: a borrow that
            # finds its pool retired routes again, and the open (psycopg_pool
            # starts its threads: slow on a loaded machine) left the flagged
            # pool the node's, so a node Up again meanwhile sent that borrow
            # back to it until its reroutes ran out.
            self._by_id[node] = successor
            pool._racaffinity_retired = True  # before its marks are read (`_retired_under`)
            drained = self._drained.pop(node, [])
            if hard:
                _abort_in_use([pool, *drained])
            else:
                # The drain's end: its connections in use finish, on the
                # node, which a hard Down after it is Up again aborts.
                in_use = _in_use([pool, *drained])
                if in_use:
                    self._drained[node] = in_use
            await self._retire(pool)

    async def _abort_retired(self, node: int) -> None:
        """The node failed after its drain ended: the connections still in
        use in its retired pools are aborted, as at a hard Down."""
        async with self._replace_lock:
            _abort_in_use(self._drained.pop(node, ()))

    async def _retire(self, pool: Any) -> None:
        """Retires a node's old pool: it takes no new waiter from now on,
        those waiting on it route again, and it closes in the background (a
        task; a thread in the sync pools), which `close()` waits for.
        psycopg_pool's close() waits for each of its workers up to
        `RETIRE_TIMEOUT`, and a worker connecting to a silent node holds it
        that long: the caller of `apply_event` (or the upkeep) must not
        wait (the chaos soak saw `apply_event` hold its caller 1.35 s,
        docs/soak.md)."""
        # Refused before the close starts (the node pool's close() puts the
        # same refusal in place, but only once the background close runs).
        pool._getconn_unchecked = pool._refuse_checkout
        await _fail_waiters(pool)
        self._retiring = [h for h in self._retiring if ais_alive(h)]
        self._retiring.append(aspawn(_close_retired, (pool,), f"racaffinity-retire-{pool.name}"))

    async def _renew_if_backing_off(self, node: int) -> None:
        """A node's pool whose last connect failed (the node down, or
        refusing while it starts up or shuts down) waits psycopg_pool's
        reconnect back-off (1, 2, 4 s ... after each failure) before its
        next one, whatever the node does meanwhile: a replay the core sends
        there (it reads the node as usable: restarted before it was ever
        Down) would wait that out and time out though the node is back. A
        fresh pool connects at once; the old one retires as for a Down
        (its connections, of a node that failed, close)."""
        async with self._replace_lock:
            pool = self._by_id[node]
            if pool is None or self._closed or pool._racaffinity_draining:
                return
            attempts = pool._racaffinity_connects
            if not (attempts.last_failed or attempts.backing_off):
                return
            successor = self._new_pool(node, self._pool_args[0], False)
            successor._racaffinity_connects.node_failed_at = time.monotonic()
            await successor.open(wait=False)
            self._by_id[node] = successor
            # Kept whatever it holds now, as a drain's: a borrow it is
            # serving finishes on the node, and a hard Down later aborts it.
            self._drained[node] = [*_in_use(self._drained.get(node, ())), pool]
            await self._retire(pool)

    async def _undrain_node(self, node: int) -> None:
        """The node is Up again: its pool grows back to `min_size`."""
        async with self._replace_lock:
            pool = self._by_id[node]
            min_size, max_size = self._pool_args[0], self._pool_args[1]
            # Those of the drain's retired pools with a connection in use
            # stay known: it is on the node, and a hard Down later aborts it.
            drained = _in_use(self._drained.pop(node, ()))
            if drained:
                self._drained[node] = drained
            if pool is not None and getattr(pool, "_racaffinity_draining", False) and not self._closed:
                await pool.resize(min_size, pool.max_size if max_size is None else max_size)
                pool._racaffinity_draining = False

    async def apply_event(self, line: Union[str, bytes]) -> int:
        """`cluster.apply_event(line)`, then pool upkeep at once: a planned
        drain (`reason=USER`, `drain_timeout=`) starts draining the node's
        pool, and the partition-map loader reloads after a state change."""
        changed = self.cluster.apply_event(line)
        if self._upkeep is not None:
            await self._upkeep.round()
        return changed

    async def reload_partition_map(self) -> bool:
        """Reloads the partition map from the loader now; False if the load
        failed (the last good map stays)."""
        if self._upkeep_args[1] is None:
            raise ConfigError("these pools have no partition_map_loader")
        if self._upkeep is None:
            raise ConfigError("these pools are not open")
        return await self._upkeep.reload("reload_partition_map()")

    @property
    def partition_map_loads(self) -> Tuple[int, int, Optional[str]]:
        """(successful loads, failed loads, the last load's error or None)."""
        u = self._upkeep
        return (u.loads, u.load_failures, u.load_error) if u is not None else (0, 0, None)

    # -- connections, two-phase commit ----------------------------------------------

    def connection(
        self, *, key: Optional[DataKey] = None, session: Optional[BytesLike] = None, timeout: Optional[float] = None
    ) -> _AsyncConnection:
        """A connection from the node the core routes to (the order:
        transaction, session/key argument, session scope, pin, load
        balancing), as an async context manager."""
        if key is not None or session is not None or timeout is not None:
            return _ConnectionWithArgs(self, key, session, timeout)
        # The constructor without its frame: a fifth of this wrapper's cost.
        cm = _new_connection(_AsyncConnection)
        cm._pools = self
        cm._conn = None
        return cm

    def request(
        self,
        *,
        key: Optional[DataKey] = None,
        session: Optional[BytesLike] = None,
        timeout: Optional[float] = None,
        call_timeout: Optional[float] = None,
    ) -> _AsyncRequest:
        """A request: one transaction on the node the core routes to (as
        `connection()`), whose statements `await req.execute(...)` runs and,
        with `replay=True`, records, so that a recoverable failure is
        replayed once elsewhere when the commit outcome allows it
        (docs/continuity.md). `timeout`: the wait for a connection;
        `call_timeout`: a statement or the COMMIT that gets no answer
        within it fails as a lost connection (a node that stopped answering
        cannot hold the request)."""
        return _AsyncRequest(self, key, session, timeout, call_timeout)

    def global_transaction(self, gtrid: str, **kwargs: Any) -> AsyncGlobalTransaction:
        """A two-phase (XA-style) transaction over psycopg's tpc_* API; see
        `racaffinity.tpc`."""
        return AsyncGlobalTransaction(self, gtrid, **kwargs)

    async def recover_all(self, action: str = "rollback", **kwargs: Any) -> RecoveryReport:
        """Resolves every in-doubt branch on every node; see
        `racaffinity.tpc`."""
        return await recover_all(self, action, **kwargs)

    # -- heartbeat and lifecycle ----------------------------------------------------

    async def check_heartbeat(self) -> None:
        """Runs one heartbeat round now (probes every node and reports);
        `PoolClosed` after `close()`."""
        if self._closed:  # its probe connections would outlive the pools
            raise psycopg_pool.PoolClosed("these node pools are closed")
        if self._heartbeat is not None:
            await self._heartbeat.tick()
            return
        # Probes of this call alone: closed however the round ends. A round
        # cancelled while a probe hung left the probes that had answered
        # with their connections open, and the hung one running.
        hb = _AsyncHeartbeat(self)
        try:
            await hb.tick()
        finally:
            for probe in hb._probes.values():
                acancel(probe)
            await hb.close_probes()

    async def close(self, timeout: float = 5.0) -> None:
        """Stops the heartbeat and the upkeep and closes every pool; a pool
        that fails to close is logged and the others are closed all the
        same. Idempotent."""
        if _ASYNC:
            # The close runs as a task of its own that the caller waits for:
            # a caller cancelled part way (an `asyncio.timeout` around a
            # shutdown) had marked the pools closed and stopped there, the
            # pools after the one it was closing left open with their
            # connections, and every later close() returned at once. Now
            # the close goes on to the end, and a later close() waits for it.
            if self._forked:
                # The pools, and a close under way at the fork (a task of a
                # loop this child does not run), are the parent's.
                return
            closing = self._closing
            if closing is None:
                closing = self._closing = aspawn(self._close, (timeout,), "racaffinity-close")
            if not closing.done():
                await asyncio.shield(closing)
        else:
            if self._closed:
                return
            await self._close(timeout)

    async def _close(self, timeout: float) -> None:
        async with self._replace_lock:
            # A replacement under way stores its pool before this (closed
            # below) or, after it, sees `_closed` and makes none.
            self._closed = True
        # A Ctrl-C (sync) in one step's wait had stopped the close there,
        # the parts after it left open for good (a later close() returns
        # at once, `_closed` set): it goes on to the end, then propagates,
        # as the async close runs on after its caller's cancel.
        interrupt: Optional[BaseException] = None
        steps: List[Callable[[], Any]] = []
        if self._heartbeat is not None:
            steps.append(self._heartbeat.stop)
        if self._upkeep is not None:
            steps.append(self._upkeep.stop)
        for pool in self._by_id:
            if pool is not None:
                steps.append(functools.partial(self._close_pool, pool, timeout))
        steps.append(functools.partial(await_all, self._retiring, timeout))
        for step in steps:
            try:
                await step()
            except BaseException as e:
                if _ASYNC:
                    raise
                if isinstance(e, Exception) or interrupt is not None:
                    raise  # a second Ctrl-C stops it
                interrupt = e
        if interrupt is not None:
            raise interrupt

    @staticmethod
    async def _close_pool(pool: Any, timeout: float) -> None:
        try:
            await pool.close(timeout=timeout)
        except Exception:
            log.exception("racaffinity: closing a node pool failed")

    async def __aenter__(self) -> AsyncNodePools:
        await self.open()
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        await self.close()


class _AsyncNodePool(psycopg_pool.AsyncConnectionPool):
    """A node's pool. Once retired (closed: its node went Down or drains) it
    takes no new waiter: after a failed checkout check, psycopg_pool's
    getconn loop would queue the caller in the closed pool, which nobody
    serves, until its whole timeout (the chaos soak found a blackholed
    node's borrow waiting there 3 s). `PoolClosed` sends it to route again
    (`_reroute`), within its wait. `close()` puts the refusal in place
    (an instance attribute over psycopg_pool's method) before it closes,
    so an open pool's checkout runs psycopg_pool's code alone."""

    # Set when its node went Down (`AsyncNodePools._down_node`), before the
    # pools read which of its connections are borrowed. A drain's or a
    # renewal's retired pool may serve a borrow it began: the node is
    # usable, and a drained pool stays known whatever it holds.
    _racaffinity_retired = False
    # Set by AsyncNodePools._new_pool: read by _failures.is_node_failure, by
    # the drain, and by a hard Down (the pool's connections).
    _racaffinity_connects: ConnectAttempts
    _racaffinity_draining: bool
    _racaffinity_conns: Any

    async def close(self, timeout: float = 5.0) -> None:
        # An instance attribute over psycopg_pool's method, on purpose (see
        # above): setattr, as the checker refuses an assignment to a method.
        setattr(self, "_getconn_unchecked", self._refuse_checkout)
        await super().close(timeout)

    async def _refuse_checkout(self, timeout: float) -> Any:
        raise psycopg_pool.PoolClosed(f"the pool {self.name!r} is retired: its node is not usable")

    async def _connect(self, timeout: Optional[float] = None) -> Any:
        conn: Any = await super()._connect(timeout)  # with the pools' own _racaffinity_* fields
        # What the pool made it with (`connect_kwargs`, then `configure`):
        # a borrower's change ends with its borrow (`_put_back_settings`).
        conn._racaffinity_made = (conn.autocommit, conn.isolation_level, conn.read_only, conn.deferrable)
        conn._racaffinity_settings_changed = False
        return conn


    async def _check_connection(self, conn: Any) -> None:
        check = self._check
        if check.__class__ is not _AliveCheck:  # the caller's check=, or none
            await super()._check_connection(conn)
            return
        # `_AliveCheck.__call__` inline.
        now = _monotonic()
        last = conn._racaffinity_checked_out
        conn._racaffinity_checked_out = now
        if now - last < ALIVE_BYPASS and last > check.attempts.node_failed_at:
            return
        # Marked while it runs: the check's bound is the whole wait, and a
        # hard Down must end it (as it aborts borrowed connections) so that
        # the borrow routes again within its wait.
        conn._racaffinity_checking = True
        try:
            await check.probe(conn)
        except Exception as e:  # as psycopg_pool's own
            _pool_log.info("connection failed check: %s", e)
            raise
        finally:
            conn._racaffinity_checking = False


async def _put_back_settings(pool: Any, conn: Any) -> None:
    """Puts `conn`'s autocommit, isolation level, read-only and deferrable
    settings back to what its pool made it with (HikariCP resets them on
    return; local settings: no round trip), before psycopg_pool's return
    and the caller's `reset=`; closes it when that fails, so the pool
    discards it (as psycopg_pool discards a connection its rollback or
    `reset` fails on). A closed or busy connection is left to psycopg_pool,
    which discards it."""
    status = conn.pgconn.transaction_status
    if status == TransactionStatus.UNKNOWN or status == TransactionStatus.ACTIVE:
        return
    autocommit, isolation_level, read_only, deferrable = conn._racaffinity_made
    try:
        if status != TransactionStatus.IDLE:  # none changes inside a transaction
            await conn.rollback()
        if conn.autocommit != autocommit:
            await conn.set_autocommit(autocommit)
        if conn.isolation_level != isolation_level:
            await conn.set_isolation_level(isolation_level)
        if conn.read_only != read_only:
            await conn.set_read_only(read_only)
        if conn.deferrable != deferrable:
            await conn.set_deferrable(deferrable)
        conn._racaffinity_settings_changed = False
    except Exception as e:
        log.warning("racaffinity: the pool %r could not put a returned connection's settings back (%s): discarded",
                    pool.name, e)
        await conn.close()


async def _give_back(pool: Any, conn: Any) -> psycopg_pool.PoolClosed:
    """Puts back a connection a retired `pool` handed out (it closes it)
    and returns the error the borrow routes again on."""
    conn._racaffinity_borrowed = False
    await pool.putconn(conn)
    return psycopg_pool.PoolClosed(f"the pool {pool.name!r} was retired as it handed a connection out")


def _abort_in_use(pools: abc.Iterable[Any]) -> None:
    """Aborts the connections borrowed (or under their checkout check) of
    `pools`: their next call fails at once instead of waiting on a dead or
    hung node."""
    for p in pools:
        for conn in members(p._racaffinity_conns):
            if conn._racaffinity_borrowed or conn._racaffinity_checking:
                shut_down(conn)


def _in_use(pools: abc.Iterable[Any]) -> List[Any]:
    """The retired `pools` with a connection borrowed, or under its checkout
    check, now."""
    return [
        p for p in pools
        if any(conn._racaffinity_borrowed or conn._racaffinity_checking for conn in members(p._racaffinity_conns))
    ]


# How long the close of a retired pool waits for each of its workers
# (psycopg_pool's close timeout); nobody waits for that close but `close()`.
RETIRE_TIMEOUT = 1.0


async def _close_retired(pool: Any) -> None:
    # psycopg_pool's close() takes the idle connections out of the pool and
    # stops at the first whose close raises: those after it would stay open
    # on the server, and nobody else holds them.
    idle = list(getattr(pool, "_pool", ()))
    try:
        await pool.close(timeout=RETIRE_TIMEOUT)
    except Exception:
        log.exception("racaffinity: closing the retired pool %r failed; closing its idle connections", pool.name)
        for conn in idle:
            if not conn.closed:
                try:
                    await conn.close()
                except Exception as e:
                    log.warning("racaffinity: a connection of the retired pool %r failed to close: %s", pool.name, e)


async def _fail_waiters(pool: Any) -> None:
    """Sends the tasks waiting on a retired pool on at once (`PoolClosed`:
    they route again). psycopg_pool's close() fails them only after its
    workers stop, which a connect attempt to a dead node holds up to
    `connect_timeout`."""
    waiting, lock = getattr(pool, "_waiting", None), getattr(pool, "_lock", None)
    if waiting is None or lock is None:  # another psycopg_pool: close() fails them, later
        return
    async with lock:
        clients = list(waiting)
        waiting.clear()
    for client in clients:
        await client.fail(psycopg_pool.PoolClosed(f"the pool {pool.name!r} is retired: its node is not usable"))


# psycopg's connect() arguments that are not libpq connection parameters.
_NOT_CONNINFO = frozenset(("autocommit", "prepare_threshold", "context", "row_factory", "cursor_factory"))


def _ping_ok(dsn: str, connect_kwargs: Mapping[str, Any]) -> bool:
    """Whether libpq's PQping says the server accepts connections (a failed
    authentication still means it does)."""
    params = {k: v for k, v in connect_kwargs.items() if k not in _NOT_CONNINFO}
    conninfo = psycopg.conninfo.make_conninfo(dsn, **params)
    return psycopg.pq.PGconn.ping(conninfo.encode()) == psycopg.pq.Ping.OK


class _AsyncHeartbeat:
    """Probes every node each interval; one probe per node in flight. A probe
    that has not answered within `probe_timeout` counts as a miss, and so
    does every round in which it is still stuck."""

    def __init__(self, pools: AsyncNodePools) -> None:
        self._pools = pools
        self._halt = AEvent()
        self._probes: Dict[int, Any] = {}
        self._results: Dict[int, bool] = {}
        self._conns: Dict[int, Any] = {}
        # Set by `close_probes`: a probe that connects after it closes its own.
        self._closed = False
        self._runner: Any = None

    def start(self) -> None:
        self._runner = aspawn(self._run, (), "racaffinity-heartbeat")

    def is_alive(self) -> bool:
        return self._runner is not None and ais_alive(self._runner)

    async def stop(self) -> None:
        self._halt.set()
        if self._runner is not None:
            await ajoin(self._runner, self._pools.probe_timeout + 2.0)
        for probe in self._probes.values():
            acancel(probe)

    async def _run(self) -> None:
        interval = self._pools.heartbeat_interval
        nxt = time.monotonic()
        while not self._halt.is_set():
            try:
                await self.tick()
            except Exception:  # never let the heartbeat die
                log.exception("racaffinity: heartbeat round failed")
            nxt += interval
            now = time.monotonic()
            if nxt < now:  # fell behind (a slow round): do not burst
                nxt = now + interval
            if await await_event(self._halt, nxt - now):
                break
        await self.close_probes()

    async def _probe(self, node: int, dsn: str) -> None:
        ok = False
        try:
            conn = self._conns.get(node)
            if conn is None or conn.closed:
                kw = dict(self._pools._connect_kwargs)
                kw.setdefault("connect_timeout", connect_timeout(self._pools.probe_timeout))
                try:
                    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **kw)
                except Exception as e:
                    # A node that refuses the session for the user's sake (a
                    # missing role, a wrong password) is alive; one that is
                    # starting up, shutting down or in recovery is not, and
                    # libpq keeps no SQLSTATE (57P03) of a connect error to
                    # tell them apart. Its ping does.
                    log.debug("racaffinity: probe of node #%d failed to connect: %s", node, type(e).__name__)
                    if _ASYNC:
                        ok = await asyncio.to_thread(_ping_ok, dsn, kw)
                    else:
                        ok = _ping_ok(dsn, kw)
                    self._results[node] = ok
                    return
                self._conns[node] = conn
                if self._closed:
                    # The probes' connections were closed while this one
                    # connected (a probe thread cannot be cancelled, and a
                    # check_heartbeat round does not wait for a slow probe):
                    # nobody else would close it. Stored, then the flag read,
                    # as `close_probes` sets it, then reads the connections:
                    # one of the two takes it.
                    late = self._conns.pop(node, None)
                    if late is not None:
                        await late.close()
                    return
            # Bounded: a query stuck on its session (a hung backend, while
            # the node answers new sessions) would hold the probe, and the
            # node Down, for good; shut down, the next probe connects afresh.
            async with abounded(conn, self._pools.probe_timeout):
                await conn.execute("SELECT 1")
            ok = True
        except Exception as e:
            # A node that answers the query with an error of its own is alive:
            # only a node failure is a miss.
            ok = not is_node_failure(e)
            log.debug("racaffinity: probe of node #%d failed: %s", node, type(e).__name__)
            conn = self._conns.pop(node, None)
            if conn is not None:
                try:
                    await conn.close()
                except Exception:
                    pass
        self._results[node] = ok

    async def tick(self) -> None:
        pools = self._pools
        deadline = time.monotonic() + pools.probe_timeout
        started = []
        verdicts: Dict[int, bool] = {}
        for node, (_name, dsn) in pools._dsns.items():
            probe = self._probes.get(node)
            if probe is not None and ais_alive(probe):
                verdicts[node] = False  # the last probe is still stuck
                continue
            self._results.pop(node, None)
            self._probes[node] = aspawn(self._probe, (node, dsn), f"racaffinity-probe-{node}")
            started.append(node)
        await await_all([self._probes[node] for node in started], deadline - time.monotonic())
        for node in started:
            verdicts[node] = self._results.get(node, False)
        for node, ok in verdicts.items():
            try:
                pools.cluster.report_probe(node, ok)
            except Exception as e:  # a closed cluster or a removed node
                log.debug("racaffinity: report_probe(#%d) failed: %s", node, e)
        if pools._upkeep is not None:
            pools._upkeep.poke()  # a node this round took Down or Up: act now

    async def close_probes(self) -> None:
        self._closed = True
        for node in list(self._conns):
            conn = self._conns.pop(node, None)
            if conn is None:
                continue
            try:
                await conn.close()
            except Exception:
                pass


class _AsyncUpkeep:
    """The pools' upkeep: follows the node states the core reports and (1)
    drains the pool of a Draining node (idle connections close at once, busy
    ones when returned; no new idle connections while it drains), (2)
    reloads the partition map after each state change (an HA event) and
    every `reload_interval`. A failing loader keeps the last good map: it is
    logged and counted (`loads`, `load_failures`, `load_error`).

    The loader runs outside the upkeep's lock, one load at a time (its own
    lock), and the upkeep's own rounds hand their loads to a loader runner
    (a task; a thread in the sync pools) rather than wait: a slow loader
    held every other upkeep action (a Down's retirement and abort of its
    connections) for as long as it ran. In `AsyncNodePools` a plain
    function loader runs in a worker thread (`asyncio.to_thread`), off the
    event loop; a coroutine function (or a function returning an
    awaitable) is awaited on the loop, which it must not block."""

    def __init__(
        self,
        pools: AsyncNodePools,
        interval: float,
        loader: Optional[AsyncPartitionMapLoader],
        reload_interval: Optional[float],
        states: Dict[int, Any],
    ) -> None:
        # A weak reference: pools that are dropped without close() can go.
        self._pools = weakref.proxy(pools)
        self.interval = interval
        self.loader = loader
        self.reload_interval = reload_interval
        self._wake = AEvent()
        self._halt = AEvent()
        self._lock = ALock()
        # One load at a time, in the order they began: a later map is never
        # replaced by an earlier load that ended after it.
        self._load_lock = ALock()
        # The loader runner's: set when a round saw a state change.
        self._load_wake = AEvent()
        self._load_why = "HA event"
        self._loader_runner: Any = None
        # The states the pools opened under: an HA event before the first
        # round is a change too.
        self._last: Dict[int, Any] = dict(states)
        # Nodes whose Down ended a planned drain, until they fail or come back.
        self._planned: Dict[int, bool] = {}
        # A node that went Down (or drained) and came back between two
        # rounds shows Up to both: only the core's count of its changes moved.
        self._changes = StateChanges(pools.cluster)  # after the states: as a round reads them
        self._runner: Any = None
        self.loads = 0
        self.load_failures = 0
        self.load_error: Optional[str] = None
        self._next_reload = time.monotonic() + reload_interval if reload_interval else float("inf")

    def start(self) -> None:
        self._runner = aspawn(self._run, (), "racaffinity-upkeep")
        if self.loader is not None:
            self._loader_runner = aspawn(self._run_loads, (), "racaffinity-partition-map-loader")

    def poke(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        self._load_wake.set()
        if self._runner is not None:
            await ajoin(self._runner, 5.0)
        if self._loader_runner is not None:
            await ajoin(self._loader_runner, 5.0)

    async def _run(self) -> None:
        while not self._halt.is_set():
            await await_event(self._wake, self.interval)
            self._wake.clear()
            if self._halt.is_set():
                return
            try:
                await self.round(wait_for_load=False)
            except ReferenceError:
                return
            except Exception:  # the cluster closed, or a pool call failed: log and go on
                log.exception("racaffinity: pool upkeep failed")

    async def _run_loads(self) -> None:
        """The loader runner: a load after each state change a round saw
        (`_load_wake`) and every `reload_interval`."""
        while not self._halt.is_set():
            wait = self._next_reload - time.monotonic() if self.reload_interval else None
            woken = await await_event(self._load_wake, wait)
            self._load_wake.clear()  # before the load: a change during it loads again
            if self._halt.is_set():
                return
            try:
                await self.reload(self._load_why if woken else "period")
            except ReferenceError:
                return
            except Exception:  # the cluster closed: log and go on
                log.exception("racaffinity: partition map load failed")

    async def round(self, wait_for_load: bool = True) -> None:
        """Acts on the node states now; after a state change the map loads
        too, awaited (`apply_event`'s promise) unless `wait_for_load` is
        False (the upkeep's own rounds: the loader runner loads it)."""
        if await self._act():
            if wait_for_load:
                try:
                    await self.reload("HA event")
                except BaseException:
                    # Interrupted (the caller cancelled): the states are
                    # recorded as seen, so no later round would load for
                    # this event. The loader runner does.
                    self._load_wake.set()
                    raise
            else:
                self._load_wake.set()

    async def _act(self) -> bool:
        """One round of state handling, under the upkeep's lock; whether the
        map is due to load (a state changed and there is a loader)."""
        async with self._lock:
            pools = self._pools
            c = pools.cluster
            if c.closed:
                return False
            changed = False
            states = [(node, c.node_state(node)) for node, _pool in pools.items()]
            missed = self._changes.moved(c)
            for node, state in states:
                before = self._last.get(node)
                if before is not None and before != state:
                    changed = True
                    log.info("racaffinity: node %s %s -> %s", c.node_name(node), before.name, state.name)
                if state.name == "DRAINING":
                    await pools._drain_node(node)
                elif state.name == "DOWN" and before is not None and before.name != "DOWN":
                    # Whether the Down ended a planned drain (connections in
                    # use finish) or is a failure (they are aborted) is the
                    # core's answer: this round may never have seen the node
                    # Draining. A planned end retires whatever the pool holds:
                    # a draining pool with no idle connection would keep its
                    # waiters (served on the Down node once a connection came
                    # back) and that connection.
                    planned = c.node_down_is_planned(node)
                    self._planned[node] = planned
                    await pools._down_node(node, hard=not planned)
                elif state.name == "DOWN" and self._planned.get(node) and not c.node_down_is_planned(node):
                    # Failed after its drain ended (a FAN failure, the
                    # operator's Down): the connections still finishing
                    # there would hang on a dead node, as at any hard Down.
                    self._planned[node] = False
                    await pools._abort_retired(node)
                elif state.name == "UP" and before is not None and before.name != "UP":
                    self._planned.pop(node, None)
                    await pools._undrain_node(node)
                elif state.name == "UP" and before is not None and node in missed:
                    # Down (or Draining) and Up again since the last round,
                    # unseen: its connections, of a node that may have
                    # restarted, would be handed out unchecked for as long as
                    # they stay young. As a Down and an Up: the idle ones
                    # close and the pool refills at once, fresh. Whether the
                    # Down was hard is not known any more: the connections in
                    # use finish (a lost one fails on its own), as at a drain.
                    changed = True
                    log.info("racaffinity: node %s went Down or Draining and Up again between two upkeep rounds",
                             c.node_name(node))
                    self._planned.pop(node, None)
                    await pools._down_node(node, hard=False)
                    await pools._undrain_node(node)
                self._last[node] = state
            return changed and self.loader is not None

    async def reload(self, why: str) -> bool:
        """Loads and applies the map; a failure keeps the last good one."""
        async with self._load_lock:
            ok = await self._load(why)
            if self.reload_interval:
                self._next_reload = time.monotonic() + self.reload_interval
            return ok

    async def _load(self, why: str) -> bool:
        loader = self.loader
        assert loader is not None
        mapping: Any
        try:
            if _ASYNC:
                if _is_coroutine_function(loader):
                    mapping = loader()  # awaited below
                else:
                    mapping = await asyncio.to_thread(loader)
                if inspect.isawaitable(mapping):  # a function that returns one: the loop's
                    mapping = await mapping
            else:
                mapping = loader()
            if mapping is None:
                raise ValueError("the loader returned no map")
            epoch = self._pools.cluster.replace_partition_map(mapping, LOADER_SOURCE)
        except ReferenceError:
            raise
        except Exception as e:
            self.load_failures += 1
            # The core takes C strings: a NUL in the text (anything may be in
            # an exception's) is shown, not allowed to fail the record.
            self.load_error = f"{type(e).__name__}: {e}".replace("\0", "\\0")
            # In the core's metrics too, next to the map's epoch, as text
            # it takes: a failure to record it would fail the open.
            self._pools.cluster.partition_map_load_failed(LOADER_SOURCE, load_error_text(self.load_error))
            log.warning(
                "racaffinity: partition map load failed (%s), keeping the last good map: %s", why, self.load_error,
                exc_info=e,
            )
            return False
        self.loads += 1
        self.load_error = None
        log.debug("racaffinity: partition map epoch %d loaded (%s, %d entries)", epoch, why, len(mapping))
        return True


def _is_coroutine_function(fn: Any) -> bool:
    """Whether calling `fn` (a function, or an object whose `__call__` is
    one) makes a coroutine without running any of it."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _params_as_run(params: Any) -> Any:
    """The parameters as they are when the statement runs: the application
    may reuse its list or dict for the next call, and a replay must run
    what ran. A shallow copy: a value changed in place (a list bound as an
    array) is the application's to leave alone, as the docs say."""
    if isinstance(params, abc.Mapping):
        return dict(params)
    if isinstance(params, list):
        return list(params)
    return params
