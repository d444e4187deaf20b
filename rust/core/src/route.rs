//! What a routing call returns.

use crate::node::NodeId;

/// How a node was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// No affinity applied: the load-balancing policy chose.
    Balanced,
    /// An existing affinity (pin, transaction, session, partition) was honoured.
    Affinity,
    /// A new affinity was created on this node.
    Placed,
    /// The affinity's node was unavailable and the scope is soft: moved here.
    Repinned,
    /// Data affinity's owner was unavailable: load balancing chose instead.
    Fallback,
    /// No node was available; the panic policy `try_all` chose one anyway.
    Panic,
}

impl RouteKind {
    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            RouteKind::Balanced => "balanced",
            RouteKind::Affinity => "affinity",
            RouteKind::Placed => "placed",
            RouteKind::Repinned => "repinned",
            RouteKind::Fallback => "fallback",
            RouteKind::Panic => "panic",
        }
    }
}

/// The node a unit of work goes to, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The chosen node.
    pub node: NodeId,
    /// How it was chosen.
    pub kind: RouteKind,
}

impl Route {
    /// A route to `node` chosen `kind`-wise (for hosts that route explicitly).
    pub const fn new(node: NodeId, kind: RouteKind) -> Route {
        Route { node, kind }
    }
}
