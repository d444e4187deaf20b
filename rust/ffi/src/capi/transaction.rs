//! XA transaction affinity by gtrid bytes.

use super::call::{span_call, span_route};
use super::handle::racaffinity_cluster;
use super::result::racaffinity_result;
use super::types::{node_id, racaffinity_route};

/// Begins or joins a branch of `gtrid` (1..=64 bytes) and writes its route.
/// Every branch, from any thread or process, gets the owning node.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_begin(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_route(cluster, gtrid, len, "gtrid", out, |c, g| c.tx_begin(g)) }
}

/// Like `racaffinity_tx_begin`, but a *new* gtrid is placed on `preferred`
/// (e.g. the thread's pinned node, or the node where the transaction
/// manager placed it) when that node accepts new work. Otherwise strict
/// transaction mode refuses with `STRICT_AFFINITY` (a branch elsewhere would
/// split the transaction) and soft mode places it as `racaffinity_tx_begin`.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_begin_on(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
    preferred: u32,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_route(cluster, gtrid, len, "gtrid", out, |c, g| c.tx_begin_on(g, Some(node_id(preferred)))) }
}

/// Where 2PC commands for `gtrid` go. Never moves the transaction.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_route(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_route(cluster, gtrid, len, "gtrid", out, |c, g| c.tx_route(g)) }
}

/// Marks a branch of `gtrid` prepared: the transaction never moves again.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_prepared(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_call(cluster, gtrid, len, "gtrid", |c, g| Ok(c.tx_prepared(g)?)) }
}

/// Ends one branch (at its commit or rollback); the entry goes with the last.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_end(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_call(cluster, gtrid, len, "gtrid", |c, g| Ok(c.tx_end(g)?)) }
}

/// Forgets `gtrid` whatever its branch count (the whole transaction ended).
///
/// # Safety
/// `gtrid` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_complete(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_call(cluster, gtrid, len, "gtrid", |c, g| Ok(c.tx_complete(g)?)) }
}

/// Records that `node` returned `gtrid` from a recovery scan, so its commit
/// or rollback is routed there.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_recovered(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
    node: u32,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_call(cluster, gtrid, len, "gtrid", |c, g| Ok(c.tx_recovered(g, node_id(node))?)) }
}
