"""The plain records of `racaffinity.tpc`, shared by its sync and async
helpers: the branch, the in-doubt error and the recovery report."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from psycopg import Xid

from ._errors import Error, raise_for
from ._lib import ffi, lib
from ._routes import Lease

__all__ = ["DEFAULT_FORMAT_ID", "MAX_GTRID_BYTES", "transaction_key", "Branch", "InDoubtError", "Recovered", "RecoveryReport"]

#: The XA format id of the Xids this module creates ("RAFF").
DEFAULT_FORMAT_ID = 0x52414646
MAX_GTRID_BYTES = int(lib.RACAFFINITY_MAX_GTRID_BYTES)
_MAX_KEY_BYTES = int(lib.RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES)


def transaction_key(gtrid: str, format_id: int = DEFAULT_FORMAT_ID) -> bytes:
    """The key the global transaction (`format_id`, `gtrid`) is registered
    under in the core (what `Cluster.tx_route` and the other `tx_*` calls
    take for it): the format id, 4 bytes big-endian, then the gtrid's UTF-8
    bytes (over 60 bytes: their SHA-256 digest, so the key fits the core's
    64); a gtrid that is empty or over 64 bytes comes back as it is, for the
    `tx_*` call to refuse. XA names a global transaction by both, so equal
    gtrids of two formats are two transactions. The core builds it
    (`racaffinity_xa_transaction_key`), as it does for Java's
    `XaRouter.transactionKey(Xid)` and C, so every process places a
    transaction alike (docs/semantics.md)."""
    g = gtrid.encode("utf-8")
    # A gtrid the core refuses is written back whole: room for it too.
    buf = ffi.new("uint8_t[]", max(_MAX_KEY_BYTES, len(g)))
    n = ffi.new("size_t *")
    rc = lib.racaffinity_xa_transaction_key(format_id, g, len(g), buf, len(buf), n)
    if rc:
        raise_for(rc)
    return bytes(ffi.buffer(buf, n[0]))


class InDoubtError(Error):
    """Some branches may be prepared and their outcome is not known here: a
    PREPARE or phase-two command whose answer was lost, or a node that did
    not answer. They stay on record (the core keeps routing the gtrid to
    their node, `pools.in_doubt` lists them) until a retry of `commit()` /
    `rollback()` or `recover_all` resolves them. `branches` lists them."""

    __module__ = "racaffinity.tpc"  # its public home, for tracebacks

    def __init__(self, message: str, branches: List["Branch"], *, event: Optional[str] = None) -> None:
        super().__init__(message)
        self.branches = branches
        #: what happened, without what it leaves (the message once settled)
        self.event = event or message


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
    #: the phase-two command last sent for it ("commit"/"rollback"), whether
    #: or not its answer came back
    sent: Optional[str] = dataclasses.field(default=None, repr=False)
    #: the server process of the branch's session (`pg_backend_pid`) and
    #: when the branch began (monotonic): after its answer was lost, that
    #: backend may still run the command it holds (see `_tpc_async`)
    pid: Optional[int] = dataclasses.field(default=None, repr=False)
    began: float = dataclasses.field(default=0.0, repr=False)


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
    #: gtrids found on more than one node (split transactions, or spanned
    #: ones in soft mode): each branch was still resolved on the node that
    #: returned it. Always empty for `scope="database"`.
    split: List[str] = dataclasses.field(default_factory=list)
    #: branches the scan found that another party (a second transaction
    #: manager, an operator) committed or rolled back before this run's own
    #: command reached them (it answered UndefinedObject): settled here,
    #: their outcome is whatever that party decided.
    resolved_elsewhere: List[Recovered] = dataclasses.field(default_factory=list)
    #: in-doubt branches of this process whose old session (backend pid)
    #: had not ended within the timeout: xid -> pid. It may still run the
    #: PREPARE it holds, so nothing was concluded about them (kept on record).
    sessions_running: Dict[str, int] = dataclasses.field(default_factory=dict)
    #: nodes that could not be scanned: node name -> error.
    unreachable: Dict[str, str] = dataclasses.field(default_factory=dict)
    #: gtrids this process had left in doubt that no scan found prepared any
    #: more (a lost COMMIT PREPARED answer, say): completed and forgotten.
    completed: List[str] = dataclasses.field(default_factory=list)
    #: "node" (every node scanned) or "database" (one instance scanned).
    scope: str = "node"
    #: for scope "database": whether some instance answered the scan.
    scanned: bool = False

    @property
    def ok(self) -> bool:
        """Nothing failed, nothing was left unscanned and no old session
        was still running."""
        if self.sessions_running:
            return False
        if self.scope == "database":
            return self.scanned and not self.failed
        return not self.failed and not self.unreachable
