//! The routing epoch page: lets a host serve a pinned context's route from
//! its own cache while the epoch it cached the route under is current.
//!
//! The page is reference-counted apart from the cluster: a host that maps it
//! keeps it valid until it frees it, even after `racaffinity_cluster_free`.

use std::sync::{Arc, Mutex};

use racaffinity_core::{ContextKey, RoutingEpoch};

use super::buffer::out_arg;
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};
use super::types::{node_id, racaffinity_route};

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
