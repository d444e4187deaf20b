//! XA transaction affinity by gtrid bytes.

use super::buffer::{bytes_arg, out_arg, write_bytes};
use super::call::{span_call, span_route};
use super::handle::racaffinity_cluster;
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

/// Writes the key the XA global transaction (`format_id`, `gtrid`) is
/// registered under, the `gtrid` every other `racaffinity_tx_*` call takes
/// for that Xid: the format id (4 bytes, big-endian) then the gtrid, or its
/// SHA-256 digest when it is over 60 bytes. XA names a transaction by both,
/// so equal gtrids of two formats stay two transactions; Java and Python
/// build their keys by this same function, so every process places a
/// transaction alike (docs/semantics.md, "The key of an XA transaction").
/// `*out_len` receives the key's length; a buffer of
/// `RACAFFINITY_MAX_XA_TRANSACTION_KEY_BYTES` holds the key of every gtrid
/// of 1..=64 bytes. A gtrid no conforming TM makes (empty, or over 64 bytes)
/// is written back as it is (so `gtrid_len` bytes hold it) and the tx call
/// given it refuses it with INVALID_ARGUMENT. A buffer too small is
/// BUFFER_TOO_SMALL, with `*out_len` the size to allocate. Needs no cluster.
///
/// # Safety
/// `gtrid` must be valid for `gtrid_len` bytes; `buf` NULL or valid for
/// `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_xa_transaction_key(
    format_id: i32,
    gtrid: *const u8,
    gtrid_len: usize,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (g, out_len) = unsafe { (bytes_arg(gtrid, gtrid_len, "gtrid")?, out_arg(out_len, "out_len")?) };
        let key = racaffinity_core::xa_transaction_key(format_id, g);
        // SAFETY: per this function's contract.
        unsafe { write_bytes(&key, buf, cap, out_len) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::cluster::{
        racaffinity_cluster_free, racaffinity_cluster_new, racaffinity_node_add, racaffinity_node_remove,
        racaffinity_node_set_state,
    };
    use crate::capi::types::racaffinity_route_kind;

    /// Nodes come and go while other threads route one gtrid, each new node
    /// taking it (the others are down): a call whose topology snapshot was
    /// taken before the node it finds the gtrid on was added answered
    /// PANIC. Every answer is a route or a typed error.
    #[test]
    fn a_gtrid_moved_to_a_node_added_during_a_call_is_never_a_panic() {
        let _turn = crate::capi::handle::tests::serial();
        let mut c: *mut racaffinity_cluster = std::ptr::null_mut();
        // SAFETY: NUL-terminated literals; `c` is writable.
        unsafe {
            assert_eq!(racaffinity_cluster_new(c"nodes = A".as_ptr(), &mut c), racaffinity_result::Ok);
            assert_eq!(racaffinity_node_set_state(c, c"A".as_ptr(), 2), racaffinity_result::Ok);
        }
        let bits = c as usize;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let routers: Vec<_> = (0..6)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let c = bits as *const racaffinity_cluster;
                    let mut out = racaffinity_route { node: 0, kind: racaffinity_route_kind::Balanced };
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        // SAFETY: a 1-byte gtrid literal; `out` is writable.
                        let rcs = unsafe {
                            [
                                racaffinity_tx_route(c, b"g".as_ptr(), 1, &mut out),
                                racaffinity_tx_begin(c, b"g".as_ptr(), 1, &mut out),
                                racaffinity_tx_end(c, b"g".as_ptr(), 1),
                            ]
                        };
                        if rcs.contains(&racaffinity_result::Panic) {
                            return Err(rcs);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut i = 0;
        let mut out = racaffinity_route { node: 0, kind: racaffinity_route_kind::Balanced };
        while std::time::Instant::now() < deadline && routers.iter().all(|t| !t.is_finished()) {
            let name = std::ffi::CString::new(format!("D{i}")).unwrap();
            // SAFETY: NUL-terminated names; `out` is writable; the id output may be NULL.
            unsafe {
                assert_eq!(
                    racaffinity_node_add(c, name.as_ptr(), std::ptr::null(), 1, std::ptr::null_mut()),
                    racaffinity_result::Ok
                );
                racaffinity_tx_begin(c, b"g".as_ptr(), 1, &mut out);
                racaffinity_tx_end(c, b"g".as_ptr(), 1);
                if i > 0 {
                    let old = std::ffi::CString::new(format!("D{}", i - 1)).unwrap();
                    assert_eq!(racaffinity_node_remove(c, old.as_ptr()), racaffinity_result::Ok);
                }
            }
            i += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let answers: Vec<_> = routers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(racaffinity_cluster_free(c), racaffinity_result::Ok);
        for a in answers {
            assert_eq!(a, Ok(()), "a call on the gtrid answered PANIC (after {i} nodes)");
        }
    }
}
