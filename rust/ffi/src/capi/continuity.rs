//! Request replay's decisions for C hosts (docs/continuity.md): the same
//! classification and outcome state machine the Java and Python bindings
//! walk, so a libpq host replays exactly as they do.

use std::os::raw::c_char;

use racaffinity_core::{
    classify_oracle_error, classify_sqlstate, sets_session_state, CommitOutcome, ErrorClass, ReplayRefusal, ReplayStep,
    RequestFailure, TransactionControl,
};

use super::buffer::{out_arg, str_arg};
use super::handle::{self, racaffinity_cluster};
use super::result::{bad_enum, c_enum, guard, racaffinity_result, Failure};
use super::types::node_id;

/// How an error that ended a request bears on replaying it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_error_class {
    /// A lost connection or node: replayable once the commit outcome is known.
    Recoverable = 0,
    /// Anything else: the application's to handle, never replayed.
    NotRecoverable = 1,
}

c_enum!(racaffinity_error_class => ErrorClass { Recoverable, NotRecoverable });

/// What SQL text a request sends does to its transaction: the strongest
/// control of any of its statements, from none to commit.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_transaction_control {
    /// No statement controls a transaction.
    None = 0,
    /// `SAVEPOINT`, `RELEASE`, `ROLLBACK TO`: the transaction goes on; the
    /// request stays replayable.
    Savepoint = 1,
    /// `BEGIN`, `START TRANSACTION`.
    Begin = 2,
    /// `ROLLBACK`, `ABORT`, `ROLLBACK PREPARED`.
    Rollback = 3,
    /// `COMMIT`, `END`, `PREPARE TRANSACTION`, `COMMIT PREPARED`: what ran
    /// before may be committed.
    Commit = 4,
}

c_enum!(racaffinity_transaction_control => TransactionControl { None, Savepoint, Begin, Rollback, Commit });

/// What the outcome checks of a commit in flight found so far.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_commit_outcome {
    /// No check made yet.
    NotChecked = 0,
    /// It committed.
    Committed = 1,
    /// It was rolled back, or never got there.
    Aborted = 2,
    /// It still runs behind the failed connection.
    InProgress = 3,
    /// No one can tell.
    Unknown = 4,
}

c_enum!(racaffinity_commit_outcome { NotChecked, Committed, Aborted, InProgress, Unknown });

/// What the host does next with a failed request.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_replay_action {
    /// The commit in flight committed: the request succeeded; no replay.
    Succeeded = 0,
    /// Ask `node` for the outcome (`pg_xact_status(xid)`), then ask again.
    CheckOutcome = 1,
    /// End the old transaction's backend through `node`, then check again.
    ForceOutcome = 2,
    /// Replay the request on `node`, once.
    Replay = 3,
    /// No replay: surface the original error, with `refusal` as its cause.
    GiveUp = 4,
}

/// Why a failed request is not replayed (`GiveUp`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_replay_refusal {
    /// Not a refusal (the action is not `GiveUp`).
    None = 0,
    /// The error is not a connection or node failure.
    NotRecoverable = 1,
    /// The request used something that cannot be replayed, or replay is off.
    NotReplayable = 2,
    /// The request was replayed already.
    ReplayedAlready = 3,
    /// The commit in flight has no established outcome.
    OutcomeUnknown = 4,
    /// No node can take the replay.
    NoNode = 5,
}

/// One failed request, as the host saw it. Only integers, so any bit
/// pattern a caller leaves is defined; flags are 0 or nonzero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct racaffinity_request_failure {
    /// The node id the request failed on.
    pub node: u32,
    /// A `racaffinity_error_class` (`racaffinity_sqlstate_classify`).
    pub error_class: u32,
    /// Nonzero: a COMMIT was sent and its answer never came.
    pub commit_in_flight: u32,
    /// A `racaffinity_commit_outcome`: what the checks so far found.
    pub outcome: u32,
    /// Nonzero: the old transaction was already ended (`ForceOutcome` done).
    pub forced: u32,
    /// Replays already made of this request.
    pub replays: u32,
    /// Nonzero: the request may be replayed (replay on, nothing
    /// non-replayable used).
    pub replayable: u32,
}

/// The next step: an action, the node it names (`CheckOutcome`,
/// `ForceOutcome`, `Replay`; else 0) and the refusal (`GiveUp`; else `None`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct racaffinity_replay_step {
    /// What to do.
    pub action: racaffinity_replay_action,
    /// Where.
    pub node: u32,
    /// Why not (for `GiveUp`).
    pub refusal: racaffinity_replay_refusal,
}

/// Classifies a SQLSTATE: class `08`, `57P01`, `57P02` and `57P03` are
/// `RECOVERABLE`; anything else (malformed text included) is not.
///
/// # Safety
/// `sqlstate` must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_sqlstate_classify(
    sqlstate: *const c_char,
    out: *mut racaffinity_error_class,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, s) = unsafe { (out_arg(out, "out")?, str_arg(sqlstate, "sqlstate")?) };
        out.set(classify_sqlstate(s).into())
    })
}

/// Reads the transaction control in SQL text a request sends (`len` bytes
/// at `sql`, in UTF-8 or any encoding that keeps ASCII as it is; any length;
/// not NUL-terminated): `COMMIT`, `ROLLBACK`, `BEGIN`... as the first words
/// of any of its statements, with comments, quoted text and dollar-quoted
/// bodies skipped. A request that sent anything stronger than
/// `RACAFFINITY_TRANSACTION_CONTROL_SAVEPOINT` is not replayable.
///
/// # Safety
/// `sql` must be NULL (with `len` 0) or valid for reading `len` bytes; `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_sql_transaction_control(
    sql: *const c_char,
    len: usize,
    out: *mut racaffinity_transaction_control,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out")? };
        // SAFETY: per this function's contract.
        let text = unsafe { sql_arg(sql, len)? };
        out.set(TransactionControl::of_bytes(text).into())
    })
}

/// Whether SQL text (read as `racaffinity_sql_transaction_control` reads
/// it: `len` bytes, any length, not NUL-terminated) sets session state a
/// replay record does not hold: `SET` (not `SET LOCAL`, `SET TRANSACTION`,
/// `SET CONSTRAINTS`), `RESET`, `DISCARD`, `LISTEN`, `PREPARE name AS`,
/// `DEALLOCATE`, `CREATE TEMP TABLE`, `DECLARE … WITH HOLD`, `LOAD`,
/// `set_config(…, false)`, session advisory locks. A host that sent such
/// text outside the request's recorded transaction (an earlier committed
/// transaction of the connection, or auto-commit) must not replay on that
/// connection afterwards (docs/continuity.md).
///
/// # Safety
/// `sql` must be NULL (with `len` 0) or valid for reading `len` bytes; `out`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_sql_sets_session_state(
    sql: *const c_char,
    len: usize,
    out: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out")? };
        // SAFETY: per this function's contract.
        let text = unsafe { sql_arg(sql, len)? };
        out.set(sets_session_state(text))
    })
}

/// The `len` bytes at `sql` (NULL allowed with `len` 0).
///
/// # Safety
/// `sql` must be NULL or valid for reading `len` bytes.
unsafe fn sql_arg<'a>(sql: *const c_char, len: usize) -> Result<&'a [u8], Failure> {
    if len == 0 {
        Ok(&[])
    } else if sql.is_null() {
        Err(Failure::null("sql"))
    } else {
        // SAFETY: non-NULL and valid for `len` bytes per the contract. No
        // length cap: the scan is linear and allocates nothing.
        Ok(unsafe { std::slice::from_raw_parts(sql.cast::<u8>(), len) })
    }
}

/// Classifies an Oracle error number (3113 for ORA-03113): the errors of a
/// lost instance or connection are `RECOVERABLE`.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_oracle_error_classify(
    code: u32,
    out: *mut racaffinity_error_class,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out")? };
        out.set(classify_oracle_error(code).into())
    })
}

/// Maps `pg_xact_status(xid8)`'s answer (`status` NULL for SQL NULL) to an
/// outcome: `committed`, `aborted`, `in progress`; anything else `UNKNOWN`.
///
/// # Safety
/// `status` must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_pg_xact_status_outcome(
    status: *const c_char,
    out: *mut racaffinity_commit_outcome,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out")? };
        // SAFETY: as above; NULL is SQL NULL.
        let status = if status.is_null() { None } else { Some(unsafe { str_arg(status, "status") }?) };
        out.set(match CommitOutcome::from_pg_xact_status(status) {
            CommitOutcome::Committed => racaffinity_commit_outcome::Committed,
            CommitOutcome::Aborted => racaffinity_commit_outcome::Aborted,
            CommitOutcome::InProgress => racaffinity_commit_outcome::InProgress,
            CommitOutcome::Unknown => racaffinity_commit_outcome::Unknown,
        })
    })
}

pub(crate) fn failure_arg(f: &racaffinity_request_failure) -> Result<RequestFailure, Failure> {
    let class = racaffinity_error_class::try_from(f.error_class).map_err(|_| bad_enum("error_class", f.error_class))?;
    let outcome = match racaffinity_commit_outcome::try_from(f.outcome).map_err(|_| bad_enum("outcome", f.outcome))? {
        racaffinity_commit_outcome::NotChecked => None,
        racaffinity_commit_outcome::Committed => Some(CommitOutcome::Committed),
        racaffinity_commit_outcome::Aborted => Some(CommitOutcome::Aborted),
        racaffinity_commit_outcome::InProgress => Some(CommitOutcome::InProgress),
        racaffinity_commit_outcome::Unknown => Some(CommitOutcome::Unknown),
    };
    Ok(RequestFailure {
        node: node_id(f.node),
        class: class.into(),
        commit_in_flight: f.commit_in_flight != 0,
        outcome,
        forced: f.forced != 0,
        replays: f.replays,
        replayable: f.replayable != 0,
    })
}

/// The next step for a failed request (docs/continuity.md): a pure decision
/// that changes nothing, so the host asks again after each step with what
/// it learned. An unknown node id is `UNKNOWN_NODE`; an out-of-range enum
/// value `INVALID_ARGUMENT`, as is an `outcome` other than `NOT_CHECKED`, or
/// `forced`, with `commit_in_flight` 0 (the failure contradicts itself).
///
/// # Safety
/// `failure` must be NULL or readable; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_replay_decide(
    cluster: *const racaffinity_cluster,
    failure: *const racaffinity_request_failure,
    out: *mut racaffinity_replay_step,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out")? };
        // SAFETY: non-NULL checked; readable per the contract.
        let f = failure_arg(unsafe { failure.as_ref() }.ok_or_else(|| Failure::null("failure"))?)?;
        let step = handle::with(cluster, |c| Ok(c.replay_step(&f)?))?;
        out.set(step_out(step))
    })
}

/// A core step as the C ABI's struct (the JNI export packs the same fields).
pub(crate) fn step_out(step: ReplayStep) -> racaffinity_replay_step {
    let (action, node, refusal) = match step {
        ReplayStep::Succeeded => (racaffinity_replay_action::Succeeded, 0, racaffinity_replay_refusal::None),
        ReplayStep::CheckOutcome { node } => {
            (racaffinity_replay_action::CheckOutcome, node.0, racaffinity_replay_refusal::None)
        }
        ReplayStep::ForceOutcome { node } => {
            (racaffinity_replay_action::ForceOutcome, node.0, racaffinity_replay_refusal::None)
        }
        ReplayStep::Replay { node } => (racaffinity_replay_action::Replay, node.0, racaffinity_replay_refusal::None),
        ReplayStep::GiveUp { refusal } => (
            racaffinity_replay_action::GiveUp,
            0,
            match refusal {
                ReplayRefusal::NotRecoverable => racaffinity_replay_refusal::NotRecoverable,
                ReplayRefusal::NotReplayable => racaffinity_replay_refusal::NotReplayable,
                ReplayRefusal::ReplayedAlready => racaffinity_replay_refusal::ReplayedAlready,
                ReplayRefusal::OutcomeUnknown => racaffinity_replay_refusal::OutcomeUnknown,
                ReplayRefusal::NoNode => racaffinity_replay_refusal::NoNode,
            },
        ),
    };
    racaffinity_replay_step { action, node, refusal }
}
