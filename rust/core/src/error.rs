//! One error type for the whole core.
//!
//! Every binding maps [`ErrorKind`] to its own exception or result code through a
//! single table, so the kinds are stable and never reused.

use std::fmt;

use crate::node::{DownCause, NodeState};

/// The affinity scope a routing decision was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Per-thread (or per host context) pinning.
    Thread,
    /// Global (XA) transaction affinity by gtrid.
    Transaction,
    /// Web-session affinity.
    Session,
    /// Data (sharding key) affinity.
    Data,
}

impl Scope {
    /// Lower-case name used in config keys, metrics and messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Thread => "thread",
            Scope::Transaction => "transaction",
            Scope::Session => "session",
            Scope::Data => "data",
        }
    }

    /// All scopes, in a fixed order (metrics rely on it).
    pub const ALL: [Scope; 4] = [Scope::Thread, Scope::Transaction, Scope::Session, Scope::Data];
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Stable classification of [`Error`]; bindings map these, never messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Config text or builder value is invalid.
    Config,
    /// A value passed to the API is out of range or malformed.
    InvalidArgument,
    /// A node name that the cluster does not know.
    UnknownNode,
    /// A node name that the cluster already has.
    DuplicateNode,
    /// No node can take the work (every node down and panic policy is `fail`).
    NoNodeAvailable,
    /// A strict scope refused to move work off its owning node.
    StrictAffinity,
    /// A prepared transaction branch's node is not available; it cannot move.
    PreparedNodeUnavailable,
    /// A transaction id the registry does not hold.
    UnknownTransaction,
    /// An event line is malformed or of an unsupported kind.
    EventParse,
    /// An event line is well formed but names another database or service.
    ForeignEvent,
    /// A lease token that is not open (released twice, or never issued).
    UnknownLease,
    /// The topology feed (`topology.feed`) could not take an operator's
    /// change; nothing changed.
    FeedUnavailable,
}

/// Errors returned by the core.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Config text or builder value is invalid; `key` names the offending key.
    Config {
        /// The key (empty for whole-text problems).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An argument is invalid.
    InvalidArgument(String),
    /// The named node is not part of the cluster.
    UnknownNode(String),
    /// No live node has this name; `known` lists the cluster's live nodes
    /// (cut short in a large cluster). Kind: [`ErrorKind::UnknownNode`].
    UnknownNodeName {
        /// The name asked for.
        name: String,
        /// The live nodes' names, comma-separated, possibly cut short.
        known: String,
    },
    /// A node with that name already exists.
    DuplicateNode(String),
    /// No node is available and the panic policy is `fail`.
    NoNodeAvailable {
        /// The scope routing was for, if any.
        scope: Option<Scope>,
    },
    /// A strict scope's owning node is not available.
    StrictAffinity {
        /// The refusing scope.
        scope: Scope,
        /// The owning node.
        node: String,
        /// Its state.
        state: NodeState,
    },
    /// Strict transactions: the owner of a new gtrid changed between taking
    /// and refusing new work too recently for every process to have seen it.
    StrictSettling {
        /// The owning node.
        node: String,
        /// Its state in this process's view.
        state: NodeState,
        /// Milliseconds since the change.
        since_ms: u64,
        /// `transaction.settle`.
        settle_ms: u64,
    },
    /// Strict transactions: the owner of a new gtrid fails in this process's
    /// own view only (missed heartbeats, passive ejection), which no other
    /// process shares; they would still place the gtrid there.
    StrictUnconfirmed {
        /// The owning node.
        node: String,
        /// Its state in this process's view.
        state: NodeState,
        /// This process's evidence (`heartbeat` or `ejected`).
        cause: DownCause,
    },
    /// A prepared branch is owned by a node that is not available.
    PreparedNodeUnavailable {
        /// The owning node.
        node: String,
        /// Its state.
        state: NodeState,
    },
    /// The transaction id is not registered.
    UnknownTransaction(String),
    /// Malformed or unsupported event text.
    EventParse(String),
    /// Event for another database/service than this cluster's.
    ForeignEvent(String),
    /// The lease token is not open.
    UnknownLease(u64),
    /// An operator call could not be written to the topology feed.
    FeedUnavailable(String),
}

impl Error {
    /// Stable classification for bindings.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config { .. } => ErrorKind::Config,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::UnknownNode(_) | Error::UnknownNodeName { .. } => ErrorKind::UnknownNode,
            Error::DuplicateNode(_) => ErrorKind::DuplicateNode,
            Error::NoNodeAvailable { .. } => ErrorKind::NoNodeAvailable,
            Error::StrictAffinity { .. } | Error::StrictSettling { .. } | Error::StrictUnconfirmed { .. } => {
                ErrorKind::StrictAffinity
            }
            Error::PreparedNodeUnavailable { .. } => ErrorKind::PreparedNodeUnavailable,
            Error::UnknownTransaction(_) => ErrorKind::UnknownTransaction,
            Error::EventParse(_) => ErrorKind::EventParse,
            Error::ForeignEvent(_) => ErrorKind::ForeignEvent,
            Error::UnknownLease(_) => ErrorKind::UnknownLease,
            Error::FeedUnavailable(_) => ErrorKind::FeedUnavailable,
        }
    }

    pub(crate) fn config(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Config { key: key.into(), reason: reason.into() }
    }

    /// The message without its kind's prefix, for an error that becomes
    /// part of another one's message (which says its kind once).
    pub(crate) fn detail(&self) -> String {
        match self {
            Error::InvalidArgument(m) => m.clone(),
            other => other.to_string(),
        }
    }

    pub(crate) fn event(reason: impl Into<String>) -> Self {
        Error::EventParse(reason.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { key, reason } => write!(f, "invalid config key `{key}`: {reason}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::UnknownNode(n) => write!(f, "unknown node `{n}`"),
            Error::UnknownNodeName { name, known } if known.is_empty() => {
                write!(f, "unknown node `{name}`: this cluster has no node")
            }
            Error::UnknownNodeName { name, known } => write!(f, "unknown node `{name}`; this cluster has {known}"),
            Error::DuplicateNode(n) => write!(f, "node `{n}` already exists"),
            Error::NoNodeAvailable { scope: Some(s) } => {
                write!(f, "no node available for {s} routing (every node is down and panic policy is `fail`)")
            }
            Error::NoNodeAvailable { scope: None } => {
                write!(f, "no node available (every node is down and panic policy is `fail`)")
            }
            Error::StrictAffinity { scope, node, state } => {
                write!(f, "strict {scope} affinity: owning node `{node}` is {state}; refusing to route elsewhere")
            }
            Error::StrictSettling { node, state, since_ms, settle_ms } => write!(
                f,
                "strict affinity: node `{node}` ({state}) had a shared input (state, weight, membership or \
                 partition map) {since_ms} ms ago that may move this placement; it is refused until every \
                 process has seen the change (transaction.settle = {settle_ms} ms), so no two processes \
                 place it apart; retry"
            ),
            Error::StrictUnconfirmed { node, state, cause } => write!(
                f,
                "strict transaction affinity: owning node `{node}` is {state} ({}) in this process's view only; \
                 processes that got no event about it still place its transactions there, so a new one it owns \
                 is refused rather than split until a shared input (a FAN event, a versioned operator call) \
                 confirms the state \
                 (transaction.settle = 0 when this process places its gtrids alone); retry",
                cause.as_str()
            ),
            Error::PreparedNodeUnavailable { node, state } => write!(
                f,
                "prepared transaction branch is owned by node `{node}`, which is {state}; \
                 prepared branches never move, retry when it is back"
            ),
            Error::UnknownTransaction(g) => write!(f, "unknown transaction id {g}"),
            Error::EventParse(m) => write!(f, "cannot parse event: {m}"),
            Error::ForeignEvent(m) => write!(f, "event is not for this cluster: {m}"),
            Error::UnknownLease(t) => write!(f, "lease {t} is not open (already released, or not from this cluster)"),
            Error::FeedUnavailable(m) => write!(
                f,
                "the topology feed did not take the change, so no process has it (this one neither): {m}; \
                 retry, or use racaffinity-feed once etcd answers"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand for results of the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
