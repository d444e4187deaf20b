//! Leases: a routed unit of work in flight on a node. Releasing one with an
//! outcome feeds `least_outstanding` balancing and passive health.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cluster::Cluster;
use crate::epoch::{
    HOST_LEASE_BEGIN, HOST_LEASE_END_NEUTRAL, HOST_LEASE_END_OK, HOST_LEASE_IN_FLIGHT_BITS, HOST_LEASE_STRIPES,
};
use crate::error::{Error, Result};
use crate::node::{NodeId, OutcomeSource};
use crate::route::{Route, RouteKind};
use crate::sharded::Sharded;

/// Host leases a Rust thread keeps in flight on one word (stripe and node)
/// before its pinned acquires lease through the counters instead: a lease
/// leaked with `mem::forget` never ends, and the word's in-flight bits
/// (2^24) must never carry into its success bits.
const HOST_LEASE_CAP: u64 = 1 << 20;
const IN_FLIGHT_MASK: u64 = (1 << HOST_LEASE_IN_FLIGHT_BITS) - 1;

/// Names an open lease for hosts that keep leases as plain values (C
/// structs, Java longs): the core remembers which tokens are open, so a
/// second release of a copied lease is an error instead of corrupting the
/// in-flight count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub u64);

pub(crate) struct LeaseRegistry {
    open: Sharded<u64, NodeId>,
    next: AtomicU64,
}

impl LeaseRegistry {
    pub fn new() -> Self {
        LeaseRegistry { open: Sharded::new(), next: AtomicU64::new(1) }
    }
    /// Forgets every open lease; returns their nodes.
    pub fn clear(&self) -> Vec<NodeId> {
        self.open.drain()
    }
}

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
    /// A pinned acquire's host lease (see [`crate::RoutingEpoch`]): the
    /// word it began on and the routing epoch read before it began.
    host: Option<(&'c AtomicU64, u64)>,
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
    // Inlined with `acquire()`, the lease stays in registers: as a value in
    // memory it was written field by field and read back as a whole by the
    // move into `release`, a store-forwarding stall that cost more than its
    // two atomic adds (16 ns against 4 ns).
    #[inline]
    pub fn release(mut self, outcome: Outcome) {
        self.released = true;
        self.end(outcome);
    }

    #[inline]
    fn end(&self, outcome: Outcome) {
        let Some((word, epoch)) = self.host else {
            self.cluster.end_lease(self.route.node, outcome);
            return;
        };
        // The host lease rules: in the word while the epoch read before the
        // lease began holds and the outcome is no failure; otherwise the
        // node may have changed state meanwhile, and the core hears the
        // outcome (an ejection's stale leases, a trial, a failure's count).
        if outcome != Outcome::Failed && self.cluster.routing_epoch() == epoch {
            let add = if outcome == Outcome::Ok { HOST_LEASE_END_OK } else { HOST_LEASE_END_NEUTRAL };
            word.fetch_add(add, Ordering::AcqRel);
        } else {
            word.fetch_add(HOST_LEASE_END_NEUTRAL, Ordering::AcqRel);
            let _ = self.cluster.end_host_lease(self.route.node, outcome);
        }
    }
}

impl Drop for Lease<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.released {
            self.end(Outcome::Neutral);
        }
    }
}

impl Cluster {
    /// Turns a route into a tracked lease.
    #[inline]
    pub fn lease(&self, route: Route) -> Lease<'_> {
        self.begin_lease(route.node);
        Lease { cluster: self, route, released: false, host: None }
    }

    /// [`Cluster::pick`] and lease the result.
    ///
    /// On a pinned thread whose pin is served by `pick()`'s fast path, the
    /// lease is a host lease on the routing epoch page, as Java and Python
    /// make theirs: one atomic add to begin and one to end `Ok` on a word of
    /// the thread's stripe, no topology snapshot and no shared counter; the
    /// core reads those words wherever it reads a node's leases in flight
    /// and collects their successes before it counts a failure.
    #[inline]
    pub fn acquire(&self) -> Result<Lease<'_>> {
        if let Some((node, epoch)) = self.pick_last_pin() {
            let route = Route::new(node, RouteKind::Affinity);
            // Stripes 1.. only: Python writes stripe 0 without atomic
            // instructions, under its GIL (a cluster is a host's alone, so
            // this is a second line of defence).
            let stripe = 1 + crate::counter::stripe() % (HOST_LEASE_STRIPES - 1);
            if let Some(word) = self.inner.routing.host_lease_word(stripe, node.0) {
                // The cap is checked on the add's own answer: a load before the
                // add cost about 3 ns a lease ([fast-paths-2]). Past the cap the
                // add is undone, so a word overshoots it by at most the threads
                // racing on it, far below the 2^24 in-flight bits.
                if word.fetch_add(HOST_LEASE_BEGIN, Ordering::AcqRel) & IN_FLIGHT_MASK < HOST_LEASE_CAP {
                    return Ok(Lease { cluster: self, route, released: false, host: Some((word, epoch)) });
                }
                word.fetch_sub(HOST_LEASE_BEGIN, Ordering::AcqRel);
            }
            return Ok(self.lease(route));
        }
        Ok(self.lease(self.pick()?))
    }

    /// Opens a lease on `node` and returns its token; close it exactly once
    /// with [`Cluster::close_lease`].
    pub fn open_lease(&self, node: NodeId) -> Result<LeaseToken> {
        match self.topo().node(node) {
            Some(n) if !n.is_removed() => {}
            _ => return Err(Error::UnknownNode(format!("#{}", node.0))),
        }
        Ok(self.open_picked_lease(node))
    }

    /// [`Cluster::open_lease`] of a node a routing call of this cluster just
    /// returned (a pick, a request's route), for hosts that lease in a
    /// second step: a removal in between still leaves a lease to close, as
    /// a lease begun just before the removal would.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] for an id the cluster never had.
    pub fn open_routed_lease(&self, node: NodeId) -> Result<LeaseToken> {
        if self.topo().node(node).is_none() {
            return Err(Error::UnknownNode(format!("#{}", node.0)));
        }
        Ok(self.open_picked_lease(node))
    }

    /// [`Cluster::open_lease`] of a node the core itself just picked: a
    /// removal in between still leaves a lease to close, as a lease begun
    /// just before the removal would.
    pub(crate) fn open_picked_lease(&self, node: NodeId) -> LeaseToken {
        let reg = &self.inner.leases;
        let token = reg.next.fetch_add(1, Ordering::Relaxed);
        reg.open.lock(&token).insert(token, node);
        self.begin_lease(node);
        LeaseToken(token)
    }

    /// Closes a lease opened with [`Cluster::open_lease`]; a token that is not
    /// open (already closed, or never issued here) is [`Error::UnknownLease`]
    /// and changes nothing.
    pub fn close_lease(&self, token: LeaseToken, outcome: Outcome) -> Result<NodeId> {
        let node = self.inner.leases.open.lock(&token.0).remove(&token.0).ok_or(Error::UnknownLease(token.0))?;
        self.end_lease(node, outcome);
        Ok(node)
    }

    /// Leases currently open through [`Cluster::open_lease`].
    pub fn open_lease_count(&self) -> usize {
        self.inner.leases.open.len()
    }

    /// Counts one more unit in flight on `node` without a token. Untracked:
    /// nothing stops a double [`Cluster::end_lease`]; hosts that hand leases
    /// to foreign code should use [`Cluster::open_lease`] instead.
    pub fn begin_lease(&self, node: NodeId) {
        if let Some(n) = self.topo().node(node) {
            n.counters.in_flight.add_signed(1);
        }
    }

    /// Ends an untracked lease begun with [`Cluster::begin_lease`]. An id
    /// the cluster never had is ignored; see [`Cluster::try_end_lease`].
    pub fn end_lease(&self, node: NodeId, outcome: Outcome) {
        let _ = self.try_end_lease(node, outcome);
    }

    /// [`Cluster::end_lease`] for a host that passes ids across a boundary
    /// and must hear about one the cluster never had.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] for an id the cluster never had; nothing is
    /// counted then.
    pub fn try_end_lease(&self, node: NodeId, outcome: Outcome) -> Result<()> {
        let topo = self.topo();
        let n = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
        n.counters.in_flight.add_signed(-1);
        self.lease_outcome(n, outcome);
        Ok(())
    }

    /// Reports the outcome of a host lease (see [`crate::RoutingEpoch`]) that
    /// the host could not end in its own memory: a failure, or any end after
    /// the routing epoch moved (the node may have been ejected meanwhile,
    /// and its state change must see the outcome). The host has already
    /// taken the lease off its word, with `HOST_LEASE_END_NEUTRAL`.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] for an id the cluster never had.
    pub fn end_host_lease(&self, node: NodeId, outcome: Outcome) -> Result<()> {
        let topo = self.topo();
        let n = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
        self.lease_outcome(n, outcome);
        Ok(())
    }

    fn lease_outcome(&self, n: &crate::node::Node, outcome: Outcome) {
        let ok = match outcome {
            Outcome::Ok => true,
            Outcome::Failed => false,
            // No verdict on the node, but a lease that was in flight at an
            // ejection has ended all the same.
            Outcome::Neutral => {
                n.lease_ended_neutral();
                return;
            }
        };
        n.record_outcome(ok, OutcomeSource::Lease, self.clock(), self.health());
    }
}
