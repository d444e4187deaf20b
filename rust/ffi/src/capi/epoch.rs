//! The routing epoch page: lets a host serve a pinned context's route from
//! its own cache while the epoch it cached the route under is current.
//!
//! The page is reference-counted apart from the cluster: a host that maps it
//! keeps it valid until it frees it, even after `racaffinity_cluster_free`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use racaffinity_core::{ContextKey, RoutingEpoch};

use super::buffer::out_arg;
use super::handle::{self, racaffinity_cluster};
use super::pick;
use super::result::{guard, racaffinity_result, Failure};
use super::types::{node_id, outcome_arg, racaffinity_lease, racaffinity_route, scope_arg};

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

/// One hand-out of a cluster's epoch page (opaque: never a pointer to
/// dereference), what `racaffinity_epoch_page_free` takes back.
pub struct racaffinity_epoch_page {
    _private: (),
}

/// Maps the cluster's routing epoch: `*out_word` points at a 64-bit word the
/// core advances (with release ordering) after every change that could alter
/// any route. Read it with acquire ordering (`__atomic_load_n(p,
/// __ATOMIC_ACQUIRE)`, `atomic_load`). The word stays readable until
/// `racaffinity_epoch_page_free(*out_page)`, whatever happens to the cluster;
/// closing the cluster advances it once more.
///
/// Each call makes a new hand-out `*out_page` (one cluster's calls share one
/// word): free each hand-out once. A hand-out is never reissued, so a stale
/// free of one can never release another, even when a later page lands at
/// the address of a freed one.
///
/// # Safety
/// `out_word` and `out_page` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_epoch_page(
    cluster: *const racaffinity_cluster,
    out_word: *mut *const u64,
    out_page: *mut *mut racaffinity_epoch_page,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (word, page) = unsafe { (out_arg(out_word, "out_word")?, out_arg(out_page, "out_page")?) };
        handle::with(cluster, |c| {
            let (id, w) = hand_out(c.routing_epoch_page())?;
            word.set(w)?;
            page.set(id as usize as *mut racaffinity_epoch_page)
        })
    })
}

/// Releases a hand-out from `racaffinity_cluster_epoch_page`; the caller
/// must not read its word afterwards (through this hand-out). NULL, a
/// hand-out already freed and anything that never was one are no-ops.
#[no_mangle]
pub extern "C" fn racaffinity_epoch_page_free(page: *mut racaffinity_epoch_page) {
    if !page.is_null() {
        release(page as usize as u64);
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

/// The pick `racaffinity_context_pick` makes for a context with no pin
/// (balancing, whatever `thread_auto_pin` says), for a host that ends its
/// leases on the page and writes the host lease words itself with plain
/// read-modify-writes, its writers serialized otherwise (Python's GIL): the
/// library decides in the same call whether the host may lease the answer,
/// and never writes a word the host writes. Read the epoch word *before*
/// this call. No context and no flag argument: each argument costs an ABI
/// binding (cffi's) as much as a tenth of the call.
///
/// - `out->token` 0 (the library never issues token 0): the node is UP and
///   below `RACAFFINITY_HOST_LEASE_NODES`, and the library leased nothing.
///   Begin a host lease on the node's word at once (until then balancing
///   does not count it) and end it against the epoch read before this call
///   (see `racaffinity_cluster_host_lease_end`); releasing `*out` with
///   `racaffinity_lease_release` is INVALID_LEASE.
/// - any other token (a node in another state, such as a half-open trial
///   or a panic pick onto a DOWN node, whose every outcome the library must
///   see when it happens, or a node past the table): `*out` is a lease the
///   library holds, to release exactly once with `racaffinity_lease_release`,
///   as one from `racaffinity_context_pick`.
///
/// NULL_ARGUMENT for a NULL `cluster` or `out`, INVALID_HANDLE for a stale
/// or foreign cluster; the errors of `racaffinity_context_pick` otherwise.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_pick_host_begins(
    cluster: *const racaffinity_cluster,
    out: *mut racaffinity_lease,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out")? };
        handle::with(cluster, |c| {
            let (r, token) = c.pick_balanced_host_begins()?;
            let r: racaffinity_route = r.into();
            out.set(match token {
                Some(t) => pick::tracked(cluster, r, t),
                None => pick::host_held(r),
            })
        })
    })
}

/// Adds `count` routes a host served from its cache for a context pinned
/// on `node` with the thread scope's rules (`racaffinity_context_pin`, or
/// `racaffinity_context_pin_for` with `RACAFFINITY_SCOPE_THREAD`) to the
/// metrics: `racaffinity_cluster_count_host_hits_for` with
/// `RACAFFINITY_SCOPE_THREAD`.
#[no_mangle]
pub extern "C" fn racaffinity_cluster_count_host_hits(
    cluster: *const racaffinity_cluster,
    node: u32,
    count: u64,
) -> racaffinity_result {
    guard(|| handle::with(cluster, |c| Ok(c.count_host_hits(node_id(node), count)?)))
}

/// Adds `count` routes a host served from its cache for a context pinned
/// on `node` with the rules of `scope` (`racaffinity_scope`: the scope the
/// context was pinned with by `racaffinity_context_pin_for`) to the
/// metrics: the node's picks and affinity hits, and `scope`'s hits, where
/// the library counts that context's own answers. INVALID_ARGUMENT for a
/// scope out of range (checked before the cluster) and for
/// `RACAFFINITY_SCOPE_DATA`, whose rules no context pin follows;
/// UNKNOWN_NODE for an id the cluster never had (a removed node's id still
/// counts: its hits were served while it was there). Nothing is counted on
/// an error. The counters wrap.
#[no_mangle]
pub extern "C" fn racaffinity_cluster_count_host_hits_for(
    cluster: *const racaffinity_cluster,
    node: u32,
    scope: u32,
    count: u64,
) -> racaffinity_result {
    guard(|| {
        let scope = scope_arg(scope)?;
        handle::with(cluster, |c| Ok(c.count_host_hits_for(node_id(node), scope, count)?))
    })
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

/// Pages handed to hosts, by hand-out id, one strong reference each. An id
/// is a serial number, never reused: matching hand-outs by the word's
/// address let a stale free release another host's reference once the
/// allocator put a new page where a freed one was. Hand-outs are rare (one
/// per cluster and host), so a mutex.
static HANDED_OUT: Mutex<BTreeMap<u64, Arc<RoutingEpoch>>> = Mutex::new(BTreeMap::new());
static NEXT_HAND_OUT: AtomicU64 = AtomicU64::new(1);

// Bits 48..63 tag a hand-out (so small integers, cluster handles and most
// real pointers are never one); bits 0..48 are its serial number.
const TAG: u64 = 0x7a12 << 48;
const TAG_MASK: u64 = 0xffff << 48;

/// Keeps a strong reference to `page` for a host: its hand-out id (never 0,
/// never reissued) and the address of its epoch word, valid until
/// [`release`] of that id.
pub(crate) fn hand_out(page: Arc<RoutingEpoch>) -> Result<(u64, *const u64), Failure> {
    let serial = NEXT_HAND_OUT.fetch_add(1, Ordering::Relaxed);
    if serial & TAG_MASK != 0 {
        // 2^48 hand-outs: far past any process's life; refuse rather than reissue.
        return Err(Failure::new(racaffinity_result::TooManyHandles, "epoch page hand-outs exhausted".to_string()));
    }
    let id = TAG | serial;
    let word = page.word_ptr();
    HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).insert(id, page);
    Ok((id, word))
}

/// The hand-out table, for the fork handler to hold across a fork.
pub(crate) fn lock_hand_outs() -> std::sync::MutexGuard<'static, BTreeMap<u64, Arc<RoutingEpoch>>> {
    HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner())
}

/// The epoch word of a live hand-out.
pub(crate) fn handed_out_word(id: u64) -> Option<*const u64> {
    HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).get(&id).map(|p| p.word_ptr())
}

/// Gives back the reference [`hand_out`] kept for `id`; false if there is
/// none (already freed, or never handed out).
pub(crate) fn release(id: u64) -> bool {
    let page = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    // Dropped after the lock: the last reference frees the page.
    page.is_some()
}
