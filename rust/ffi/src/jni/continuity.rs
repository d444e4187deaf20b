//! Request replay's decisions for `io.racaffinity.Continuity` and the Java
//! data source's replay (docs/continuity.md): the same classification and
//! outcome state machine `capi/continuity.rs` gives C hosts and Python; these
//! exports convert arguments only.

use jni::objects::JString;
use jni::sys::{jboolean, jint, jlong};
use racaffinity_core::{classify_sqlstate, CommitOutcome, ErrorClass, SqlReading, TransactionControl};

use super::{run, with_cluster};
use crate::capi::continuity::{
    failure_arg, racaffinity_commit_outcome, racaffinity_error_class, racaffinity_request_failure,
    racaffinity_transaction_control, step_out,
};

jni_export! {
    /// `int sqlstateClassify(String sqlstate)`: 0 recoverable, 1 not
    /// (`racaffinity_error_class`); malformed text is not recoverable. Read
    /// from the string's modified UTF-8 as it is: a SQLState is 5 ASCII
    /// characters, so text that is not UTF-8 there (a lone surrogate, NUL, a
    /// supplementary character) or of any length is malformed, never an
    /// exception thrown from a host's error handling.
    fn Java_io_racaffinity_Native_sqlstateClassify<'l>(env, sqlstate: JString<'l>) -> jint {
        run(&mut env, |env| {
            if sqlstate.is_null() {
                return Err(super::null_arg("sqlstate"));
            }
            let chars = sqlstate.mutf8_chars(env)?;
            let class = match std::str::from_utf8(chars.to_bytes()) {
                Ok(s) => classify_sqlstate(s),
                Err(_) => ErrorClass::NotRecoverable,
            };
            let c: racaffinity_error_class = class.into();
            Ok(c as jint)
        })
    }

    /// `int sqlTransactionControl(String sql)`: a `racaffinity_transaction_control`
    /// (0..4). Read from the string's modified UTF-8 as it is: lone surrogates
    /// and any length are fine, the keywords it looks for are ASCII.
    fn Java_io_racaffinity_Native_sqlTransactionControl<'l>(env, sql: JString<'l>) -> jint {
        run(&mut env, |env| {
            if sql.is_null() {
                return Err(super::null_arg("sql"));
            }
            let chars = sql.mutf8_chars(env)?;
            let c: racaffinity_transaction_control = TransactionControl::of_bytes(chars.to_bytes()).into();
            Ok(c as jint)
        })
    }

    /// `int sqlReading(String sql)`: both readings of the text in one
    /// crossing, for the replay's per-text cache: the low byte a
    /// `racaffinity_transaction_control` (0..4), bit 8 set when it sets
    /// session state (`racaffinity_sql_sets_session_state`). Read as
    /// `sqlTransactionControl` reads it.
    fn Java_io_racaffinity_Native_sqlReading<'l>(env, sql: JString<'l>) -> jint {
        run(&mut env, |env| {
            if sql.is_null() {
                return Err(super::null_arg("sql"));
            }
            let chars = sql.mutf8_chars(env)?;
            let reading = SqlReading::of_bytes(chars.to_bytes());
            let c: racaffinity_transaction_control = reading.control.into();
            Ok(c as jint | if reading.session_state { 0x100 } else { 0 })
        })
    }

    /// `int pgXactStatusOutcome(String status)`: `pg_xact_status`'s answer
    /// (null for SQL NULL) as a `racaffinity_commit_outcome` (1..4). Read
    /// from the string's modified UTF-8 as it is, as `sqlstateClassify` is:
    /// the answers it knows are ASCII, so text that is not UTF-8 there (a
    /// lone surrogate, NUL) or of any length is unknown, never an exception
    /// thrown from a replay's outcome check.
    fn Java_io_racaffinity_Native_pgXactStatusOutcome<'l>(env, status: JString<'l>) -> jint {
        run(&mut env, |env| {
            let outcome = if status.is_null() {
                CommitOutcome::from_pg_xact_status(None)
            } else {
                let chars = status.mutf8_chars(env)?;
                match std::str::from_utf8(chars.to_bytes()) {
                    Ok(s) => CommitOutcome::from_pg_xact_status(Some(s)),
                    Err(_) => CommitOutcome::Unknown,
                }
            };
            let o = match outcome {
                CommitOutcome::Committed => racaffinity_commit_outcome::Committed,
                CommitOutcome::Aborted => racaffinity_commit_outcome::Aborted,
                CommitOutcome::InProgress => racaffinity_commit_outcome::InProgress,
                CommitOutcome::Unknown => racaffinity_commit_outcome::Unknown,
            };
            Ok(o as jint)
        })
    }

    /// `long replayDecide(long handle, int node, int errorClass, boolean
    /// commitInFlight, int outcome, boolean forced, int replays, boolean
    /// replayable)`: the next step, packed: bits 0..8 the action, 8..16 the
    /// refusal, 32..64 the node (`racaffinity_replay_step`'s fields).
    fn Java_io_racaffinity_Native_replayDecide<'l>(
        env,
        h: jlong,
        node: jint,
        error_class: jint,
        commit_in_flight: jboolean,
        outcome: jint,
        forced: jboolean,
        replays: jint,
        replayable: jboolean,
    ) -> jlong {
        run(&mut env, |_| {
            let raw = racaffinity_request_failure {
                node: super::node_arg(node)?,
                // A negative value becomes one no enum has: an INVALID_ARGUMENT naming it.
                error_class: error_class as u32,
                commit_in_flight: u32::from(commit_in_flight),
                outcome: outcome as u32,
                forced: u32::from(forced),
                replays: u32::try_from(replays).unwrap_or(u32::MAX),
                replayable: u32::from(replayable),
            };
            let step = with_cluster(h, |c| {
                let f = failure_arg(&raw)?;
                Ok(c.replay_step(&f)?)
            })?;
            let s = step_out(step);
            Ok(((i64::from(s.node)) << 32) | ((s.refusal as i64) << 8) | (s.action as i64))
        })
    }
}
