//! Leases: a routed unit of work in flight on a node. Releasing one with an
//! outcome feeds `least_outstanding` balancing and passive health.

use crate::cluster::Cluster;
use crate::error::Result;
use crate::node::NodeId;
use crate::route::Route;

/// How a leased unit of work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Completed; resets the node's consecutive-failure count.
    Ok,
    /// Failed with a node-level error (connection refused, instance gone).
    Failed,
    /// Ended without a verdict on the node (e.g. an application error).
    Neutral,
}

/// A unit of work in flight on a node; released on drop as [`Outcome::Neutral`].
#[must_use = "dropping a lease releases it at once"]
#[derive(Debug)]
pub struct Lease<'c> {
    cluster: &'c Cluster,
    route: Route,
    released: bool,
}

impl Lease<'_> {
    /// The node.
    pub fn node(&self) -> NodeId {
        self.route.node
    }
    /// How the node was chosen.
    pub fn route(&self) -> Route {
        self.route
    }
    /// Releases with an outcome.
    pub fn release(mut self, outcome: Outcome) {
        self.released = true;
        self.cluster.end_lease(self.route.node, outcome);
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if !self.released {
            self.cluster.end_lease(self.route.node, Outcome::Neutral);
        }
    }
}

impl Cluster {
    /// Turns a route into a tracked lease.
    pub fn lease(&self, route: Route) -> Lease<'_> {
        self.begin_lease(route.node);
        Lease { cluster: self, route, released: false }
    }

    /// [`Cluster::pick`] and lease the result.
    pub fn acquire(&self) -> Result<Lease<'_>> {
        Ok(self.lease(self.pick()?))
    }

    /// Counts one more unit in flight on `node`. For bindings that keep
    /// leases as plain values; pair with [`Cluster::end_lease`].
    pub fn begin_lease(&self, node: NodeId) {
        if let Some(n) = self.topo().node(node) {
            n.counters.in_flight.add_signed(1);
        }
    }

    /// Ends a lease begun with [`Cluster::begin_lease`].
    pub fn end_lease(&self, node: NodeId, outcome: Outcome) {
        let topo = self.topo();
        let Some(n) = topo.node(node) else { return };
        n.counters.in_flight.add_signed(-1);
        match outcome {
            Outcome::Ok => {
                n.record_success();
            }
            Outcome::Failed => {
                n.record_failure(self.clock(), self.health());
            }
            Outcome::Neutral => {}
        }
    }
}
