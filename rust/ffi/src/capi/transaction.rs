//! XA transaction affinity by gtrid bytes.

use super::buffer::{bytes_arg, out_arg};
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};
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
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, g) = unsafe { (out_arg(out, "out")?, bytes_arg(gtrid, len, "gtrid")?) };
        handle::with(cluster, |c| out.set(c.tx_begin(g)?.into()))
    })
}

/// Like `racaffinity_tx_begin`, but a *new* gtrid is placed on `preferred`
/// (e.g. the thread's pinned node) when that node accepts new work.
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
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, g) = unsafe { (out_arg(out, "out")?, bytes_arg(gtrid, len, "gtrid")?) };
        handle::with(cluster, |c| out.set(c.tx_begin_on(g, Some(node_id(preferred)))?.into()))
    })
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
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, g) = unsafe { (out_arg(out, "out")?, bytes_arg(gtrid, len, "gtrid")?) };
        handle::with(cluster, |c| out.set(c.tx_route(g)?.into()))
    })
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
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { bytes_arg(gtrid, len, "gtrid") }?;
        handle::with(cluster, |c| c.tx_prepared(g).map(|_| ()).map_err(Into::into))
    })
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
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { bytes_arg(gtrid, len, "gtrid") }?;
        handle::with(cluster, |c| c.tx_end(g).map(|_| ()).map_err(Into::into))
    })
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
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { bytes_arg(gtrid, len, "gtrid") }?;
        handle::with(cluster, |c| c.tx_complete(g).map(|_| ()).map_err(Into::into))
    })
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
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { bytes_arg(gtrid, len, "gtrid") }?;
        handle::with(cluster, |c| c.tx_recovered(g, node_id(node)).map_err(Into::into))
    })
}
