//! Continuity: the decisions request replay rests on, made once here for
//! every binding (docs/continuity.md). A binding records a request
//! (statements, parameters, transaction demarcation), and when the request
//! fails it asks [`Cluster::replay_step`] what to do next, step by step:
//! check the outcome of a commit that was in flight, force that outcome
//! when the old transaction is still running, replay once on a node the
//! core chooses, or give up with a typed reason.
//!
//! The order matters more than anything else: a request whose COMMIT may
//! have reached the server is never replayed before its outcome is known,
//! because a replay after a commit that did happen commits the work twice.
//! PostgreSQL gives the primitive: `pg_current_xact_id()` taken inside the
//! transaction, and `pg_xact_status(xid8)` afterwards (`committed`,
//! `aborted`, `in progress`, or NULL when too old to tell).

use crate::cluster::Cluster;
use crate::config::RecoveryScope;
use crate::error::{Error, Result};
use crate::node::{NodeId, NodeState};

mod session_state;
mod transaction_control;
pub use session_state::sets_session_state;
pub use transaction_control::{SqlReading, TransactionControl};

/// Replays of one request at most: a request that failed twice is not a
/// failover, it is a request that fails.
pub const MAX_REPLAYS: u32 = 1;

/// How an error that ended a request bears on replaying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The connection or its node failed (connection exceptions, an
    /// administrator or crash shutdown, a node that cannot take
    /// connections): the request may be replayed once its commit outcome
    /// is known.
    Recoverable,
    /// Anything else (a constraint violation, a syntax error, a
    /// serialization failure, a timeout the application set): the
    /// application's to handle; never replayed.
    NotRecoverable,
}

impl ErrorClass {
    /// Lower-case name, for messages and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Recoverable => "recoverable",
            ErrorClass::NotRecoverable => "not_recoverable",
        }
    }
}

/// Classifies a SQLSTATE (five characters, as the server or driver reported
/// it): class `08` (connection exception), `57P01` (admin shutdown), `57P02`
/// (crash shutdown) and `57P03` (cannot connect now) are recoverable; so is
/// pgjdbc's and the AWS wrapper's `08S01`/`08S02` (communication link
/// failure, failover), which class `08` covers. Everything else is not.
pub fn classify_sqlstate(sqlstate: &str) -> ErrorClass {
    let s = sqlstate.trim().as_bytes();
    if s.len() != 5 || !s.iter().all(u8::is_ascii_alphanumeric) {
        return ErrorClass::NotRecoverable;
    }
    let upper = sqlstate.trim().to_ascii_uppercase();
    if upper.starts_with("08") || matches!(upper.as_str(), "57P01" | "57P02" | "57P03") {
        ErrorClass::Recoverable
    } else {
        ErrorClass::NotRecoverable
    }
}

/// Oracle error numbers that mean the session's instance or connection is
/// gone (the errors Oracle's own Application Continuity treats as
/// recoverable for a failover): ORA-00028, 01012, 01033, 01034, 01089,
/// 01092, 03113, 03114, 03135, 12153, 12514, 12537, 12541, 12571, 25408.
/// Not tested against a real Oracle database here (docs/testing.md).
pub fn classify_oracle_error(code: u32) -> ErrorClass {
    const RECOVERABLE: [u32; 15] =
        [28, 1012, 1033, 1034, 1089, 1092, 3113, 3114, 3135, 12153, 12514, 12537, 12541, 12571, 25408];
    if RECOVERABLE.contains(&code) {
        ErrorClass::Recoverable
    } else {
        ErrorClass::NotRecoverable
    }
}

/// The outcome of a commit that was in flight when its connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitOutcome {
    /// It committed: the request succeeded.
    Committed,
    /// It was rolled back (or never got there): the work is not in.
    Aborted,
    /// The transaction still runs behind the failed connection (a backend
    /// behind a blackhole): it may still commit.
    InProgress,
    /// No one can tell (the id is too old, or the server that knows is gone).
    Unknown,
}

impl CommitOutcome {
    /// From `pg_xact_status(xid8)`'s answer (`None`: SQL NULL).
    pub fn from_pg_xact_status(status: Option<&str>) -> CommitOutcome {
        match status.map(str::trim) {
            Some("committed") => CommitOutcome::Committed,
            Some("aborted") => CommitOutcome::Aborted,
            Some("in progress") => CommitOutcome::InProgress,
            _ => CommitOutcome::Unknown,
        }
    }

    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            CommitOutcome::Committed => "committed",
            CommitOutcome::Aborted => "aborted",
            CommitOutcome::InProgress => "in_progress",
            CommitOutcome::Unknown => "unknown",
        }
    }
}

/// Why a failed request is not replayed; the binding surfaces the original
/// error with this as its typed cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayRefusal {
    /// The error is not a connection or node failure.
    NotRecoverable,
    /// The request used something that cannot be replayed (an XA branch,
    /// which the transaction manager recovers; anything docs/continuity.md
    /// lists), or replay is off.
    NotReplayable,
    /// The request was replayed already ([`MAX_REPLAYS`]).
    ReplayedAlready,
    /// The commit in flight has no established outcome (the node that knows
    /// is gone, the id is too old, or it still ran after being ended).
    OutcomeUnknown,
    /// No node can take the replay.
    NoNode,
}

impl ReplayRefusal {
    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReplayRefusal::NotRecoverable => "not_recoverable",
            ReplayRefusal::NotReplayable => "not_replayable",
            ReplayRefusal::ReplayedAlready => "replayed_already",
            ReplayRefusal::OutcomeUnknown => "outcome_unknown",
            ReplayRefusal::NoNode => "no_node",
        }
    }
}

/// One failed request, as the binding saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFailure {
    /// The node the request failed on.
    pub node: NodeId,
    /// The error's class ([`classify_sqlstate`], [`classify_oracle_error`]).
    pub class: ErrorClass,
    /// Whether a COMMIT had been sent without its answer arriving.
    pub commit_in_flight: bool,
    /// What the outcome checks so far found (`None`: none made yet).
    pub outcome: Option<CommitOutcome>,
    /// Whether the old transaction was already ended ([`ReplayStep::ForceOutcome`]).
    pub forced: bool,
    /// Replays already made of this request.
    pub replays: u32,
    /// Whether the request may be replayed at all (replay on, nothing
    /// non-replayable used).
    pub replayable: bool,
}

/// What the binding does next with a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayStep {
    /// The commit in flight committed: the request succeeded as it was;
    /// nothing is replayed.
    Succeeded,
    /// Ask `node` for the outcome (`pg_xact_status(xid)`), then ask again
    /// with it in [`RequestFailure::outcome`] (`Unknown` when that fails).
    CheckOutcome {
        /// Where to ask.
        node: NodeId,
    },
    /// The old transaction still runs: end its backend through `node`
    /// (`pg_terminate_backend(pid)`), so it can never commit after the
    /// replay, then check again with [`RequestFailure::forced`] set.
    ForceOutcome {
        /// Where to end it.
        node: NodeId,
    },
    /// Replay the request on `node` (once).
    Replay {
        /// Where to replay.
        node: NodeId,
    },
    /// No replay: surface the original error with this cause.
    GiveUp {
        /// Why.
        refusal: ReplayRefusal,
    },
}

impl Cluster {
    /// The next step for a failed request (module docs of `continuity.rs`,
    /// docs/continuity.md). A pure decision: it changes nothing in the
    /// cluster, so a binding may ask again after each step.
    ///
    /// Where the outcome is asked depends on `recovery.scope`: instances of
    /// one database (`database`, Oracle RAC) can answer for each other, so
    /// any usable node other than the failed one is asked; independent
    /// databases (`node`) only know their own transactions, so the failed
    /// node itself is asked (its answer fails while it is down, and the
    /// outcome stays unknown).
    ///
    /// # Errors
    /// [`Error::UnknownNode`] for a node id this cluster never had;
    /// [`Error::InvalidArgument`] for an outcome or a force without a
    /// commit in flight (the failure contradicts itself).
    pub fn replay_step(&self, f: &RequestFailure) -> Result<ReplayStep> {
        let topo = self.topo();
        if topo.node(f.node).is_none() {
            return Err(Error::UnknownNode(format!("node id {}", f.node.0)));
        }
        if !f.commit_in_flight && (f.outcome.is_some() || f.forced) {
            // A check or a force is of a COMMIT in flight: either flag is
            // wrong, and each guess is unsafe (a replay could commit twice;
            // `Succeeded` could report work that never committed).
            return Err(Error::InvalidArgument(format!(
                "a failure with {} but commit_in_flight = false: an outcome is checked, and a transaction \
                 forced, only for a COMMIT in flight",
                if f.outcome.is_some() { "a checked outcome" } else { "forced = true" }
            )));
        }
        let give_up = |refusal| Ok(ReplayStep::GiveUp { refusal });
        if f.class != ErrorClass::Recoverable {
            return give_up(ReplayRefusal::NotRecoverable);
        }
        if f.commit_in_flight {
            let asked = match self.recovery_scope() {
                RecoveryScope::Database => self.other_usable(f.node),
                RecoveryScope::Node => Some(f.node),
            };
            match f.outcome {
                // The work is in: success, whatever else holds.
                Some(CommitOutcome::Committed) => return Ok(ReplayStep::Succeeded),
                None => {
                    return match asked {
                        Some(node) => Ok(ReplayStep::CheckOutcome { node }),
                        None => give_up(ReplayRefusal::OutcomeUnknown),
                    }
                }
                Some(CommitOutcome::InProgress) if !f.forced => {
                    return match asked {
                        Some(node) => Ok(ReplayStep::ForceOutcome { node }),
                        None => give_up(ReplayRefusal::OutcomeUnknown),
                    }
                }
                Some(CommitOutcome::InProgress | CommitOutcome::Unknown) => {
                    return give_up(ReplayRefusal::OutcomeUnknown)
                }
                Some(CommitOutcome::Aborted) => {}
            }
        }
        if !f.replayable {
            return give_up(ReplayRefusal::NotReplayable);
        }
        if f.replays >= MAX_REPLAYS {
            return give_up(ReplayRefusal::ReplayedAlready);
        }
        match self.other_usable(f.node) {
            Some(node) => Ok(ReplayStep::Replay { node }),
            None => give_up(ReplayRefusal::NoNode),
        }
    }

    /// A usable node other than `failed`, by the cluster's balancing
    /// policy; `failed` itself when it is the only usable one (a reset
    /// connection on a node that is still up).
    fn other_usable(&self, failed: NodeId) -> Option<NodeId> {
        let topo = self.topo();
        // A removed node keeps its id and its last state, but the cluster
        // (and the host's pools) no longer have it.
        let usable = |n: &crate::node::Node| n.state() == NodeState::Up && !n.is_removed();
        if let Ok((node, false)) = self.balanced_in(&topo, None, |n| n.id() != failed && usable(n)) {
            if node != failed && topo.node(node).is_some_and(|n| usable(n)) {
                return Some(node);
            }
        }
        topo.node(failed).filter(|n| usable(n)).map(|n| n.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_of_lost_connections_are_recoverable() {
        for s in ["08000", "08003", "08006", "08001", "08S01", "08s02", "57P01", "57P02", "57P03", " 08006 "] {
            assert_eq!(classify_sqlstate(s), ErrorClass::Recoverable, "{s}");
        }
        for s in ["23505", "40001", "40P01", "57014", "42P01", "", "08", "0800000", "08\u{e9}01", "57P04"] {
            assert_eq!(classify_sqlstate(s), ErrorClass::NotRecoverable, "{s:?}");
        }
    }

    #[test]
    fn oracle_errors_of_lost_instances_are_recoverable() {
        assert_eq!(classify_oracle_error(3113), ErrorClass::Recoverable);
        assert_eq!(classify_oracle_error(25408), ErrorClass::Recoverable);
        assert_eq!(classify_oracle_error(1), ErrorClass::NotRecoverable, "ORA-00001: unique constraint");
        assert_eq!(classify_oracle_error(60), ErrorClass::NotRecoverable, "ORA-00060: deadlock");
    }

    #[test]
    fn pg_xact_status_answers_map_to_outcomes() {
        assert_eq!(CommitOutcome::from_pg_xact_status(Some("committed")), CommitOutcome::Committed);
        assert_eq!(CommitOutcome::from_pg_xact_status(Some("aborted")), CommitOutcome::Aborted);
        assert_eq!(CommitOutcome::from_pg_xact_status(Some("in progress")), CommitOutcome::InProgress);
        assert_eq!(CommitOutcome::from_pg_xact_status(None), CommitOutcome::Unknown);
        assert_eq!(CommitOutcome::from_pg_xact_status(Some("sideways")), CommitOutcome::Unknown);
    }
}
