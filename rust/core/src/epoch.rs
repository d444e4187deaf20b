//! The routing epoch: one word that moves on every change that could alter
//! any route, so a host can serve a pinned route from its own cache and ask
//! the core only when the word moved.
//!
//! A host caches `(context, node, epoch)` after a route the core called
//! cacheable ([`Cluster::pick_in_cacheable`]), reading the epoch *before* the
//! call. Later it serves the cached node while the word still equals the
//! cached epoch. Every change is published before the word advances (the
//! change's stores, then a `fetch_add` with release ordering), so a reader
//! whose acquire load returns the old epoch began its route before the change
//! finished: the cached answer is one the core could have given at that time.
//!
//! The page is reference-counted apart from the cluster, so a host may read
//! it after the cluster closed (closing advances the word: every cached pin
//! misses and the call that follows reports the closed cluster).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cluster::Cluster;
use crate::error::{Error, Result, Scope};
use crate::node::NodeId;
use crate::pin::ContextKey;
use crate::route::{Route, RouteKind};

/// The shared page: the epoch word first, at offset 0, alone on its cache
/// line (writers are rare; readers on every core keep it shared and clean).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RoutingEpoch {
    word: AtomicU64,
}

impl Default for RoutingEpoch {
    fn default() -> Self {
        // Starts at 1, so a host may keep 0 as "nothing cached".
        RoutingEpoch { word: AtomicU64::new(1) }
    }
}

impl RoutingEpoch {
    /// The current epoch (acquire: what the change published is visible).
    #[inline]
    pub fn load(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Called after a change is published, never before.
    #[inline]
    pub(crate) fn advance(&self) {
        self.word.fetch_add(1, Ordering::AcqRel);
    }

    /// The word's address, for hosts that map the page (the FFI hands it out
    /// next to a strong reference that keeps it valid).
    pub fn word_ptr(&self) -> *const u64 {
        self.word.as_ptr().cast_const()
    }
}

impl Cluster {
    /// The routing epoch now. See [`RoutingEpoch`].
    #[inline]
    pub fn routing_epoch(&self) -> u64 {
        self.inner.routing.load()
    }

    /// The page holding the routing epoch; it outlives the cluster for as
    /// long as the caller holds it.
    pub fn routing_epoch_page(&self) -> std::sync::Arc<RoutingEpoch> {
        self.inner.routing.clone()
    }

    /// [`Cluster::pick_in`], and whether a host may serve this answer again
    /// for `key` while [`Cluster::routing_epoch`] still equals the value it
    /// read *before* this call, and `key`'s pin is not changed by the host
    /// (pin, unpin, release). Only a pin on an `Up` node is cacheable: a
    /// draining node's pin ends by the clock (its drain timeout), which moves
    /// no epoch.
    pub fn pick_in_cacheable(&self, key: ContextKey) -> Result<(Route, bool)> {
        let r = self.pick_in(key)?;
        let cacheable = r.kind == RouteKind::Affinity
            && !self.is_closed()
            && self.topo().node(r.node).is_some_and(|n| n.accepts_new());
        Ok((r, cacheable))
    }

    /// Counts `n` pinned-thread hits a host served from its cache on `node`,
    /// so the metrics count every route exactly as if each had crossed.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] for an id the cluster never had (a removed
    /// node's id still counts: its hits were served before the removal).
    pub fn count_host_hits(&self, node: NodeId, n: u64) -> Result<()> {
        let topo = self.topo();
        let node = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
        if n > 0 {
            node.counters.affinity_hits.add(n);
            self.inner.scope[Scope::Thread as usize].hits.add(n);
        }
        Ok(())
    }
}
