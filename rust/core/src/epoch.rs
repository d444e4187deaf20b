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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::cluster::Cluster;
use crate::error::{Error, Result, Scope};
use crate::lease::LeaseToken;
use crate::node::NodeId;
use crate::pin::ContextKey;
use crate::route::{Route, RouteKind};

/// Stripes of the host lease table: a host picks one per thread, so threads
/// pinned to one node do not all bounce one cache line.
pub const HOST_LEASE_STRIPES: usize = 8;
/// Nodes the host lease table covers (ids `0..HOST_LEASE_NODES`); a host
/// leases a node with a higher id through the library.
pub const HOST_LEASE_NODES: usize = 256;
/// Byte offset of the host lease table from the epoch word.
pub const HOST_LEASE_OFFSET: usize = 64;
/// Bits of a host lease word that count leases in flight; the bits above
/// count leases that ended `Ok` since the core last collected them.
pub const HOST_LEASE_IN_FLIGHT_BITS: u32 = 24;
const IN_FLIGHT_MASK: u64 = (1 << HOST_LEASE_IN_FLIGHT_BITS) - 1;
/// What a host adds to its lease word to begin a lease.
pub const HOST_LEASE_BEGIN: u64 = 1;
/// What a host adds to end a lease `Ok`: one fewer in flight and one more
/// success, in a single atomic add (the borrow from the success bits cannot
/// happen: the word holds this lease's own begin).
pub const HOST_LEASE_END_OK: u64 = (1 << HOST_LEASE_IN_FLIGHT_BITS) - 1;
/// What a host adds to end a lease without a verdict (two's complement -1).
pub const HOST_LEASE_END_NEUTRAL: u64 = u64::MAX;

/// The shared page: the epoch word first, at offset 0, alone on its cache
/// line (writers are rare; readers on every core keep it shared and clean);
/// then, at [`HOST_LEASE_OFFSET`], the host lease table: one word per
/// (stripe, node), stripe-major, so a stripe's words share lines and two
/// stripes never do.
///
/// A host lease lets a host serve `pick` + `release` for a cached pinned
/// route with one atomic add each and no call into the library: the core
/// reads the in-flight bits wherever it reads a node's leases in flight
/// (balancing, the ejection's count of stale leases, metrics), and collects
/// the `Ok` bits (successes, and the reset of the consecutive-failure count)
/// before it counts a failure or reports metrics. The core only reads the
/// words: a host whose writers are serialized otherwise (Python's GIL) may
/// update them without atomic instructions. A lease must end on the
/// word it began on, with [`HOST_LEASE_END_OK`] or [`HOST_LEASE_END_NEUTRAL`]
/// while the epoch still holds the value read before it began; otherwise
/// (a failure, or the epoch moved) the host adds [`HOST_LEASE_END_NEUTRAL`]
/// and reports the outcome with [`Cluster::end_host_lease`], so a node's
/// state change sees every outcome it must.
#[repr(C, align(64))]
pub struct RoutingEpoch {
    word: AtomicU64,
    // Keeps the epoch's line free of lease traffic.
    _line: [u64; 7],
    host_leases: [AtomicU64; HOST_LEASE_STRIPES * HOST_LEASE_NODES],
    /// The core's own: per host lease word, the `Ok` count it collected up
    /// to. The core never writes a host's words, so a host may change them
    /// with a plain read-modify-write where nothing else writes them (Python
    /// under its GIL), and a collection can never lose or repeat a count.
    oks_seen: [AtomicU64; HOST_LEASE_STRIPES * HOST_LEASE_NODES],
    /// Set once the page was handed to a host: until then no host can have
    /// written a lease word, and a node's leases in flight are the library's
    /// alone. Balancing reads in-flight counts of every candidate on every
    /// pick; the table would add 8 cache lines to each.
    handed_out: AtomicBool,
}

impl Default for RoutingEpoch {
    fn default() -> Self {
        // Starts at 1, so a host may keep 0 as "nothing cached".
        RoutingEpoch {
            word: AtomicU64::new(1),
            _line: [0; 7],
            // Const repeats compile to one zeroing of the page; `from_fn`
            // stored 4,096 words one by one (a tenth of a cluster's creation).
            host_leases: [const { AtomicU64::new(0) }; HOST_LEASE_STRIPES * HOST_LEASE_NODES],
            oks_seen: [const { AtomicU64::new(0) }; HOST_LEASE_STRIPES * HOST_LEASE_NODES],
            handed_out: AtomicBool::new(false),
        }
    }
}

impl std::fmt::Debug for RoutingEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutingEpoch").field("word", &self.word).finish_non_exhaustive()
    }
}

// The layout hosts map, checked at compile time.
const _: () = assert!(std::mem::offset_of!(RoutingEpoch, host_leases) == HOST_LEASE_OFFSET);

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

    /// Size of the page from the epoch word, for hosts that map it: the
    /// word and the host lease table.
    pub const fn page_len() -> usize {
        HOST_LEASE_OFFSET + HOST_LEASE_STRIPES * HOST_LEASE_NODES * 8
    }

    /// The table's words of `node`; none while no host holds the page (a
    /// host's first lease comes after it got the page, so it is seen).
    fn host_indexes(&self, node: u32) -> impl Iterator<Item = usize> {
        let n = node as usize;
        let used = n < HOST_LEASE_NODES && self.handed_out.load(Ordering::Acquire);
        (0..HOST_LEASE_STRIPES).filter(move |_| used).map(move |s| s * HOST_LEASE_NODES + n)
    }

    /// Records that a host may now write the host lease table.
    fn hand_out(&self) {
        if !self.handed_out.load(Ordering::Relaxed) {
            self.handed_out.store(true, Ordering::Release);
        }
    }

    /// Host leases in flight on `node`.
    #[inline]
    pub(crate) fn host_in_flight(&self, node: u32) -> i64 {
        self.host_indexes(node).map(|i| (self.host_leases[i].load(Ordering::Relaxed) & IN_FLIGHT_MASK) as i64).sum()
    }

    /// The `Ok` ends hosts counted on `node` since the last call. The count
    /// bits wrap: a collection sees any number of ends below 2^39 since the
    /// one before it.
    pub(crate) fn collect_host_oks(&self, node: u32) -> u64 {
        const OK_MASK: u64 = u64::MAX >> HOST_LEASE_IN_FLIGHT_BITS;
        self.host_indexes(node)
            .map(|i| {
                let now = self.host_leases[i].load(Ordering::Acquire) >> HOST_LEASE_IN_FLIGHT_BITS;
                let seen = &self.oks_seen[i];
                let mut before = seen.load(Ordering::Relaxed);
                loop {
                    let delta = now.wrapping_sub(before) & OK_MASK;
                    // Zero, or "behind": another collection read the word later and took more.
                    if delta == 0 || delta > OK_MASK / 2 {
                        return 0;
                    }
                    match seen.compare_exchange_weak(before, now, Ordering::AcqRel, Ordering::Relaxed) {
                        Ok(_) => return delta,
                        Err(b) => before = b,
                    }
                }
            })
            .sum()
    }

    /// A host lease word, for a host in the same address space (Rust hosts,
    /// tests and the FFI); `None` for a node the table does not cover.
    pub fn host_lease_word(&self, stripe: usize, node: u32) -> Option<&AtomicU64> {
        self.hand_out();
        let n = node as usize;
        (n < HOST_LEASE_NODES).then(|| &self.host_leases[(stripe % HOST_LEASE_STRIPES) * HOST_LEASE_NODES + n])
    }
}

/// Who leased the answer of [`Cluster::pick_in_host_leased`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostLeased {
    /// A host lease on the word of the stripe asked for: end it on the page.
    Host,
    /// The library: the node is not `Up`, or past the host lease table.
    No,
    /// The library, because the word already held `cap` leases in flight.
    OverCap,
}

/// Whether a host may lease `r` itself: a route it may cache, on a node
/// the host lease table covers.
fn host_may_lease(r: Route, cacheable: bool) -> bool {
    cacheable && (r.node.0 as usize) < HOST_LEASE_NODES
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
        self.inner.routing.hand_out();
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

    /// [`Cluster::pick_in_cacheable`] for a host that leases cached routes
    /// itself: when the answer is cacheable and its node has a host lease
    /// word, the core leases nothing and returns true (the host begins a
    /// host lease, see [`RoutingEpoch`]); otherwise the core leases the node
    /// as [`Cluster::pick_in`] + [`Cluster::begin_lease`] would, and returns
    /// false.
    pub fn pick_in_host_leasable(&self, key: ContextKey) -> Result<(Route, bool)> {
        let (r, cacheable) = self.pick_in_cacheable(key)?;
        let host = host_may_lease(r, cacheable);
        if !host {
            self.begin_lease(r.node);
        }
        Ok((r, host))
    }

    /// [`Cluster::pick_in_cacheable`] for a host that ends its leases on the
    /// page itself whatever the route (Java's unpinned borrow): when the
    /// answer's node is `Up` and has a word in the host lease table, the core
    /// begins a host lease on the word of `stripe` (an atomic add, so the
    /// host must update its stripe with atomic instructions too) before it
    /// returns, and the host ends it as [`RoutingEpoch`] says, against the
    /// epoch it read *before* this call. Otherwise, or once the word holds
    /// `cap` leases in flight (a host whose dropped leases are never ended
    /// bounds them so), the core leases the node as [`Cluster::pick_in`] +
    /// [`Cluster::begin_lease`] would.
    ///
    /// Only an `Up` node is host-leased, as only a pin on one is cacheable:
    /// a node in any other state (a half-open trial, a drain) must see each
    /// outcome when it happens, which an `Ok` kept in a word is not.
    pub fn pick_in_host_leased(&self, key: ContextKey, stripe: usize, cap: u64) -> Result<(Route, bool, HostLeased)> {
        let (r, up) = match self.context_route_or_unpinned(key, false, Scope::Thread)? {
            // One topology read for both answers (pick_in_cacheable's rule).
            Some(r) => (r, !self.is_closed() && self.topo().node(r.node).is_some_and(|n| n.accepts_new())),
            // Unpinned (the path of every borrow that does not pin): the
            // pick answers the question, with no snapshot load.
            None => {
                let (r, up) = self.pick_balanced_up()?;
                (r, up && !self.is_closed())
            }
        };
        let cacheable = up && r.kind == RouteKind::Affinity;
        if up {
            if let Some(word) = self.inner.routing.host_lease_word(stripe, r.node.0) {
                if word.load(Ordering::Relaxed) & IN_FLIGHT_MASK < cap {
                    word.fetch_add(HOST_LEASE_BEGIN, Ordering::AcqRel);
                    return Ok((r, cacheable, HostLeased::Host));
                }
                self.begin_lease(r.node);
                return Ok((r, cacheable, HostLeased::OverCap));
            }
        }
        self.begin_lease(r.node);
        Ok((r, cacheable, HostLeased::No))
    }

    /// The unpinned pick of [`Cluster::pick_in_host_leased`] (balancing,
    /// whatever `thread_auto_pin` says) for a host that writes its lease
    /// words with plain read-modify-writes (Python under its GIL): the core
    /// cannot begin a host lease for it, since its atomic add, made while
    /// such a host's other thread is between the read and the write of its
    /// `+=`, would be lost. So when the picked node is `Up` and has a word
    /// in the host lease table, the core leases nothing and returns `None`:
    /// the host begins a host lease on that node at once (until it does,
    /// balancing does not count it, as after
    /// [`Cluster::pick_in_host_leasable`]) and ends it as [`RoutingEpoch`]
    /// says, against the epoch it read *before* this call. Otherwise (a
    /// half-open trial, a panic pick onto a node that is not `Up`, a node
    /// past the table) it returns the token of the lease the core opened,
    /// which [`Cluster::close_lease`] ends exactly once.
    pub fn pick_balanced_host_begins(&self) -> Result<(Route, Option<LeaseToken>)> {
        let (r, up) = self.pick_balanced_up()?;
        if up && !self.is_closed() && (r.node.0 as usize) < HOST_LEASE_NODES {
            return Ok((r, None));
        }
        Ok((r, Some(self.open_picked_lease(r.node))))
    }

    /// [`Cluster::pick_in_host_leasable`] for a host that ends the library's
    /// leases by token (C, Python): `None` when the host leases the route
    /// itself and the core leased nothing; else the token of the lease the
    /// core opened, which [`Cluster::close_lease`] ends exactly once (a
    /// second close is refused, so a host cannot count one lease twice).
    pub fn pick_in_host_or_open_lease(&self, key: ContextKey) -> Result<(Route, Option<LeaseToken>)> {
        let (r, cacheable) = self.pick_in_cacheable(key)?;
        if host_may_lease(r, cacheable) {
            return Ok((r, None));
        }
        Ok((r, Some(self.open_picked_lease(r.node))))
    }

    /// Counts `n` thread-scope hits a host served from its cache on `node`:
    /// [`Cluster::count_host_hits_for`] with [`Scope::Thread`], the scope of
    /// a thread pin and of a context pinned with [`Cluster::pin_context`].
    ///
    /// # Errors
    /// As [`Cluster::count_host_hits_for`].
    pub fn count_host_hits(&self, node: NodeId, n: u64) -> Result<()> {
        self.count_host_hits_for(node, Scope::Thread, n)
    }

    /// Counts `n` hits a host served from its cache for a context pinned on
    /// `node` with the rules of `scope`, so the metrics count every route
    /// exactly as if each had crossed: the node's picks and affinity hits,
    /// and `scope`'s hits, where the core counts that context's own answers
    /// (its pin keeps the scope it was made with, [`Cluster::pin_context_for`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for [`Scope::Data`], whose rules no context
    /// pin follows; [`Error::UnknownNode`] for an id the cluster never had (a
    /// removed node's id still counts: its hits were served before the
    /// removal). Nothing is counted on an error.
    pub fn count_host_hits_for(&self, node: NodeId, scope: Scope, n: u64) -> Result<()> {
        if scope == Scope::Data {
            return Err(Error::InvalidArgument(
                "a context pin follows the thread, transaction or session rules, so its hits are counted there".into(),
            ));
        }
        let topo = self.topo();
        let node = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
        if n > 0 {
            node.counters.affinity_hits.add(n);
            self.inner.scope[scope as usize].hits.add(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const NODE: u32 = 5;

    fn word(page: &RoutingEpoch) -> &AtomicU64 {
        page.host_lease_word(2, NODE).unwrap()
    }

    #[test]
    fn ok_counts_that_wrap_past_the_top_of_the_word_are_counted_exactly() {
        let page = RoutingEpoch::default();
        let i = 2 * HOST_LEASE_NODES + NODE as usize;
        // As if 2^40 - 3 leases had ended OK on this word and been counted.
        let near_top = (1u64 << 40) - 3;
        page.host_leases[i].store(near_top << HOST_LEASE_IN_FLIGHT_BITS, Ordering::Relaxed);
        page.oks_seen[i].store(near_top, Ordering::Relaxed);
        for _ in 0..7 {
            word(&page).fetch_add(HOST_LEASE_BEGIN, Ordering::AcqRel);
            word(&page).fetch_add(HOST_LEASE_END_OK, Ordering::AcqRel);
        }
        assert_eq!(page.host_in_flight(NODE), 0);
        assert_eq!(page.collect_host_oks(NODE), 7, "the count wrapped from 2^40 - 3 to 4");
        assert_eq!(page.collect_host_oks(NODE), 0, "each end is counted once");
    }

    #[test]
    fn concurrent_collections_count_each_ok_once() {
        let page = Arc::new(RoutingEpoch::default());
        let per_host = 50_000u64;
        let hosts: Vec<_> = (0..2)
            .map(|_| {
                let page = page.clone();
                std::thread::spawn(move || {
                    for _ in 0..per_host {
                        word(&page).fetch_add(HOST_LEASE_BEGIN, Ordering::AcqRel);
                        word(&page).fetch_add(HOST_LEASE_END_OK, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        let collectors: Vec<_> = (0..2)
            .map(|_| {
                let page = page.clone();
                std::thread::spawn(move || (0..20_000).map(|_| page.collect_host_oks(NODE)).sum::<u64>())
            })
            .collect();
        for h in hosts {
            h.join().unwrap();
        }
        let collected: u64 =
            collectors.into_iter().map(|c| c.join().unwrap()).sum::<u64>() + page.collect_host_oks(NODE);
        assert_eq!(collected, 2 * per_host);
        assert_eq!(page.host_in_flight(NODE), 0);
    }
}
