//! The routing epoch page: lets a host serve a pinned context's route from
//! its own cache while the epoch it cached the route under is current.
//!
//! The page is reference-counted apart from the cluster: a host that maps it
//! keeps it valid until it frees it, even after `racaffinity_cluster_free`.

use std::sync::{Arc, Mutex};

use racaffinity_core::{ContextKey, RoutingEpoch};

use super::buffer::out_arg;
use super::handle::{self, racaffinity_cluster};
use super::pick;
use super::result::{guard, racaffinity_result};
use super::types::{node_id, outcome_arg, racaffinity_lease, racaffinity_route};

/// Stripes of the host lease table (see `racaffinity_cluster_host_lease_end`).
pub const RACAFFINITY_HOST_LEASE_STRIPES: usize = 8;
/// Node ids the host lease table covers: `0 .. RACAFFINITY_HOST_LEASE_NODES`.
pub const RACAFFINITY_HOST_LEASE_NODES: usize = 256;
/// Byte offset of the host lease table from the epoch word.
pub const RACAFFINITY_HOST_LEASE_OFFSET: usize = 64;
/// Low bits of a host lease word that count leases in flight.
pub const RACAFFINITY_HOST_LEASE_IN_FLIGHT_BITS: u32 = 24;
/// Added to a host lease word to begin a lease.
pub const RACAFFINITY_HOST_LEASE_BEGIN: u64 = 1;
/// Added to end a lease OK (one fewer in flight, one more success).
pub const RACAFFINITY_HOST_LEASE_END_OK: u64 = 16777215;
/// Added to end a lease without a verdict (two's complement of 1).
pub const RACAFFINITY_HOST_LEASE_END_NEUTRAL: u64 = 18446744073709551615;
const _: () = {
    assert!(RACAFFINITY_HOST_LEASE_STRIPES == racaffinity_core::HOST_LEASE_STRIPES);
    assert!(RACAFFINITY_HOST_LEASE_NODES == racaffinity_core::HOST_LEASE_NODES);
    assert!(RACAFFINITY_HOST_LEASE_OFFSET == racaffinity_core::HOST_LEASE_OFFSET);
    assert!(RACAFFINITY_HOST_LEASE_IN_FLIGHT_BITS == racaffinity_core::HOST_LEASE_IN_FLIGHT_BITS);
    assert!(RACAFFINITY_HOST_LEASE_BEGIN == racaffinity_core::HOST_LEASE_BEGIN);
    assert!(RACAFFINITY_HOST_LEASE_END_OK == racaffinity_core::HOST_LEASE_END_OK);
    assert!(RACAFFINITY_HOST_LEASE_END_NEUTRAL == racaffinity_core::HOST_LEASE_END_NEUTRAL);
};

/// Maps the cluster's routing epoch: `*out_word` points at a 64-bit word the
/// core advances (with release ordering) after every change that could alter
/// any route. Read it with acquire ordering (`__atomic_load_n(p,
/// __ATOMIC_ACQUIRE)`, `atomic_load`). The word stays readable until
/// `racaffinity_epoch_page_free(*out_word)`, whatever happens to the cluster;
/// closing the cluster advances it once more.
///
/// # Safety
/// `out_word` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_epoch_page(
    cluster: *const racaffinity_cluster,
    out_word: *mut *const u64,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out_word, "out_word") }?;
        handle::with(cluster, |c| out.set(page_into_raw(c.routing_epoch_page())))
    })
}

/// Releases a word from `racaffinity_cluster_epoch_page`; the caller must
/// not read it afterwards. Each call that returned the word holds it once
/// (one cluster's calls return the same word): free it once per call. A
/// free beyond that, NULL and a pointer that never came from
/// `racaffinity_cluster_epoch_page` are no-ops.
#[no_mangle]
pub extern "C" fn racaffinity_epoch_page_free(word: *const u64) {
    if !word.is_null() {
        page_release(word);
    }
}

/// `racaffinity_context_route` that also says whether the answer may be
/// cached: when `*out_cacheable` is true, the host may return the same route
/// for `context` while the epoch word still holds the value it read *before*
/// this call, and it has not pinned, unpinned or released `context` since.
/// Count each route served from such a cache with
/// `racaffinity_cluster_count_host_hits`, so the metrics stay exact.
///
/// # Safety
/// `out` and `out_cacheable` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_route_cacheable(
    cluster: *const racaffinity_cluster,
    context: u64,
    out: *mut racaffinity_route,
    out_cacheable: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, cacheable) = unsafe { (out_arg(out, "out")?, out_arg(out_cacheable, "out_cacheable")?) };
        handle::with(cluster, |c| {
            let (r, ok) = c.pick_in_cacheable(ContextKey(context))?;
            cacheable.set(ok)?;
            out.set(r.into())
        })
    })
}

/// `racaffinity_context_pick` for a host that leases cached routes itself
/// (see `racaffinity_cluster_host_lease_end`): the library decides whether
/// the host may, in the same call.
///
/// - `*out_host` true: the route may be cached as
///   `racaffinity_context_route_cacheable` says, and the library leased
///   nothing. Begin a host lease on the page, under the epoch read *before*
///   this call. `*out` holds the route with no token: releasing it with
///   `racaffinity_lease_release` is INVALID_LEASE.
/// - `*out_host` false (a route that may not be cached, such as a pin on a
///   draining node, or a node past the host lease table): `*out` is a lease
///   the library holds, to release exactly once with
///   `racaffinity_lease_release`, as one from `racaffinity_context_pick`.
///
/// # Safety
/// `out` and `out_host` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_pick_host_leasable(
    cluster: *const racaffinity_cluster,
    context: u64,
    out: *mut racaffinity_lease,
    out_host: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, host) = unsafe { (out_arg(out, "out")?, out_arg(out_host, "out_host")?) };
        handle::with(cluster, |c| {
            let (r, token) = c.pick_in_host_or_open_lease(ContextKey(context))?;
            let r: racaffinity_route = r.into();
            host.set(token.is_none())?;
            out.set(match token {
                Some(t) => pick::tracked(cluster, r, t),
                None => pick::host_held(r),
            })
        })
    })
}

/// Adds `count` routes a host served from its cache for a pinned context on
/// `node` to the metrics (node picks and affinity hits, thread-scope hits).
/// An id the cluster never had is UNKNOWN_NODE; a removed node's id still
/// counts (its hits were served while it was there). The counters wrap.
#[no_mangle]
pub extern "C" fn racaffinity_cluster_count_host_hits(
    cluster: *const racaffinity_cluster,
    node: u32,
    count: u64,
) -> racaffinity_result {
    guard(|| handle::with(cluster, |c| Ok(c.count_host_hits(node_id(node), count)?)))
}

/// Reports how a host lease ended when the host could not end it in its own
/// memory.
///
/// The page behind `racaffinity_cluster_epoch_page`'s word also holds a
/// host lease table at byte offset `RACAFFINITY_HOST_LEASE_OFFSET`: one
/// 64-bit word per (stripe, node), the word for `stripe` and `node` at index
/// `stripe * RACAFFINITY_HOST_LEASE_NODES + node`. A host that serves a
/// pinned context's route from its cache may also lease that node without
/// a call:
/// - begin: read the epoch word (acquire), then atomically add
///   `RACAFFINITY_HOST_LEASE_BEGIN` to the word of a stripe of its choice
///   (one per thread spreads the load) and keep the word and the epoch read;
/// - end OK or NEUTRAL while the epoch word still holds that epoch:
///   atomically add `RACAFFINITY_HOST_LEASE_END_OK` or
///   `RACAFFINITY_HOST_LEASE_END_NEUTRAL` to the same word;
/// - any other end (FAILED, or the epoch moved: the node may have been
///   ejected or marked down meanwhile): add
///   `RACAFFINITY_HOST_LEASE_END_NEUTRAL` to the same word, then call this
///   function with the outcome.
///
/// Only node ids below `RACAFFINITY_HOST_LEASE_NODES` have words; lease
/// others with `racaffinity_lease_begin`. The core reads the in-flight bits
/// for balancing, ejection and metrics, and counts the OK ends (they wrap)
/// before it counts a failure or reports metrics: fewer than 2^39 may end on
/// one word between two such reads. The library never writes these words,
/// so a host whose writers are serialized otherwise may update them without
/// atomic instructions. A lease never ended stays in flight. NULL_ARGUMENT
/// for a NULL cluster.
///
/// UNKNOWN_NODE for an id the cluster never had; INVALID_ARGUMENT for an
/// outcome that is not a `racaffinity_outcome`.
#[no_mangle]
pub extern "C" fn racaffinity_cluster_host_lease_end(
    cluster: *const racaffinity_cluster,
    node: u32,
    outcome: u32,
) -> racaffinity_result {
    guard(|| {
        let outcome = outcome_arg(outcome)?;
        handle::with(cluster, |c| Ok(c.end_host_lease(node_id(node), outcome)?))
    })
}

/// Pages handed to hosts, by the address of their epoch word, with one
/// strong reference per hand-out: a host's free gives one back, and a second
/// free or a foreign address finds nothing to give back (a no-op, never a
/// double drop). Hand-outs are rare (one per cluster and host), so a mutex.
static HANDED_OUT: Mutex<Vec<(usize, Arc<RoutingEpoch>)>> = Mutex::new(Vec::new());

/// A strong reference to the page, kept for the host, as the address of its
/// epoch word (valid until [`page_release`] of it).
pub(crate) fn page_into_raw(page: Arc<RoutingEpoch>) -> *const u64 {
    let word = page.word_ptr();
    HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).push((word as usize, page));
    word
}

/// Gives back one reference [`page_into_raw`] kept for `word`; false if
/// none is left (already freed, or never handed out).
pub(crate) fn page_release(word: *const u64) -> bool {
    let mut pages = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    match pages.iter().position(|(w, _)| *w == word as usize) {
        Some(i) => {
            // Dropped after the lock: the last reference frees the page.
            let page = pages.swap_remove(i);
            drop(pages);
            drop(page);
            true
        }
        None => false,
    }
}
