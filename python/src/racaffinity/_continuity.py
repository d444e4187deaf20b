"""The core's continuity decisions (docs/continuity.md), thin and typed: is
an error recoverable, what a `pg_xact_status` answer means, and the next
step for a failed request (`Cluster.replay_step`). Every decision is the
core's (rust/core/src/continuity.rs); this module converts arguments and
results only."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import weakref
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple

from ._args import cstr, U32_MAX
from ._errors import InvalidArgumentError, KeyOverflowError, raise_for
from ._lib import NULL, ffi, lib

__all__ = [
    "ErrorClass",
    "CommitOutcome",
    "ReplayAction",
    "ReplayRefusal",
    "ReplayStep",
    "RequestFailure",
    "classify_sqlstate",
    "classify_oracle_error",
    "ReplayRefused",
    "TransactionControl",
    "sets_session_state",
    "transaction_control",
]

# Taken in the request's transaction just before COMMIT: the id that tells
# the commit's outcome later (`pg_xact_status`), and the backend that could
# still commit it (`pg_terminate_backend`). The _if_assigned form gives no xid
# to a transaction that has none (NULL: it wrote nothing); pg_current_xact_id()
# would make every read-only COMMIT write a commit record and burn an xid.
XACT_QUERY = "SELECT pg_current_xact_id_if_assigned()::text, pg_backend_pid()"


class ErrorClass(enum.IntEnum):
    """`racaffinity_error_class`: how an error that ended a request bears on
    replaying it."""

    RECOVERABLE = int(lib.RACAFFINITY_ERROR_CLASS_RECOVERABLE)
    NOT_RECOVERABLE = int(lib.RACAFFINITY_ERROR_CLASS_NOT_RECOVERABLE)


class TransactionControl(enum.IntEnum):
    """`racaffinity_transaction_control`: what SQL text a request sends does
    to its transaction, from none to commit (`transaction_control`)."""

    NONE = int(lib.RACAFFINITY_TRANSACTION_CONTROL_NONE)
    """No statement controls a transaction."""
    SAVEPOINT = int(lib.RACAFFINITY_TRANSACTION_CONTROL_SAVEPOINT)
    """SAVEPOINT, RELEASE, ROLLBACK TO: the transaction goes on."""
    BEGIN = int(lib.RACAFFINITY_TRANSACTION_CONTROL_BEGIN)
    """BEGIN, START TRANSACTION."""
    ROLLBACK = int(lib.RACAFFINITY_TRANSACTION_CONTROL_ROLLBACK)
    """ROLLBACK, ABORT, ROLLBACK PREPARED."""
    COMMIT = int(lib.RACAFFINITY_TRANSACTION_CONTROL_COMMIT)
    """COMMIT, END, PREPARE TRANSACTION, COMMIT PREPARED."""

    @property
    def replayable(self) -> bool:
        """Whether a request that sent it may still be replayed."""
        return self in (TransactionControl.NONE, TransactionControl.SAVEPOINT)


class CommitOutcome(enum.IntEnum):
    """`racaffinity_commit_outcome` of a commit in flight (the header's
    `NOT_CHECKED` is `None` in `RequestFailure.outcome`)."""

    COMMITTED = int(lib.RACAFFINITY_COMMIT_OUTCOME_COMMITTED)
    ABORTED = int(lib.RACAFFINITY_COMMIT_OUTCOME_ABORTED)
    IN_PROGRESS = int(lib.RACAFFINITY_COMMIT_OUTCOME_IN_PROGRESS)
    UNKNOWN = int(lib.RACAFFINITY_COMMIT_OUTCOME_UNKNOWN)

    @classmethod
    def from_pg_xact_status(cls, status: Optional[str]) -> "CommitOutcome":
        """From `pg_xact_status(xid8)`'s answer (`None`: SQL NULL):
        `committed`, `aborted`, `in progress`; anything else `UNKNOWN`."""
        if status is None:
            arg = NULL
        else:
            try:
                arg = cstr(status, "status")
            except InvalidArgumentError:
                return cls.UNKNOWN  # a NUL inside is no answer the server gives
        out = ffi.new("racaffinity_commit_outcome *")
        rc = lib.racaffinity_pg_xact_status_outcome(arg, out)
        if rc:
            raise_for(rc)
        return cls(int(out[0]))


class ReplayAction(enum.IntEnum):
    """`racaffinity_replay_action`: what to do next with a failed request."""

    SUCCEEDED = int(lib.RACAFFINITY_REPLAY_ACTION_SUCCEEDED)
    CHECK_OUTCOME = int(lib.RACAFFINITY_REPLAY_ACTION_CHECK_OUTCOME)
    FORCE_OUTCOME = int(lib.RACAFFINITY_REPLAY_ACTION_FORCE_OUTCOME)
    REPLAY = int(lib.RACAFFINITY_REPLAY_ACTION_REPLAY)
    GIVE_UP = int(lib.RACAFFINITY_REPLAY_ACTION_GIVE_UP)


class ReplayRefusal(enum.IntEnum):
    """`racaffinity_replay_refusal`: why a failed request is not replayed."""

    NOT_RECOVERABLE = int(lib.RACAFFINITY_REPLAY_REFUSAL_NOT_RECOVERABLE)
    NOT_REPLAYABLE = int(lib.RACAFFINITY_REPLAY_REFUSAL_NOT_REPLAYABLE)
    REPLAYED_ALREADY = int(lib.RACAFFINITY_REPLAY_REFUSAL_REPLAYED_ALREADY)
    OUTCOME_UNKNOWN = int(lib.RACAFFINITY_REPLAY_REFUSAL_OUTCOME_UNKNOWN)
    NO_NODE = int(lib.RACAFFINITY_REPLAY_REFUSAL_NO_NODE)


@dataclasses.dataclass(frozen=True)
class RequestFailure:
    """One failed request, as the binding saw it (`racaffinity_request_failure`).

    `node`: the node id it failed on; `error_class`: `classify_sqlstate` of
    its error; `commit_in_flight`: a COMMIT was sent and its answer never
    came; `outcome`: what the checks so far found (None: none made);
    `forced`: the old backend was ended already; `replays`: replays made;
    `replayable`: replay is on and nothing non-replayable was used."""

    node: int
    error_class: ErrorClass
    commit_in_flight: bool = False
    outcome: Optional[CommitOutcome] = None
    forced: bool = False
    replays: int = 0
    replayable: bool = True

    def with_(self, **changes: Any) -> "RequestFailure":
        """A copy with `changes` (what the last step learned)."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class ReplayStep:
    """The next step (`racaffinity_replay_step`): `action`, the node it
    names (CHECK_OUTCOME, FORCE_OUTCOME, REPLAY; else None) and the refusal
    (GIVE_UP; else None)."""

    action: ReplayAction
    node: Optional[int] = None
    refusal: Optional[ReplayRefusal] = None


class ReplayRefused(Exception):
    """The typed cause (`__cause__`) of the original error a request
    surfaces when it is not replayed: `refusal` is the core's reason, or
    None with `reason` "results_differ" when a replay's results differed
    from the ones the application already consumed. Its own `__cause__`
    is the error that ended a replay (for NO_NODE, the error of the
    replay's connect), else the cause the original error had (under a
    SQLAlchemy error, the driver's)."""

    def __init__(self, refusal: Optional[ReplayRefusal], reason: Optional[str] = None) -> None:
        self.refusal = refusal
        self.reason = reason or (refusal.name.lower() if refusal is not None else "unknown")
        super().__init__(f"request not replayed: {self.reason}")


def _refused(
    original: BaseException,
    refusal: Optional[ReplayRefusal],
    reason: Optional[str] = None,
    ended_by: Optional[BaseException] = None,
) -> ReplayRefused:
    """The `ReplayRefused` that becomes `original`'s `__cause__`. It takes
    over the cause `original` had, so a traceback still shows the driver's
    error: a SQLAlchemy error's `__cause__` is the driver's (`.orig`), which
    the refusal would otherwise hide. `ended_by`: the error that ended a
    replay, the refusal's cause instead."""
    refused = ReplayRefused(refusal, reason)
    cause = ended_by
    if cause is None:
        cause = original.__cause__
        if cause is None or isinstance(cause, ReplayRefused):
            orig = getattr(original, "orig", None)
            cause = orig if isinstance(orig, BaseException) and orig is not original else None
    if cause is not None:
        refused.__cause__ = cause
    return refused


def classify_sqlstate(sqlstate: str) -> ErrorClass:
    """Class `08`, `57P01`, `57P02`, `57P03` are RECOVERABLE; anything else
    (malformed text included) is NOT_RECOVERABLE."""
    try:
        arg = cstr(sqlstate, "sqlstate")
    except InvalidArgumentError:
        return ErrorClass.NOT_RECOVERABLE  # a NUL inside: no SQLSTATE
    out = ffi.new("racaffinity_error_class *")
    rc = lib.racaffinity_sqlstate_classify(arg, out)
    if rc:
        raise_for(rc)
    return ErrorClass(int(out[0]))


def classify_oracle_error(code: int) -> ErrorClass:
    """An Oracle error number (3113 for ORA-03113): the errors of a lost
    instance or connection are RECOVERABLE."""
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"code must be an int, not {type(code).__name__}")
    if not 0 <= code <= U32_MAX:
        return ErrorClass.NOT_RECOVERABLE  # no Oracle error has such a number
    out = ffi.new("racaffinity_error_class *")
    rc = lib.racaffinity_oracle_error_classify(code, out)
    if rc:
        raise_for(rc)
    return ErrorClass(int(out[0]))


def _u32(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    if not 0 <= v <= U32_MAX:
        raise KeyOverflowError(f"{what}: {v} is out of range")
    return v


def _flag(v: Any, what: str) -> int:
    if not isinstance(v, bool):
        raise TypeError(f"{what} must be a bool, not {type(v).__name__}")
    return 1 if v else 0


def _enum(v: Any, cls: Any, what: str) -> int:
    # An int (the header's value) or a member; a bool or float is a wrong
    # type, not its number (True == 1 would be NOT_RECOVERABLE, COMMITTED).
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be a {cls.__name__}, not {type(v).__name__}")
    return int(cls(v))  # an int no member has: ValueError


def replay_decide(cluster: Any, failure: RequestFailure) -> ReplayStep:
    """`racaffinity_replay_decide` (`Cluster.replay_step`)."""
    if not isinstance(failure, RequestFailure):
        raise TypeError(f"failure must be a RequestFailure, not {type(failure).__name__}")
    f = ffi.new("racaffinity_request_failure *")
    f.node = _u32(failure.node, "node")
    f.error_class = _enum(failure.error_class, ErrorClass, "error_class")
    f.commit_in_flight = _flag(failure.commit_in_flight, "commit_in_flight")
    f.outcome = (
        int(lib.RACAFFINITY_COMMIT_OUTCOME_NOT_CHECKED)
        if failure.outcome is None
        else _enum(failure.outcome, CommitOutcome, "outcome")
    )
    f.forced = _flag(failure.forced, "forced")
    f.replays = _u32(failure.replays, "replays")
    f.replayable = _flag(failure.replayable, "replayable")
    out = ffi.new("racaffinity_replay_step *")
    cluster._call(lib.racaffinity_replay_decide, f, out)
    action = ReplayAction(int(out.action))
    node = int(out.node) if action in (ReplayAction.CHECK_OUTCOME, ReplayAction.FORCE_OUTCOME, ReplayAction.REPLAY) else None
    refusal = ReplayRefusal(int(out.refusal)) if action == ReplayAction.GIVE_UP else None
    return ReplayStep(action, node, refusal)


# What a request's recovery (`recover`) asks its binding to do; an action
# that fails is thrown back in.
DROP = "drop"  # give the failed connection back: arg, the error
CHECK = "check"  # the commit's outcome on node arg: send back a CommitOutcome
FORCE = "force"  # end the old backend on node arg, then check: send back a CommitOutcome
REPLAY = "replay"  # take the request's new connection on node arg (a replay starts)
RUN = "run"  # run recorded statement arg on it: send back (result, digest of its answer)
COMMIT = "commit"  # commit the request on it (its xid taken first, as at its end)

# What a failed request goes on with once its recorded statements ran
# again (`recover`'s `then`): the statement that failed (the binding's
# recorded form), or one of these.
AT_COMMIT = "at commit"  # its COMMIT
AT_START = "at start"  # nothing: its start (a borrow, a checkout) failed before anything ran


# Why a replay whose connection could not be made is refused (NO_NODE),
# before the connect error.
NO_NODE_REASON = "no node could take the replay"


# What a request raises once a failure it did not replay gave its connection
# back, if the application caught that failure in the block and went on
# (as the driver's closed connection says so, with its driver's error).
GONE = "this request's connection is gone: an earlier failure of the request was not replayed"
# What a request raises when used after its block ended: the block's end
# gave its connection back to the pool, where it may be another's already.
ENDED = "this request has ended: its block gave its connection back to the pool; call request() again"


class Recorder:
    """What a request records to replay it (each statement, in the
    binding's form, with the digest of what it answered) and the state its
    recovery (`recover`) reads and updates: the one base of every request
    type (`NodePools`, `AsyncNodePools`, the SQLAlchemy engines), whose
    own code is the I/O only."""

    def __init__(self, replayable: bool) -> None:
        self._node = -1
        self._recorded: List[Tuple[Any, Tuple[int, Optional[bytes]]]] = []
        self._replayable = replayable
        self._committing = False
        self._xid: Optional[str] = None
        self._pid: Optional[int] = None
        self.replays = 0
        self.outcome: Optional[str] = None
        self._entered = False
        self._ended = False
        # Why the request is not replayable, when a refusal should say more
        # than `not_replayable`.
        self._why: Optional[str] = None

    def _gone(self) -> str:
        """Why the request has no connection (see GONE and ENDED)."""
        return ENDED if self._ended else GONE

    def _enter_once(self) -> None:
        """A request runs once: its record, replays and outcome are its own
        run's. Entered again, a replay would run the earlier run's
        statements again (committed twice), and an entry while entered
        would take the place of the connection in use."""
        if self._entered:
            raise RuntimeError("this request is already entered (a request runs once); call request() again")
        self._entered = True

    def _record(self, statement: Any, answered: Tuple[int, Optional[bytes]]) -> None:
        """`statement` (a tuple: the statement text or object first, then
        what runs it) ran and answered `answered` (`digest`): a replay runs
        it again and compares."""
        if self._replayable:
            self._recorded.append((statement, answered))


class ResultsDiffer(Exception):
    """A replayed statement answered otherwise than the original did."""


class _CommitsAsItRuns(Exception):
    """The replay's connection is in autocommit: left so by other code (a
    pool gives a connection back as its borrower left it), it would commit
    each recorded statement as it runs, and nothing after could be rolled
    back. Or it carries session state an earlier request set by SQL text
    (`req._why`), which the request never ran under."""


def digest(rowcount: int, rows: Optional[Sequence[Any]]) -> Tuple[int, Optional[bytes]]:
    """What a statement answered, compared on a replay: its row count and a
    digest of its rows (None: it returned none)."""
    if rows is None:
        return rowcount, None
    return rowcount, hashlib.sha256(repr(rows).encode()).digest()


def digest_sets(sets: Sequence[Tuple[int, Optional[Sequence[Any]]]]) -> Tuple[int, Optional[bytes]]:
    """`digest` of a statement that answered several result sets (row
    count and rows, or None, of each): every set is compared on a replay,
    the application may have read any of them. One set digests as `digest`."""
    if len(sets) == 1:
        return digest(*sets[0])
    return sets[0][0], hashlib.sha256(repr(list(sets)).encode()).digest()


def transaction_control(sql: str) -> TransactionControl:
    """What `sql` (one statement or several) does to its transaction: the
    strongest control of any of its statements, as the core reads it
    (comments, quoted text and dollar-quoted bodies skipped; Java reads the
    same). A request that sent anything but NONE or SAVEPOINT is not
    replayable."""
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, not {type(sql).__name__}")
    # surrogatepass: a lone surrogate is text the scan reads as a letter,
    # not a reason to fail a statement the driver may still send.
    data = sql.encode("utf-8", "surrogatepass")
    out = ffi.new("racaffinity_transaction_control *")
    rc = lib.racaffinity_sql_transaction_control(data, len(data), out)
    if rc:
        raise_for(rc)
    return TransactionControl(int(out[0]))


def sets_session_state(sql: str) -> bool:
    """Whether `sql` sets session state a replay's new connection would not
    have (`SET` but not `SET LOCAL`, `SET TRANSACTION`, `SET CONSTRAINTS`;
    `RESET`, `DISCARD`, `LISTEN`, `PREPARE name AS`, `DEALLOCATE`,
    `CREATE TEMP TABLE`, `DECLARE ... WITH HOLD`, `LOAD`,
    `set_config(..., false)`, session advisory locks), as the core reads it
    with the rules of `transaction_control`. A connection that ran such text
    in an earlier request is not replayed afterwards (docs/continuity.md)."""
    if not isinstance(sql, str):
        raise TypeError(f"sql must be a str, not {type(sql).__name__}")
    data = sql.encode("utf-8", "surrogatepass")
    out = ffi.new("bool *")
    rc = lib.racaffinity_sql_sets_session_state(data, len(data), out)
    if rc:
        raise_for(rc)
    return bool(out[0])


# Requests send the same texts again and again: the answers of a short one
# are kept (a long one is read anew, not held in memory).
_CONTROLS: Dict[str, Tuple[bool, bool]] = {}
_CONTROLS_MAX = 1024
_CONTROLS_TEXT_MAX = 4096


def read_text(sql: str) -> Tuple[bool, bool]:
    """Whether sending `sql` leaves its request not replayable
    (`transaction_control` stronger than SAVEPOINT: what ran before such a
    statement may be committed or rolled back, where a replay would commit
    it again), and whether it sets session state (`sets_session_state`);
    kept per text."""
    answer = _CONTROLS.get(sql)
    if answer is None:
        answer = (not transaction_control(sql).replayable, sets_session_state(sql))
        if len(sql) <= _CONTROLS_TEXT_MAX:
            if len(_CONTROLS) >= _CONTROLS_MAX:
                _CONTROLS.clear()
            _CONTROLS[sql] = answer
    return answer


def controls_transaction(sql: str) -> bool:
    """`read_text`'s first answer: sending `sql` leaves its request not
    replayable."""
    return read_text(sql)[0]


# The connections on which a request ran SQL text that sets session state:
# the pool hands them to later requests with that state, which no record
# holds, so a request on one is not replayed (weak: the pool owns them).
_SESSION_SET: weakref.WeakSet[Any] = weakref.WeakSet()

SESSION_STATE = "session state set by SQL text"


def mark_session_set(conn: Any) -> None:
    """`conn` carries session state set by SQL text from now on."""
    if conn is not None:
        _SESSION_SET.add(conn)


def session_set(conn: Any) -> bool:
    """Whether an earlier request set session state on `conn` by SQL text."""
    return conn in _SESSION_SET


def outcome_queries(xid: str, pid: int, force: bool, wait_ms: int) -> Tuple[str, ...]:
    """The statements that ask a commit's outcome (the last one answers
    `pg_xact_status`), ending the old backend first with `force`. Literals,
    not parameters, so they run on any PostgreSQL driver: both values came
    from the server and are checked as integers here."""
    check = f"SELECT pg_xact_status('{int(xid)}'::xid8)"
    if not force:
        return (check,)
    return (f"SELECT pg_terminate_backend({int(pid)}, {int(wait_ms)})", check)


def recover(
    cluster: Any, req: Recorder, original: BaseException, then: Any, error_class: Callable[[BaseException], ErrorClass]
) -> Generator[Tuple[str, Any], Any, Any]:
    """A request's recovery after `original` ended a statement (`then`:
    that statement), its COMMIT (`AT_COMMIT`) or its start (`AT_START`),
    without the I/O, which is the binding's: every request type drives
    this one walk of `Cluster.replay_step`, and a replay runs the request's
    record here.

    It yields (DROP | CHECK | FORCE | REPLAY | RUN | COMMIT, arg) and takes
    back what the binding's action gave (see the constants); it returns the
    request's result (the replayed statement's, or None), or raises the
    original error with a `ReplayRefused` cause. It reads and updates the
    request's state (`Recorder`)."""
    at_commit = then is AT_COMMIT
    e = original
    while True:
        failure = RequestFailure(
            node=req._node,
            error_class=error_class(e),
            # No xid: the transaction wrote nothing, so its COMMIT has no
            # outcome to guard and its reads replay harmlessly.
            commit_in_flight=req._committing and req._xid is not None,
            replays=req.replays,
            replayable=req._replayable,
        )
        if e is original and not at_commit and failure.error_class is ErrorClass.NOT_RECOVERABLE:
            # The application's error (a constraint, a serialization
            # failure): the connection stays, as the driver leaves it.
            raise original from _refused(original, cluster.replay_step(failure).refusal)
        req._committing = False
        yield DROP, e
        for _ in range(8):
            step = cluster.replay_step(failure)
            if step.action is ReplayAction.CHECK_OUTCOME:
                failure = failure.with_(outcome=(yield CHECK, step.node))
            elif step.action is ReplayAction.FORCE_OUTCOME:
                yield FORCE, step.node
                failure = failure.with_(forced=True, outcome=None)
            else:
                break
        else:  # pragma: no cover - the core ends in 4 steps
            step = ReplayStep(ReplayAction.GIVE_UP, None, None)
        if step.action is ReplayAction.SUCCEEDED:
            req.outcome = "committed"
            return None
        if step.action is ReplayAction.GIVE_UP:
            # What ended the replay, when one ran, else the driver's error.
            why = req._why if step.refusal is ReplayRefusal.NOT_REPLAYABLE else None
            raise original from _refused(original, step.refusal, why, ended_by=None if e is original else e)
        assert step.node is not None
        try:
            yield REPLAY, step.node
        except Exception as c:
            # Its connection could not be made: nothing of the request ran
            # again. Counted as a replay, the core would answer
            # replayed_already and an operator would read that it ran twice.
            # The node the core named was its best; the application may run
            # the request again itself.
            yield DROP, c
            raise original from _refused(original, ReplayRefusal.NO_NODE, f"{NO_NODE_REASON}: {c}", ended_by=c)
        req.replays += 1
        req._node = step.node
        try:
            if not req._replayable:  # what the binding saw of the new connection
                raise _CommitsAsItRuns()
            for statement, answered in list(req._recorded):
                _result, again = yield RUN, statement
                if again != answered:
                    # The statement, without its parameters (never in a message).
                    raise ResultsDiffer(statement[0])
            if then is AT_START:
                return None
            if then is AT_COMMIT:
                yield COMMIT, None
                return None
            result, answered = yield RUN, then
            req._record(then, answered)
            return result
        except ResultsDiffer as d:
            yield DROP, d
            raise original from _refused(original, None, "results_differ")
        except _CommitsAsItRuns as a:
            yield DROP, a
            raise original from _refused(original, ReplayRefusal.NOT_REPLAYABLE, req._why)
        except Exception as e2:
            e = e2  # the core decides again: the replay's own commit, or no second replay
