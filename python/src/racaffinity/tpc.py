"""Two-phase commit over psycopg's `tpc_*` API, routed by the core, and
recovery of in-doubt branches.

    with pools.global_transaction("order-42") as gtx:   # commit on exit, rollback on error
        with gtx.branch() as conn:                      # tx_begin -> node; tpc_begin
            conn.execute("INSERT ...")
        # branch exit: tpc_prepare, then tx_prepared (the transaction never moves)
        with gtx.branch() as conn:                      # another branch: same node, any thread
            conn.execute("UPDATE ...")
    # exit: for each branch tx_route -> the owning node; tpc_commit there; tx_end

    report = pools.recover_all("rollback")              # after a crash

The Xid is psycopg's XA triple (format_id, gtrid, bqual): the gtrid is the
global transaction id the core routes by (its UTF-8 bytes, 1..=64), each
branch gets its own bqual. A branch keeps its connection (and its lease) from
`tpc_begin` until phase two, as an XA resource manager connection would.

Recovery (`recover_all`) scans every node with `tpc_recover()`, records each
in-doubt gtrid with the node that returned it (`racaffinity_tx_recovered`:
a gtrid found on two nodes is a split transaction and is reported), then
commits or rolls back each branch on the node `tx_route` names, and forgets
the gtrid (`tx_complete`). The default action is rollback, as a
presumed-abort transaction manager does for branches whose decision it does
not know; pass "commit" when the decision was to commit. Only run it for
transactions whose coordinator is gone (at start-up, or for old ones with
`predicate`): it resolves every matching branch it finds.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import psycopg
from psycopg import Xid

from ._cluster import Lease, Outcome
from ._lib import lib
from ._errors import Error, InvalidArgumentError, UnknownTransactionError

if TYPE_CHECKING:  # pragma: no cover
    from .pools import NodePools

__all__ = ["DEFAULT_FORMAT_ID", "GlobalTransaction", "Branch", "InDoubtError", "recover_all", "RecoveryReport", "Recovered"]

#: The XA format id of the Xids this module creates ("RAFF").
DEFAULT_FORMAT_ID = 0x52414646
MAX_GTRID_BYTES = int(lib.RACAFFINITY_MAX_GTRID_BYTES)


class InDoubtError(Error):
    """Phase two did not finish on some branches; they stay prepared on
    their node (the core keeps routing the gtrid there) until
    `recover_all` or a retry resolves them. `branches` lists them."""

    def __init__(self, message: str, branches: List["Branch"]) -> None:
        super().__init__(message)
        self.branches = branches


@dataclasses.dataclass
class Branch:
    """One branch: its Xid, node and state (`active`, `prepared`,
    `committed`, `rolled back`, `in doubt`)."""

    xid: Xid
    node: int
    node_name: str
    state: str = "active"
    conn: Any = dataclasses.field(default=None, repr=False)
    pool: Any = dataclasses.field(default=None, repr=False)
    lease: Optional[Lease] = dataclasses.field(default=None, repr=False)


class _BranchScope:
    __slots__ = ("_gtx", "_bqual", "_timeout", "_branch")

    def __init__(self, gtx: "GlobalTransaction", bqual: Optional[str], timeout: Optional[float]) -> None:
        self._gtx = gtx
        self._bqual = bqual
        self._timeout = timeout
        self._branch: Optional[Branch] = None

    def __enter__(self) -> psycopg.Connection:
        self._branch = self._gtx._begin_branch(self._bqual, self._timeout)
        return self._branch.conn

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        b = self._branch
        assert b is not None
        if et is None:
            self._gtx._prepare_branch(b)
        else:
            self._gtx._rollback_branch(b, ev)


class GlobalTransaction:
    """A global transaction `gtrid` whose branches run through `pools`.

    `branch()` begins a branch (on any thread): the core routes the gtrid
    (`tx_begin`: every branch gets the same node), a connection from that
    node's pool runs `tpc_begin(xid)`; a normal exit prepares the branch
    (`tpc_prepare`, then `tx_prepared`), an exception rolls it back.
    `commit()` runs phase two on every prepared branch on the node `tx_route`
    names, then `tx_end`; `rollback()` rolls every branch back. As a context
    manager: commit on a normal exit, rollback on an exception."""

    def __init__(
        self,
        pools: "NodePools",
        gtrid: str,
        *,
        format_id: int = DEFAULT_FORMAT_ID,
        timeout: Optional[float] = None,
    ) -> None:
        if not isinstance(gtrid, str):
            raise TypeError(f"gtrid must be a str (psycopg Xids carry str), not {type(gtrid).__name__}")
        self.pools = pools
        self.cluster = pools.cluster
        self.gtrid = gtrid
        self.gtrid_bytes = gtrid.encode("utf-8")
        self.format_id = format_id
        self.timeout = timeout
        self.branches: List[Branch] = []
        self._lock = threading.Lock()
        self._tag = f"{os.getpid():x}{uuid.uuid4().hex[:8]}"
        self._n = 0

    def branch(self, bqual: Optional[str] = None, *, timeout: Optional[float] = None) -> _BranchScope:
        """A new branch as a context manager yielding its connection."""
        return _BranchScope(self, bqual, timeout if timeout is not None else self.timeout)

    # -- phase one ------------------------------------------------------------------

    def _begin_branch(self, bqual: Optional[str], timeout: Optional[float]) -> Branch:
        c = self.cluster
        with self._lock:
            self._n += 1
            n = self._n
        if bqual is None:
            bqual = f"{self._tag}-{n}"
        xid = Xid.from_parts(self.format_id, self.gtrid, bqual)
        route = c.tx_begin(self.gtrid_bytes)
        lease = c.lease(route.node)
        b = Branch(xid, route.node, c.node_name(route.node), lease=lease)
        try:
            b.pool = self.pools.node_pool(route.node)
            b.conn = b.pool.getconn(timeout)
            b.conn.tpc_begin(xid)
        except BaseException as e:
            self._drop(b, e)
            c.tx_end(self.gtrid_bytes)
            raise
        with self._lock:
            self.branches.append(b)
        return b

    def _prepare_branch(self, b: Branch) -> None:
        try:
            b.conn.tpc_prepare()
        except BaseException as e:
            # If the connection broke during PREPARE the branch may or may
            # not be prepared: keep it "in doubt" for rollback()/recovery.
            self._rollback_branch(b, e, maybe_prepared=True)
            raise
        b.state = "prepared"
        self.cluster.tx_prepared(self.gtrid_bytes)

    def _rollback_branch(self, b: Branch, cause: Optional[BaseException], maybe_prepared: bool = False) -> None:
        """Rolls back a branch that is not prepared (its body failed)."""
        try:
            if b.conn is not None and not b.conn.closed:
                b.conn.tpc_rollback()
            b.state = "rolled back"
        except BaseException as e:
            # The connection is gone: PostgreSQL aborts an unprepared branch.
            cause = e
            b.state = "in doubt" if maybe_prepared else "rolled back"
        self._drop(b, cause)
        if b.state == "rolled back":
            self._end()

    def _drop(self, b: Branch, cause: Optional[BaseException]) -> None:
        """Returns the branch's connection and releases its lease."""
        from .pools import is_node_failure

        failed = cause is not None and is_node_failure(cause, b.pool)
        if b.conn is not None:
            try:
                if failed:
                    b.conn.close()
                b.pool.putconn(b.conn)
            except Exception:
                pass
            b.conn = None
        if b.lease is not None and not b.lease.released:
            b.lease.release(Outcome.FAILED if failed else Outcome.OK if cause is None else Outcome.NEUTRAL)

    def _end(self) -> None:
        try:
            self.cluster.tx_end(self.gtrid_bytes)
        except UnknownTransactionError:
            pass

    # -- phase two ------------------------------------------------------------------

    def _finish(self, action: str) -> None:
        c = self.cluster
        with self._lock:
            if action == "commit" and any(b.state == "active" for b in self.branches):
                raise RuntimeError(f"gtrid {self.gtrid!r}: commit() while a branch is still active")
            todo = [b for b in self.branches if b.state in ("prepared", "active", "in doubt")]
        left: List[Branch] = []
        for b in todo:
            try:
                route = c.tx_route(self.gtrid_bytes)  # the owning node; never moves
                if route.node != b.node:
                    raise RuntimeError(
                        f"gtrid {self.gtrid!r}: branch {b.xid.bqual} ran on {b.node_name} but the core routes "
                        f"phase two to {route.name}"
                    )
                if b.conn is not None and not b.conn.closed:
                    (b.conn.tpc_commit if action == "commit" else b.conn.tpc_rollback)()
                else:
                    with self.pools.node_pool(route.node).connection(self.timeout) as conn:
                        try:
                            (conn.tpc_commit if action == "commit" else conn.tpc_rollback)(b.xid)
                        except psycopg.errors.UndefinedObject:
                            if action == "commit":
                                raise
                            # never prepared (the connection broke before PREPARE finished)
                b.state = "committed" if action == "commit" else "rolled back"
                self._drop(b, None)
                self._end()
            except BaseException as e:
                b.state = "in doubt"
                self._drop(b, e)
                left.append(b)
                if not isinstance(e, (psycopg.Error, Error)):
                    raise
        if left:
            raise InDoubtError(
                f"gtrid {self.gtrid!r}: {action} did not finish on {len(left)} branch(es) "
                f"({', '.join(b.node_name for b in left)}); they stay prepared for recover_all()",
                left,
            )

    def commit(self) -> None:
        """Phase two: commits every prepared branch on its node."""
        self._finish("commit")

    def rollback(self) -> None:
        """Rolls back every branch (prepared or not)."""
        self._finish("rollback")

    def __enter__(self) -> "GlobalTransaction":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if et is None:
            self.commit()
        else:
            self.rollback()

    def __repr__(self) -> str:
        return f"GlobalTransaction(gtrid={self.gtrid!r}, branches={self.branches!r})"


# ---------------------------------------------------------------------------
# recovery


@dataclasses.dataclass
class Recovered:
    """One in-doubt branch found by `recover_all` and what was done with it."""

    node: int
    node_name: str
    gid: str
    gtrid: str
    bqual: Optional[str]
    action: str
    error: Optional[str] = None


@dataclasses.dataclass
class RecoveryReport:
    resolved: List[Recovered] = dataclasses.field(default_factory=list)
    failed: List[Recovered] = dataclasses.field(default_factory=list)
    #: gtrids found on more than one node (split transactions): each branch
    #: was still resolved on the node that returned it.
    split: List[str] = dataclasses.field(default_factory=list)
    #: nodes that could not be scanned: node name -> error.
    unreachable: Dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.unreachable


def recover_all(
    pools: "NodePools",
    action: str = "rollback",
    *,
    format_id: Optional[int] = DEFAULT_FORMAT_ID,
    predicate: Optional[Callable[[Xid], bool]] = None,
    timeout: float = 5.0,
) -> RecoveryReport:
    """Scans every node for prepared (in-doubt) branches and commits or rolls
    them back (`action`), each on the node that returned it.

    Selects the Xids of this node's database with XA format `format_id`
    (None: any XA format id; `DEFAULT_FORMAT_ID` is what `GlobalTransaction`
    uses) that `predicate` (if given) accepts."""
    if action not in ("rollback", "commit"):
        raise ValueError(f"action must be 'rollback' or 'commit', not {action!r}")
    cluster = pools.cluster
    report = RecoveryReport()
    found: List[Tuple[int, str, Xid]] = []
    for node, pool in pools.items():
        name = cluster.node_name(node)
        try:
            with pool.connection(timeout) as conn:
                db = conn.info.dbname
                xids = conn.tpc_recover()
        except Exception as e:
            report.unreachable[name] = f"{type(e).__name__}: {e}"
            continue
        for xid in xids:
            if xid.database != db or xid.format_id is None:
                continue
            if format_id is not None and xid.format_id != format_id:
                continue
            if predicate is not None and not predicate(xid):
                continue
            g = xid.gtrid.encode("utf-8")
            if not 1 <= len(g) <= MAX_GTRID_BYTES:
                report.failed.append(
                    Recovered(node, name, str(xid), xid.gtrid, xid.bqual, action, "gtrid is not 1..=64 bytes")
                )
                continue
            found.append((node, name, xid))
            try:
                cluster.tx_recovered(g, node)
            except InvalidArgumentError:
                # The length is fine, so this is the core's other
                # INVALID_ARGUMENT: another node returned this gtrid (a split
                # transaction; the C ABI has no code of its own for it).
                if xid.gtrid not in report.split:
                    report.split.append(xid.gtrid)
    pending: Dict[str, int] = {}
    for _node, _name, xid in found:
        pending[xid.gtrid] = pending.get(xid.gtrid, 0) + 1
    for node, name, xid in found:
        gtrid_b = xid.gtrid.encode("utf-8")
        rec = Recovered(node, name, str(xid), xid.gtrid, xid.bqual, action)
        try:
            target = node
            if xid.gtrid not in report.split:
                target = cluster.tx_route(gtrid_b).node  # == node: recorded above
            with pools.node_pool(target).connection(timeout) as conn:
                (conn.tpc_commit if action == "commit" else conn.tpc_rollback)(xid)
            report.resolved.append(rec)
            pending[xid.gtrid] -= 1
            if pending[xid.gtrid] == 0:
                try:
                    cluster.tx_complete(gtrid_b)
                except UnknownTransactionError:
                    pass
        except Exception as e:
            rec.error = f"{type(e).__name__}: {e}"
            report.failed.append(rec)
    return report
