"""Two-phase commit and recovery over `AsyncNodePools`: the one source of
`racaffinity.tpc`'s logic (its docstring tells the semantics).
`_tpc_sync.py` (over `NodePools`) is generated from this file by
`tools/async_to_sync.py` (`make lint` fails when it is out of date), as the
pools are: edit this file, then run the tool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import time
import uuid
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Set, Tuple

import psycopg
import psycopg_pool
from psycopg import Xid
from psycopg.pq import TransactionStatus

from ._acompat import acancel, ais_alive, aspawn, await_all
from ._args import DataKey
from ._deadline import abounded
from ._errors import Error, InvalidArgumentError, UnknownTransactionError
from ._failures import connection_lost, is_node_failure
from ._pools_base import FORKED
from ._routes import NodeState, Outcome, RouteKind
from ._token import request_token
from ._tpc_types import DEFAULT_FORMAT_ID, MAX_GTRID_BYTES, Branch, InDoubtError, Recovered, RecoveryReport, transaction_key

__all__ = ["AsyncGlobalTransaction", "recover_all"]

_ASYNC = True

log = logging.getLogger("racaffinity.tpc")


def _require_kind(pools: Any, what: str) -> None:
    """Each helper drives its own kind of connection: an async one's calls
    are coroutines, which a sync helper would never await."""
    if not all(isinstance(p, psycopg_pool.AsyncConnectionPool) for _node, p in pools.items()):
        raise TypeError(
            f"{what} needs racaffinity.pools.AsyncNodePools, not {type(pools).__name__}: "
            "use that object's own global_transaction() / recover_all()"
        )


@contextlib.asynccontextmanager
async def _node_connection(pools: Any, node: int, timeout: Optional[float]) -> AsyncIterator[psycopg.AsyncConnection]:
    """A new autocommit connection to `node`, closed at exit. Phase-two
    retries and recovery use one rather than a pooled connection, which may
    be stale after the node restarted or stuck on a hung socket."""
    dsn = pools._node_dsn(node)
    kw = dict(pools._connect_kwargs)
    kw.setdefault("connect_timeout", max(2, math.ceil(timeout)) if timeout else 10)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **kw)
    try:
        yield conn
    finally:
        await conn.close()


async def _prepared_here(conn: psycopg.AsyncConnection, xid: Xid, timeout: Optional[float]) -> bool:
    """Whether `xid` is prepared on the node of `conn` (pg_prepared_xacts)."""
    async with abounded(conn, timeout):
        return any(str(x) == str(xid) for x in await conn.tpc_recover())


# A backend that a stalled host, a paused VM or a SIGSTOP held up past the
# deadline still runs the PREPARE (or COMMIT/ROLLBACK PREPARED) it has
# received when it resumes, after the client gave up on the answer. So no
# new connection may conclude "not prepared" while that backend exists: it
# is ended first (pg_terminate_backend; a role may end its own sessions) and
# only once it is gone from pg_stat_activity is pg_prepared_xacts the truth.
# A backend started after the branch began cannot be its session (the pid was
# reused); the slack covers the round trips around the two clocks' readings.
_PID_REUSE_SLACK = 1.0
_SESSION_POLL = 0.05


async def _end_sessions(conn: psycopg.AsyncConnection, sessions: Iterable[Tuple[int, float]],
                        timeout: Optional[float]) -> Set[int]:
    """Ends the backends `sessions` ((pid, monotonic time its branch began))
    on the node of `conn` and waits up to `timeout` until they are gone;
    returns the pids still there (a stopped process cannot act on its
    SIGTERM until it resumes)."""
    todo = dict(sessions)
    deadline = time.monotonic() + (timeout if timeout else 10.0)
    while todo:
        now = time.monotonic()
        pids = list(todo)
        ages = [max(0.0, now - todo[p] - _PID_REUSE_SLACK) for p in pids]
        async with abounded(conn, timeout):
            cur = await conn.execute(
                "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_stat_activity a "
                "JOIN unnest(%s::int[], %s::float8[]) AS s(pid, age) ON a.pid = s.pid "
                "WHERE a.backend_start <= statement_timestamp() - make_interval(secs => s.age)",
                (pids, ages),
            )
            alive = {r[0] for r in await cur.fetchall()}
        todo = {p: t for p, t in todo.items() if p in alive}
        if not todo or time.monotonic() >= deadline:
            break
        await asyncio.sleep(_SESSION_POLL)
    return set(todo)


class _AsyncBranchScope:
    __slots__ = ("_gtx", "_bqual", "_timeout", "_branch")

    def __init__(self, gtx: "AsyncGlobalTransaction", bqual: Optional[str], timeout: Optional[float]) -> None:
        self._gtx = gtx
        self._bqual = bqual
        self._timeout = timeout
        self._branch: Optional[Branch] = None

    async def __aenter__(self) -> psycopg.AsyncConnection:
        if self._branch is not None:
            # A second branch would take the first one's place: the first
            # would never be prepared nor rolled back, its connection and
            # lease held, and the gtrid's commit refused.
            raise RuntimeError("this branch() scope is already entered; call branch() again for another branch")
        self._branch = await self._gtx._begin_branch(self._bqual, self._timeout)
        conn: psycopg.AsyncConnection = self._branch.conn  # Branch holds either kind
        return conn

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        b, self._branch = self._branch, None
        assert b is not None
        if et is None:
            await self._gtx._prepare_branch(b)
        else:
            await self._gtx._rollback_branch(b, ev)


class AsyncGlobalTransaction:
    """A global transaction `gtrid` whose branches run through `pools`.

    `branch()` begins a branch (from any task or thread): the core routes the gtrid
    (`tx_begin`: every branch gets the same node), a connection from that
    node's pool runs `tpc_begin(xid)`; a normal exit prepares the branch
    (`tpc_prepare`, then `tx_prepared`), an exception rolls it back.
    `commit()` runs phase two on every prepared branch, each on the node it
    was started on, then `tx_end`; `rollback()` rolls every branch back. As
    an async context manager: commit on a normal exit, rollback on an
    exception.

    Every call to a node is bounded by `timeout` (default: the pools'
    `timeout`). A branch whose PREPARE or phase-two answer was lost is *in
    doubt*: it stays on record for a retry or `recover_all`, and the call
    raises `InDoubtError`; it is never reported rolled back or committed
    unless the node says so.

    Soft transaction affinity (the default) is UCP's: if the gtrid's node
    goes Down while a branch is active, a later branch is placed on another
    node (the transaction *spans*; logged at WARNING, counted by the core)
    and commit is a correct two-phase commit over both nodes. With
    `transaction.strict` the later branch is refused instead
    (`StrictAffinityError`), which keeps every branch on one node.

    A *new* gtrid goes where the request's work goes (`Cluster.tx_begin_for`):
    to the owner of the data `key` (bytes, str or int), else to the node the
    session routing `token` routes the request to. Without `token=`, the
    token a `racaffinity.web` middleware of this cluster decided for the
    request that creates this object (`racaffinity.web.current_token`). An
    existing gtrid is joined wherever it lives; a malformed token raises
    `InvalidArgumentError` from the first `branch()` and registers nothing.
    With neither, the gtrid is placed by `tx_begin` alone (a pin never places
    it: see `Cluster.transaction`'s `prefer_pinned`)."""

    def __init__(
        self,
        pools: Any,
        gtrid: str,
        *,
        format_id: int = DEFAULT_FORMAT_ID,
        timeout: Optional[float] = None,
        key: Optional[DataKey] = None,
        token: Optional[str] = None,
    ) -> None:
        if not isinstance(gtrid, str):
            raise TypeError(f"gtrid must be a str (psycopg Xids carry str), not {type(gtrid).__name__}")
        if key is not None and (isinstance(key, bool) or not isinstance(key, (bytes, bytearray, memoryview, str, int))):
            raise TypeError(f"key must be bytes, str or int, not {type(key).__name__}")
        if token is not None and not isinstance(token, str):
            raise TypeError(f"token must be a str, not {type(token).__name__}")
        _require_kind(pools, "AsyncGlobalTransaction")
        self.pools = pools
        self.cluster = pools.cluster
        self.gtrid = gtrid
        #: the core's key of this transaction (`racaffinity.tpc.transaction_key`)
        self.tx_key = transaction_key(gtrid, format_id)
        self.key = key
        # Read here, in the request's context: a branch may begin in a task
        # or thread that never saw the middleware set it.
        self.token = token if token is not None else request_token(self.cluster)
        self.format_id = format_id
        self.timeout = timeout if timeout is not None else getattr(pools, "timeout", None)
        self.branches: List[Branch] = []
        self._lock = threading.Lock()
        self._tag = f"{os.getpid():x}{uuid.uuid4().hex[:8]}"
        self._n = 0

    def branch(self, bqual: Optional[str] = None, *, timeout: Optional[float] = None) -> _AsyncBranchScope:
        """A new branch as an async context manager yielding its connection."""
        return _AsyncBranchScope(self, bqual, timeout if timeout is not None else self.timeout)

    # -- phase one ------------------------------------------------------------------

    async def _begin_branch(self, bqual: Optional[str], timeout: Optional[float]) -> Branch:
        if self.pools._forked:
            # The parent's pools, closed in this child at the fork: say so as
            # a borrow does, before the gtrid is placed.
            raise psycopg_pool.PoolClosed(FORKED)
        c = self.cluster
        with self._lock:
            self._n += 1
            n = self._n
        if bqual is None:
            bqual = f"{self._tag}-{n}"
        xid = Xid.from_parts(self.format_id, self.gtrid, bqual)
        if self.key is None and self.token is None:
            # The context's pin is no input here, as before there were others:
            # a pin is this process's own, where a gtrid is shared.
            route = c.tx_begin(self.tx_key)
        else:
            # Places a new gtrid on the key's owner, else the token's node; an
            # existing one (a later branch) is joined wherever it lives.
            route = c.tx_begin_for(self.tx_key, key=self.key, token=self.token)
        b = Branch(xid, route.node, c.node_name(route.node))
        with self._lock:
            others = sorted({x.node_name for x in self.branches if x.node != route.node})
        if others and route.kind == RouteKind.REPINNED:
            # Soft affinity re-placed the gtrid (its node went Down while a
            # branch was active): this transaction now spans nodes.
            log.warning(
                "racaffinity: gtrid %r spans nodes: branch %s placed on %s while branch(es) run on %s "
                "(soft transaction affinity; transaction.strict keeps one node)",
                self.gtrid, bqual, b.node_name, ", ".join(others),
            )
        since = time.monotonic()
        try:
            b.lease = c.lease(route.node)
            b.pool = self.pools.node_pool(route.node)
            conn = await b.pool.getconn(timeout)
            # Marked as a `connection()` borrow is, and then the pool's flag
            # read (the pools' hard Down sets it, then reads the marks):
            # fast connection failover aborts a branch on a failed node too,
            # and a drain leaves it to finish there.
            conn._racaffinity_borrowed = True
            if b.pool._racaffinity_retired:  # its node went Down as it handed this out
                conn._racaffinity_borrowed = False
                await b.pool.putconn(conn)  # a retired pool closes it
                raise psycopg_pool.PoolClosed(f"the pool {b.pool.name!r} was retired as it handed a connection out")
            b.conn = conn
            b.pid, b.began = conn.info.backend_pid, since
            async with abounded(b.conn, timeout):
                await b.conn.tpc_begin(xid)
        except BaseException as e:
            await self._release(b, e, since)
            self._end()
            raise
        with self._lock:
            self.branches.append(b)
        return b

    async def _prepare_branch(self, b: Branch) -> None:
        try:
            async with abounded(b.conn, self.timeout):
                await b.conn.tpc_prepare()
        except BaseException as e:
            if connection_lost(b.conn, e):
                # PREPARE may have reached the server before the connection
                # went: the branch is in doubt (never "rolled back").
                await self._in_doubt(b, e)
                self.cluster.tx_prepared(self.tx_key)  # it must not move
                if not isinstance(e, Exception):
                    raise
                event = (
                    f"gtrid {self.gtrid!r}: the answer to PREPARE of branch {b.xid.bqual} on {b.node_name} was "
                    f"lost ({type(e).__name__})"
                )
                raise InDoubtError(
                    f"{event}; it may be prepared and stays on record for rollback() or recover_all()", [b], event=event
                ) from e
            # The server answered with an error (a deferred constraint or
            # trigger): PostgreSQL rolled the transaction back, nothing is
            # prepared.
            await _leave_2pc(b.conn)
            b.state = "rolled back"
            await self._release(b, e)
            self._end()
            raise
        # Prepared: the application is done with the connection, and phase
        # two's calls on it are bounded and fall back to a new connection.
        # A hard Down leaves it alone: an abort would only count the node's
        # failure twice (docs/python.md, "Fast connection failover").
        b.conn._racaffinity_borrowed = False
        b.state = "prepared"
        self.cluster.tx_prepared(self.tx_key)

    async def _rollback_branch(self, b: Branch, cause: Optional[BaseException]) -> None:
        """Rolls back a branch that is not prepared (its body failed)."""
        conn = b.conn
        # Whether the body's error ended this branch's own session (a node
        # failure on its connection), before the rollback is tried.
        lost = conn is None or bool(conn.closed or getattr(conn, "broken", False))
        own: Optional[BaseException] = None
        if conn is not None and not conn.closed:
            try:
                async with abounded(conn, self.timeout):
                    await conn.tpc_rollback()
            except BaseException as e:
                # The session is gone or unusable: PostgreSQL aborts an
                # unprepared transaction when its session ends (closed below).
                own = e
                await conn.close()
        b.state = "rolled back"
        # The lease tells what happened to *this* branch's node: its own
        # ROLLBACK failing, or the body's error having ended its session.
        # An error that came from elsewhere (another branch's node, a
        # refused re-placement, the application) while this node answered
        # is not this node's failure.
        if own is not None:
            await self._release(b, own)
        elif lost or cause is None or not is_node_failure(cause, b.pool):
            await self._release(b, cause)
        else:
            await self._release(b, cause, failed=False)
        self._end()
        if own is not None and not isinstance(own, Exception):
            # A cancel or Ctrl-C that ended the ROLLBACK's wait reaches the
            # caller as itself, not as the body's error (a task that would
            # go on after its cancel, a Ctrl-C an `except` of that eats).
            raise own

    async def _release(self, b: Branch, cause: Optional[BaseException], since: Optional[float] = None,
                 failed: Optional[bool] = None) -> None:
        """Returns the branch's connection (closed if unusable or still in a
        two-phase transaction) and releases its lease, once: FAILED for a
        node failure (unless `failed` says otherwise), OK without a cause,
        else NEUTRAL."""
        if failed is None:
            failed = cause is not None and is_node_failure(cause, b.pool, waited_since=since)
        conn, b.conn = b.conn, None
        if conn is not None:
            conn._racaffinity_borrowed = False
            try:
                interrupted = cause is not None and not isinstance(cause, Exception)
                # never return a connection still in a two-phase transaction
                if failed or interrupted or conn.broken or getattr(conn, "_tpc", None) is not None:
                    await conn.close()
                await b.pool.putconn(conn)
            except Exception as e:  # a closed pool: nothing to return to
                log.debug("racaffinity: returning a branch connection failed: %s", type(e).__name__)
        lease, b.lease = b.lease, None
        if lease is not None and not lease.released:
            lease.release(Outcome.FAILED if failed else Outcome.OK if cause is None else Outcome.NEUTRAL)

    async def _in_doubt(self, b: Branch, cause: BaseException) -> None:
        b.state = "in doubt"
        await self._release(b, cause)
        self.pools._note_in_doubt(self.gtrid, b.node, str(b.xid), None if b.pid is None else (b.pid, b.began))

    def _end(self) -> None:
        try:
            self.cluster.tx_end(self.tx_key)
        except UnknownTransactionError:
            pass  # recover_all completed it meanwhile

    # -- phase two ------------------------------------------------------------------

    async def _finish_branch(self, b: Branch, action: str) -> None:
        """Commits or rolls back one branch on the node it was started on.
        Raises when the outcome is not known (the branch stays in doubt)."""
        conn = b.conn
        if conn is not None and not conn.closed:
            try:
                async with abounded(conn, self.timeout):
                    if b.state == "active":  # never prepared: a plain ROLLBACK
                        await conn.tpc_rollback()
                    else:
                        b.sent = action
                        await (conn.tpc_commit if action == "commit" else conn.tpc_rollback)()
            except Exception as e:
                if not connection_lost(conn, e):
                    raise
                # The answer was lost: whether it took effect is re-checked
                # on a new connection below.
                await self._release(b, e)
            else:
                await self._done(b, action)
                return
        if b.state == "active":
            # Its session is gone before PREPARE: PostgreSQL aborted it.
            await self._done(b, "rollback")
            return
        async with _node_connection(self.pools, b.node, self.timeout) as fresh:
            if b.pid is not None:
                if await _end_sessions(fresh, [(b.pid, b.began)], self.timeout):
                    raise TimeoutError(
                        f"gtrid {self.gtrid!r}: the session of branch {b.xid.bqual} on {b.node_name} (backend "
                        f"{b.pid}) has not ended yet: a command it holds may still run, so nothing is concluded"
                    )
                b.pid = None
                self.pools._session_ended(str(b.xid))
            if await _prepared_here(fresh, b.xid, self.timeout):
                b.sent = action
                async with abounded(fresh, self.timeout):
                    await (fresh.tpc_commit if action == "commit" else fresh.tpc_rollback)(b.xid)
            elif action == "commit" and b.sent != "commit":
                # Not prepared, and no COMMIT PREPARED of ours can explain it.
                raise RuntimeError(
                    f"gtrid {self.gtrid!r}: branch {b.xid.bqual} is not prepared on {b.node_name} "
                    f"(its PREPARE did not take effect, or another party resolved it)"
                )
            # else: gone, by our own lost COMMIT/ROLLBACK PREPARED (or never
            # prepared, for a rollback): the outcome is the one asked for.
        await self._done(b, action)

    async def _done(self, b: Branch, action: str) -> None:
        b.state = "committed" if action == "commit" else "rolled back"
        await self._release(b, None)
        self.pools._forget_in_doubt(self.gtrid, str(b.xid))
        self._end()

    async def _finish(self, action: str) -> None:
        with self._lock:
            if action == "commit" and any(b.state == "active" for b in self.branches):
                raise RuntimeError(f"gtrid {self.gtrid!r}: commit() while a branch is still active")
            todo = [b for b in self.branches if b.state in ("prepared", "active", "in doubt")]
        left: List[Branch] = []
        interrupted: Optional[BaseException] = None
        for b in todo:
            if interrupted is not None:  # the rest stays on record, nothing held
                await self._in_doubt(b, interrupted)
                left.append(b)
                continue
            try:
                await self._finish_branch(b, action)
            except Exception as e:
                log.warning("racaffinity: %s of gtrid %r on %s did not finish: %s: %s",
                            action, self.gtrid, b.node_name, type(e).__name__, e)
                await self._in_doubt(b, e)
                left.append(b)
            except BaseException as e:  # KeyboardInterrupt, cancellation
                await self._in_doubt(b, e)
                left.append(b)
                interrupted = e
        if interrupted is not None:
            raise interrupted
        if left:
            raise InDoubtError(
                f"gtrid {self.gtrid!r}: {action} did not finish on {len(left)} branch(es) "
                f"({', '.join(b.node_name for b in left)}); they stay on record for a retry or recover_all()",
                left,
            )

    async def commit(self) -> None:
        """Phase two: commits every prepared branch, each on its node."""
        await self._finish("commit")

    async def rollback(self) -> None:
        """Rolls back every branch (prepared, in doubt or not prepared)."""
        await self._finish("rollback")

    async def __aenter__(self) -> "AsyncGlobalTransaction":
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        if et is None:
            await self.commit()
        else:
            await self.rollback()
            if isinstance(ev, InDoubtError):
                # The error escapes after this rollback: it tells what is
                # left, not what was true when it was raised.
                left = [b for b in ev.branches if b.state == "in doubt"]
                if not left:
                    ev.args = (
                        f"{ev.event}; the rollback on exit settled "
                        f"{'it' if len(ev.branches) == 1 else 'them'}: rolled back, no longer on record",
                    )
                ev.branches = left

    def __repr__(self) -> str:
        return f"AsyncGlobalTransaction(gtrid={self.gtrid!r}, branches={self.branches!r})"


def _xa_format(xid: Xid) -> int:
    """The format id of an xid `_AsyncRecovery.select` kept (psycopg's None
    is a prepared transaction not in XA form, which it leaves alone)."""
    format_id = xid.format_id
    assert format_id is not None
    return format_id


async def _leave_2pc(conn: Any) -> None:
    """After PREPARE TRANSACTION failed with a server error the session is
    idle (the transaction was rolled back), but psycopg still believes it is
    in a prepared two-phase transaction: it marks the transaction prepared
    before sending PREPARE, and has no public call to undo that. Clear the
    mark, so the connection goes back to its pool clean; if psycopg's
    internals differ, close the connection rather than return it dirty."""
    try:
        idle = conn.info.transaction_status == TransactionStatus.IDLE
        tpc = getattr(conn, "_tpc", None)
        if idle and isinstance(tpc, tuple) and len(tpc) == 2:
            conn._tpc = None
            return
    except Exception:
        pass
    await conn.close()


# ---------------------------------------------------------------------------
# recovery


class _AsyncRecovery:
    """One `recover_all` run: what was found, resolved and left (thread-safe)."""

    def __init__(self, pools: Any, action: str, format_id: Optional[int],
                 predicate: Optional[Callable[[Xid], bool]], timeout: float, scope: str) -> None:
        self.pools = pools
        self.cluster = pools.cluster
        self.action = action
        self.format_id = format_id
        self.predicate = predicate
        self.timeout = timeout
        self.report = RecoveryReport(scope=scope)
        self.lock = threading.Lock()
        #: (format id, gtrid) -> branches found and not (yet) resolved
        self.pending: Dict[Tuple[int, str], int] = {}
        #: (format id, gtrid) -> of those, branches whose COMMIT/ROLLBACK
        #: PREPARED was under way when the run was cancelled (`cut_off`)
        self.unanswered: Dict[Tuple[int, str], int] = {}
        #: every prepared xid (as a string) the scans saw, selected or not
        self.held: Set[str] = set()
        self.scanned: Set[int] = set()
        #: nodes a call failed on in this run (node failures): not tried again
        self.dead: Set[int] = set()
        #: (sync) the caller was interrupted while the scans, threads, run on:
        #: each stops before its next command (`stop`)
        self.stopping = False
        #: scans under way
        self.running = 0

    async def select(self, conn: psycopg.AsyncConnection, node: int) -> List[Xid]:
        # Each xid it returns has a format id (`_xa_format`).
        db = conn.info.dbname
        async with abounded(conn, self.timeout):
            xids = await conn.tpc_recover()
        out = []
        name = self.cluster.node_name(node)
        with self.lock:
            self.held.update(str(x) for x in xids)
        for xid in xids:
            if xid.database != db or xid.format_id is None:
                continue
            if self.format_id is not None and xid.format_id != self.format_id:
                continue
            if self.predicate is not None and not self.predicate(xid):
                continue
            if not 1 <= len(xid.gtrid.encode("utf-8")) <= MAX_GTRID_BYTES:
                with self.lock:
                    self.report.failed.append(
                        Recovered(node, name, str(xid), xid.gtrid, xid.bqual, self.action, "gtrid is not 1..=64 bytes")
                    )
                continue
            out.append(xid)
        return out

    async def end_sessions(self, conn: psycopg.AsyncConnection, nodes: List[int]) -> None:
        """Ends the sessions of this process's in-doubt branches on `nodes`
        before the scan reads pg_prepared_xacts (see `_end_sessions`); a
        branch whose session is still there counts as held, so its gtrid
        stays on record."""
        sessions = self.pools._doubt_sessions_of(nodes)
        if not sessions:
            return
        alive = await _end_sessions(conn, sessions.values(), self.timeout)
        for x, (pid, _began) in sessions.items():
            if pid in alive:
                with self.lock:
                    self.held.add(x)
                    self.report.sessions_running[x] = pid
            else:
                self.pools._session_ended(x)

    async def finish(self, conn: psycopg.AsyncConnection, node: int, xid: Xid) -> None:
        """Commits or rolls back `xid` on the node of `conn`; raises on failure."""
        async with abounded(conn, self.timeout):
            await (conn.tpc_commit if self.action == "commit" else conn.tpc_rollback)(xid)

    def resolved(self, node: int, xid: Xid, elsewhere: bool = False) -> None:
        rec = Recovered(node, self.cluster.node_name(node), str(xid), xid.gtrid, xid.bqual, self.action)
        with self.lock:
            (self.report.resolved_elsewhere if elsewhere else self.report.resolved).append(rec)
            self.pending[(_xa_format(xid), xid.gtrid)] -= 1
        self.pools._forget_in_doubt(xid.gtrid, str(xid))

    def cut_off(self, xid: Xid) -> None:
        """The run was cancelled while it awaited `xid`'s COMMIT/ROLLBACK
        PREPARED: the server may have carried it out (see `complete`)."""
        t = (_xa_format(xid), xid.gtrid)
        with self.lock:
            self.unanswered[t] = self.unanswered.get(t, 0) + 1

    def lost(self, node: int, xid: Xid, session: Tuple[int, float]) -> None:
        """The answer to `xid`'s COMMIT/ROLLBACK PREPARED was lost: the
        server may have carried it out, and then no later run finds it
        prepared. So the branch is in doubt like a `GlobalTransaction`'s
        whose phase-two answer was lost: a later run that scans its node
        ends `session` if still there, and forgets the gtrid if the node
        does not hold it (`complete`)."""
        self.pools._note_in_doubt(xid.gtrid, node, str(xid), session)

    def session_running(self, node: int, xid: Xid, pid: int) -> None:
        """The session of `xid`'s lost command had not ended within the
        timeout: nothing is concluded in this run, the gtrid stays on
        record, and the next run ends the session first (`end_sessions`)."""
        with self.lock:
            self.held.add(str(xid))
            self.report.sessions_running[str(xid)] = pid
        self.failed(node, xid, TimeoutError(
            f"the session (backend {pid}) whose answer to {self.action} of this branch was lost has not ended yet: "
            "the command it holds may still run, so nothing is concluded"
        ))

    def failed(self, node: int, xid: Xid, e: BaseException) -> None:
        rec = Recovered(node, self.cluster.node_name(node), str(xid), xid.gtrid, xid.bqual, self.action,
                        f"{type(e).__name__}: {e}")
        with self.lock:
            self.report.failed.append(rec)

    def unreachable(self, node: int, e: BaseException) -> None:
        with self.lock:
            self.report.unreachable[self.cluster.node_name(node)] = f"{type(e).__name__}: {e}"
        if is_node_failure(e):
            self.node_failed(node)

    def node_failed(self, node: int) -> None:
        """One failed node operation: counted against it, and the node is
        not tried again in this run."""
        with self.lock:
            self.dead.add(node)
        try:
            self.cluster.report_outcome(node, False)
        except Error:
            pass

    # -- scope "node": every node, each branch on the node that returned it ------

    async def scan_node(self, node: int) -> None:
        with self.lock:
            if self.stopping:
                return
            self.running += 1
        try:
            await self._scan_node(node)
        finally:
            with self.lock:
                self.running -= 1
                last = self.stopping and self.running == 0
            if last:
                self.complete()

    def stop(self) -> None:
        """The caller was interrupted (Ctrl-C) while the scans run on as
        threads, which cannot be cancelled: each stops before its next
        command (a command under way runs to its answer or its deadline),
        and the last to end forgets what the run resolved (`complete`), as
        the async run does before its cancel propagates. Left to run on
        unseen, they resolved gtrids that stayed on record for good."""
        with self.lock:
            self.stopping = True
            last = self.running == 0
        if last:
            self.complete()

    async def _scan_node(self, node: int) -> None:
        try:
            async with _node_connection(self.pools, node, self.timeout) as conn:
                # taken after the connect: its backend began before it (`_end_sessions`)
                session = (conn.info.backend_pid, time.monotonic())
                await self.end_sessions(conn, [node])
                xids = await self.select(conn, node)
                if self.stopping:
                    return  # nothing recorded, the node not counted scanned
                for xid in xids:
                    self.record(node, xid)
                for i, xid in enumerate(xids):
                    if self.stopping:
                        break  # recorded, still prepared: on record for the next run
                    try:
                        await self.finish(conn, node, xid)
                    except psycopg.errors.UndefinedObject:
                        # The scan found it prepared and now it is gone:
                        # another party completed it in between.
                        self.resolved(node, xid, elsewhere=True)
                    except Exception as e:
                        self.failed(node, xid, e)
                        if connection_lost(conn, e):  # the rest cannot be done now
                            self.lost(node, xid, session)
                            for rest in xids[i + 1:]:
                                self.failed(node, rest, e)
                            self.unreachable(node, e)
                            return
                    except BaseException:
                        self.cut_off(xid)
                        raise
                    else:
                        self.resolved(node, xid)
        except Exception as e:
            self.unreachable(node, e)
            return
        with self.lock:
            self.scanned.add(node)

    def record(self, node: int, xid: Xid) -> None:
        t = (_xa_format(xid), xid.gtrid)
        with self.lock:
            self.pending[t] = self.pending.get(t, 0) + 1
        try:
            self.cluster.tx_recovered(transaction_key(xid.gtrid, _xa_format(xid)), node)
        except InvalidArgumentError:
            # The length is fine, so this is the core's other
            # INVALID_ARGUMENT: another node owns this gtrid (a split, or a
            # spanned transaction of soft mode).
            with self.lock:
                first = xid.gtrid not in self.report.split
                if first:
                    self.report.split.append(xid.gtrid)
            if first:
                # Branches of one gtrid on two nodes: a span made by processes
                # whose views differed (the core counts it in tx_spans).
                log.warning("racaffinity: gtrid %r has prepared branches on two nodes (%s and another): a split "
                            "transaction; each branch is completed on its own node", xid.gtrid,
                            self.cluster.node_name(node))

    async def run_node_scope(self) -> None:
        # Every node scanned concurrently: a healthy node's branches are
        # resolved at once, whatever another node does; each call is bounded.
        scans = [
            (node, aspawn(self.scan_node, (node,), f"racaffinity-recover-{node}"))
            for node, _pool in self.pools.items()
        ]
        try:
            await await_all([h for _node, h in scans], max(60.0, 20 * self.timeout))
        except BaseException:
            if _ASYNC:
                # The caller was cancelled: the scans stop with it, so that
                # what they resolved is known when the run forgets its
                # gtrids (`recover_all`), and none goes on unseen.
                for _node, h in scans:
                    acancel(h)
                await await_all([h for _node, h in scans], self.timeout)
            else:
                self.stop()
            raise
        for node, h in scans:
            if ais_alive(h):  # cannot happen with bounded calls; never wait forever
                acancel(h)
                self.unreachable(node, TimeoutError("the scan did not end"))

    # -- scope "database": one scan, completion through the owner or any instance -

    async def run_database_scope(self) -> None:
        cluster = self.cluster
        nodes = [node for node, _pool in self.pools.items()]
        up = [n for n in nodes if cluster.node_state(n) == NodeState.UP]
        order = up + [n for n in nodes if n not in up]
        for node in order:
            try:
                async with _node_connection(self.pools, node, self.timeout) as conn:
                    # instances of one database share its sessions
                    await self.end_sessions(conn, nodes)
                    xids = await self.select(conn, node)
            except Exception as e:
                self.unreachable(node, e)
                continue
            self.report.scanned = True
            self.scanned.update(nodes)  # one instance sees the whole database
            break
        else:
            return
        seen: Set[str] = set()
        for xid in xids:
            if str(xid) in seen:
                continue
            seen.add(str(xid))
            t = (_xa_format(xid), xid.gtrid)
            with self.lock:
                self.pending[t] = self.pending.get(t, 0) + 1
            try:
                # one transaction whichever instance reports it: no split
                cluster.tx_recovered(transaction_key(xid.gtrid, _xa_format(xid)), node)
            except Error as e:
                log.debug("racaffinity: tx_recovered(%r) in database scope: %s", xid.gtrid, e)
            await self.complete_anywhere(node, xid, up)

    async def complete_anywhere(self, scanned: int, xid: Xid, up: List[int]) -> None:
        """Where `tx_route` sends it (its owner while that instance keeps its
        work, else an instance the core picks), else the instance that
        returned it, else any other Up instance: every instance of the
        database can finish any branch, so one that does not answer is
        skipped."""
        candidates: List[int] = []
        try:
            candidates.append(self.cluster.tx_route(transaction_key(xid.gtrid, _xa_format(xid))).node)
        except Error:
            pass  # not on record (a crashed coordinator's), or refused
        for n in [scanned] + up:
            if n not in candidates:
                candidates.append(n)
        last: Optional[BaseException] = None
        # The session whose answer to this run's command was lost, not yet
        # seen ended: it may still hold the branch ("is busy") or carry the
        # command out after another instance's.
        unanswered: Optional[Tuple[int, float]] = None
        for node in candidates:
            if node in self.dead:
                continue  # it failed once in this run: one wait per instance, not per xid
            try:
                async with _node_connection(self.pools, node, self.timeout) as conn:
                    if unanswered is not None:
                        # instances of one database share its sessions
                        if await _end_sessions(conn, [unanswered], self.timeout):
                            self.session_running(scanned, xid, unanswered[0])
                            return
                        self.pools._session_ended(str(xid))
                    session = (conn.info.backend_pid, time.monotonic())
                    try:
                        await self.finish(conn, node, xid)
                    except Exception as e:
                        if connection_lost(conn, e):
                            self.lost(node, xid, session)
                            unanswered = session
                        raise
            except psycopg.errors.UndefinedObject:
                # The scan found it prepared: this run's own command whose
                # answer was lost carried it out (its session is gone now),
                # else another party completed it since.
                self.resolved(node, xid, elsewhere=unanswered is None)
                return
            except Exception as e:
                last = e
                if is_node_failure(e):  # this instance is gone: try the next
                    self.node_failed(node)
                    continue
                break
            except BaseException:
                self.cut_off(xid)
                raise
            self.resolved(node, xid)
            return
        self.failed(scanned, xid, last if last is not None else ConnectionError("no instance answered in this run"))

    # -- after the scans ----------------------------------------------------------

    def complete(self) -> None:
        """Forgets every gtrid whose found branches were all resolved, and
        every gtrid this process left in doubt that no scanned node holds;
        with each, the branches it left in doubt that their (scanned) node
        does not hold (a PREPARE that never ran, a ROLLBACK PREPARED whose
        answer was lost). A branch still prepared, if only skipped by
        `format_id` or `predicate`, or on a node not scanned, keeps its
        gtrid on record.

        A branch whose COMMIT/ROLLBACK PREPARED a cancel cut off counts as
        resolved here: the server may have carried it out, and then no
        later run would find it to take its gtrid off the record; if not,
        it is still prepared, and the next run finds and records it again.
        (One this process left in doubt stays there: the scan saw it held,
        so `gone` keeps its gtrid.)"""
        doubt = self.pools._in_doubt_branches()

        def gone(gtrid: str) -> bool:
            return all(x not in self.held and n in self.scanned for x, n in doubt.get(gtrid, {}).items())

        for (format_id, gtrid), left in sorted(self.pending.items()):
            if left == self.unanswered.get((format_id, gtrid), 0) and gone(gtrid):
                self._complete(format_id, gtrid)
                self.pools._forget_in_doubt(gtrid, None)
        found = {gtrid for _format_id, gtrid in self.pending}
        for gtrid in sorted(doubt):
            if gtrid in found or not gone(gtrid):
                continue
            # this process's record is by gtrid; the core's by format id too (`transaction_key`)
            for format_id in sorted({f for x in doubt[gtrid] if (f := Xid.from_string(x).format_id) is not None}):
                self._complete(format_id, gtrid)
            self.pools._forget_in_doubt(gtrid, None)
            self.report.completed.append(gtrid)

    def _complete(self, format_id: int, gtrid: str) -> None:
        try:
            self.cluster.tx_complete(transaction_key(gtrid, format_id))
        except UnknownTransactionError:
            pass


async def recover_all(
    pools: Any,
    action: str = "rollback",
    *,
    format_id: Optional[int] = DEFAULT_FORMAT_ID,
    predicate: Optional[Callable[[Xid], bool]] = None,
    timeout: float = 5.0,
    scope: Optional[str] = None,
) -> RecoveryReport:
    """Finds prepared (in-doubt) branches and commits or rolls them back
    (`action`).

    `scope` (default: the cluster's `recovery.scope`): "node" for
    independent databases: every node is scanned concurrently and each
    branch completed on the node that returned it, at once (a hung node
    holds up nothing else); "database" for instances of one database (RAC):
    one scan through the first instance that answers, each xid once, each
    completed through its registry owner when Up, else any Up instance.

    Every call to a node is bounded by `timeout` (connect, scan, each
    commit or rollback), on a new connection per node (a pooled one may be
    stale after a restart). Selects the Xids of the node's database with XA
    format `format_id` (None: any; `DEFAULT_FORMAT_ID` is what
    `GlobalTransaction` uses) that `predicate` (if given) accepts. Gtrids
    this process left in doubt and that no scanned node holds any more are
    completed (`RecoveryReport.completed`)."""
    if action not in ("rollback", "commit"):
        raise ValueError(f"action must be 'rollback' or 'commit', not {action!r}")
    _require_kind(pools, "recover_all")
    if scope is None:
        scope = pools.cluster.recovery_scope
    if scope not in ("node", "database"):
        raise ValueError(f"scope must be 'node' or 'database', not {scope!r}")
    run = _AsyncRecovery(pools, action, format_id, predicate, timeout, scope)
    try:
        if scope == "database":
            await run.run_database_scope()
        else:
            await run.run_node_scope()
    except BaseException:
        # Cancelled (or Ctrl-C) part way: the gtrids it resolved are
        # forgotten all the same. Recorded (`tx_recovered`) and resolved,
        # one left on record would stay there for good: no later run finds
        # it prepared.
        if _ASYNC:
            run.complete()
        elif scope == "database":  # run in this thread, which is done with it
            run.complete()
        # (else the sync node scope's scans, threads, may still run: the
        # last to end does it, `stop`)
        raise
    run.complete()
    return run.report
