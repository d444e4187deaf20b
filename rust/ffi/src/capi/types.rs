//! Plain C value types shared by the call modules.

//! Enum *parameters* cross the boundary as `uint32_t` and are checked here: a
//! C caller can pass any integer, and an out-of-range Rust enum is undefined
//! behaviour. Enums the library *writes* use the enum types.

use racaffinity_core::{NodeId, NodeState, Outcome, Route, RouteKind, Scope};

use super::result::{racaffinity_result, Failure};

/// How a node was chosen (mirrors the core's `RouteKind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_route_kind {
    /// The load-balancing policy chose.
    Balanced = 0,
    /// An existing affinity was honoured.
    Affinity = 1,
    /// A new affinity was created.
    Placed = 2,
    /// The affinity moved off an unavailable node.
    Repinned = 3,
    /// Data affinity fell back to load balancing.
    Fallback = 4,
    /// The panic policy chose among unavailable nodes.
    Panic = 5,
}

/// A routing decision: node id (dense, in config order) and how it was chosen.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct racaffinity_route {
    /// Node id: index of the node in config order (added nodes follow).
    pub node: u32,
    /// How the node was chosen.
    pub kind: racaffinity_route_kind,
}

/// A unit of work in flight on a node. Release it exactly once with
/// `racaffinity_lease_release`; the library remembers open leases, so a
/// second release (even of a copy) is INVALID_LEASE.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct racaffinity_lease {
    /// Node id.
    pub node: u32,
    /// How the node was chosen.
    pub kind: racaffinity_route_kind,
    /// Private: the issuing cluster handle.
    pub owner: u64,
    /// Private: the lease's token in the issuing cluster.
    pub token: u64,
}

/// Node state.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_node_state {
    /// Takes new work.
    Up = 0,
    /// Planned maintenance: no new affinities.
    Draining = 1,
    /// Takes no picks.
    Down = 2,
}

/// What the nodes are to each other (`recovery.scope`), which decides how
/// in-doubt transactions are recovered.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_recovery_scope {
    /// Independent databases: scan every node, complete each id where it was found.
    Node = 0,
    /// Instances of one database (RAC): any answering instance lists and completes every id.
    Database = 1,
}

/// How a leased unit of work ended.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_outcome {
    /// Completed.
    Ok = 0,
    /// Failed with a node-level error.
    Failed = 1,
    /// Ended without a verdict on the node.
    Neutral = 2,
}

/// Affinity scope.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum racaffinity_scope {
    /// Thread / context pins.
    Thread = 0,
    /// XA transactions.
    Transaction = 1,
    /// Web sessions.
    Session = 2,
    /// Data keys.
    Data = 3,
}

impl From<Route> for racaffinity_route {
    #[inline]
    fn from(r: Route) -> Self {
        let kind = match r.kind {
            RouteKind::Balanced => racaffinity_route_kind::Balanced,
            RouteKind::Affinity => racaffinity_route_kind::Affinity,
            RouteKind::Placed => racaffinity_route_kind::Placed,
            RouteKind::Repinned => racaffinity_route_kind::Repinned,
            RouteKind::Fallback => racaffinity_route_kind::Fallback,
            RouteKind::Panic => racaffinity_route_kind::Panic,
        };
        racaffinity_route { node: r.node.0, kind }
    }
}

impl From<NodeState> for racaffinity_node_state {
    fn from(s: NodeState) -> Self {
        match s {
            NodeState::Up => racaffinity_node_state::Up,
            NodeState::Draining => racaffinity_node_state::Draining,
            NodeState::Down => racaffinity_node_state::Down,
        }
    }
}

fn bad_enum(what: &str, v: u32) -> Failure {
    Failure::new(racaffinity_result::InvalidArgument, format!("{v} is not a valid {what}"))
}

/// A `racaffinity_node_state` parameter.
pub(crate) fn node_state_arg(v: u32) -> Result<NodeState, Failure> {
    match v {
        0 => Ok(NodeState::Up),
        1 => Ok(NodeState::Draining),
        2 => Ok(NodeState::Down),
        _ => Err(bad_enum("racaffinity_node_state", v)),
    }
}

/// A `racaffinity_outcome` parameter.
pub(crate) fn outcome_arg(v: u32) -> Result<Outcome, Failure> {
    match v {
        0 => Ok(Outcome::Ok),
        1 => Ok(Outcome::Failed),
        2 => Ok(Outcome::Neutral),
        _ => Err(bad_enum("racaffinity_outcome", v)),
    }
}

/// A `racaffinity_scope` parameter.
pub(crate) fn scope_arg(v: u32) -> Result<Scope, Failure> {
    match v {
        0 => Ok(Scope::Thread),
        1 => Ok(Scope::Transaction),
        2 => Ok(Scope::Session),
        3 => Ok(Scope::Data),
        _ => Err(bad_enum("racaffinity_scope", v)),
    }
}

pub(crate) fn node_id(n: u32) -> NodeId {
    NodeId(n)
}
