//! Per-thread hit tallies of thread pins.
//!
//! A healthy thread pin's `pick()` is the most frequent call of a pinned
//! host, and counting its hit in a shared counter cost more than the rest of
//! the pick (one locked read-modify-write, 15–18× a `thread_local!` read
//! here). So each thread pin counts its hits in a tally only its own thread
//! writes, with a plain load and store. Metrics merge the live tallies under
//! the registry's lock; a tally folds into the shared counters under the same
//! lock when its pin moves to another node or ends (unpin, thread exit), so a
//! reader never counts a hit twice and never misses one.
//!
//! Tallies are `'static` and recycled, through the thread's own spares and
//! then a process-wide pool, so the fast path can keep a plain
//! `&'static Tally` in a `Cell` (no `RefCell`, no reference count, no
//! thread-local destructor check) without `unsafe`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::counter::StripedCounter;
use crate::node::{Node, NodeId};

/// The hits one thread pin served on its current node since it last folded.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    hits: AtomicU64,
    /// The node the hits belong to; changed only under the registry's lock.
    node: AtomicU32,
}

/// A tally registered with one cluster, and where it sits there.
#[derive(Debug)]
pub(crate) struct Registered {
    pub(crate) tally: &'static Tally,
    shard: usize,
    index: usize,
}

/// Tallies of pins that ended on threads that have exited, or that kept
/// enough spares; for the next pin of any thread and cluster.
static POOL: Mutex<Vec<&'static Tally>> = Mutex::new(Vec::new());

/// A thread's own spare tallies. A host that pins per unit of work starts
/// and ends pins as often as it routes; taking the process-wide pool's lock
/// for each would queue its threads on one lock.
struct Spares(Vec<&'static Tally>);

/// Enough for a thread pinned to a few clusters at once.
const SPARES_KEPT: usize = 4;

impl Drop for Spares {
    // At thread exit the spares go to the pool, so the tallies ever made stay
    // bounded by the pins live at once (plus a few per live thread).
    fn drop(&mut self) {
        if !self.0.is_empty() {
            pool().append(&mut self.0);
        }
    }
}

thread_local! {
    static SPARES: RefCell<Spares> = const { RefCell::new(Spares(Vec::new())) };
}

pub(crate) fn pool() -> MutexGuard<'static, Vec<&'static Tally>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

fn take() -> &'static Tally {
    // During thread exit the spares may be gone already: the pool serves.
    let spare = SPARES.try_with(|s| s.borrow_mut().0.pop()).ok().flatten();
    spare.or_else(|| pool().pop()).unwrap_or_else(|| {
        #[cfg(test)]
        MADE.fetch_add(1, Ordering::Relaxed);
        Box::leak(Box::default())
    })
}

#[cfg(test)]
static MADE: AtomicU64 = AtomicU64::new(0);

/// Gives a tally back for reuse. Its pin's thread must no longer count
/// into it (the pin cleared its fast-path copy first).
pub(crate) fn give_back(tally: &'static Tally) {
    tally.hits.store(0, Ordering::Relaxed);
    let kept = SPARES
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let keep = s.0.len() < SPARES_KEPT;
            if keep {
                s.0.push(tally);
            }
            keep
        })
        .unwrap_or(false);
    if !kept {
        pool().push(tally);
    }
}

impl Tally {
    /// Counts one hit. Only the pin's thread calls this, so a load and a
    /// store lose nothing; readers on other threads see the count without
    /// tearing (an aligned 64-bit word).
    #[inline]
    pub(crate) fn hit(&self) {
        self.hits.store(self.hits.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Slab {
    live: Vec<Option<&'static Tally>>,
    free: Vec<usize>,
}

/// The live tallies of one cluster, sharded by thread: pins begin and end
/// as often as units of work, and one lock for all threads would serialize
/// them. A reader takes every shard (in order), so its view is exact.
#[derive(Default)]
pub(crate) struct Tallies {
    shards: [Mutex<Slab>; SHARDS],
}

const SHARDS: usize = crate::counter::STRIPES;

impl std::fmt::Debug for Tallies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tallies").finish_non_exhaustive()
    }
}

/// The live tallies merged per node, with the registry locked: while it is
/// held no tally folds, so the shared counters read next to it are exact.
pub(crate) struct Merged<'a> {
    _folds_wait: Vec<MutexGuard<'a, Slab>>,
    per_node: Vec<u64>,
    total: u64,
}

impl Merged<'_> {
    /// Hits live tallies hold for `node`.
    pub(crate) fn node(&self, node: NodeId) -> u64 {
        self.per_node.get(node.0 as usize).copied().unwrap_or(0)
    }

    /// Hits all live tallies hold.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

impl Tallies {
    fn lock(&self, shard: usize) -> MutexGuard<'_, Slab> {
        self.shards[shard].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new tally for a pin on `node`.
    pub(crate) fn register(&self, node: NodeId) -> Registered {
        let tally = take();
        tally.node.store(node.0, Ordering::Relaxed);
        let shard = crate::counter::stripe();
        let mut s = self.lock(shard);
        let index = s.free.pop().unwrap_or(s.live.len());
        if index == s.live.len() {
            s.live.push(Some(tally));
        } else {
            s.live[index] = Some(tally);
        }
        Registered { tally, shard, index }
    }

    /// Moves `tally`'s hits into `node`'s and the thread scope's shared
    /// counters; then the tally counts for `next`, or leaves the registry.
    /// Called by the pin's own thread, so no hit is counted meanwhile.
    pub(crate) fn fold(&self, at: &Registered, node: &Node, scope_hits: &StripedCounter, next: Option<NodeId>) {
        let tally = at.tally;
        let mut s = self.lock(at.shard);
        let hits = tally.hits.swap(0, Ordering::Relaxed);
        if hits > 0 {
            node.counters.affinity_hits.add(hits);
            scope_hits.add(hits);
        }
        match next {
            Some(n) => tally.node.store(n.0, Ordering::Relaxed),
            None => {
                s.live[at.index] = None;
                s.free.push(at.index);
            }
        }
    }

    /// The live tallies, merged; hold the result while reading the shared
    /// counters they add to.
    pub(crate) fn merged(&self) -> Merged<'_> {
        let shards: Vec<_> = (0..SHARDS).map(|i| self.lock(i)).collect();
        let mut per_node = Vec::new();
        let mut total = 0u64;
        for t in shards.iter().flat_map(|s| s.live.iter().flatten()) {
            let (node, hits) = (t.node.load(Ordering::Relaxed) as usize, t.hits.load(Ordering::Relaxed));
            if per_node.len() <= node {
                per_node.resize(node + 1, 0);
            }
            per_node[node] += hits;
            total += hits;
        }
        Merged { _folds_wait: shards, per_node, total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_that_pin_per_unit_of_work_and_exit_reuse_the_same_few_tallies() {
        let before = MADE.load(Ordering::Relaxed);
        for _ in 0..50 {
            std::thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..100 {
                        let tally = take();
                        tally.hit();
                        give_back(tally);
                    }
                });
            });
        }
        // One per exited thread if a thread's spares were lost at its exit;
        // other tests of this binary pin concurrently, hence the margin.
        let made = MADE.load(Ordering::Relaxed) - before;
        assert!(made <= 10, "{made} tallies made for 50 threads that pinned one at a time");
    }
}
