//! Metrics as JSON or Prometheus text into a caller buffer.

use std::os::raw::c_char;

use super::call::cluster_text;
use super::handle::racaffinity_cluster;
use super::result::racaffinity_result;

/// Writes the metrics snapshot as JSON (NUL-terminated). On BUFFER_TOO_SMALL
/// `*out_len` holds the size needed; counters move, so allow some slack.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_metrics_json(
    cluster: *const racaffinity_cluster,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { cluster_text(cluster, buf, cap, out_len, |c| Ok(c.metrics().to_json())) }
}

/// Writes the metrics snapshot in the Prometheus text format (NUL-terminated).
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_metrics_prometheus(
    cluster: *const racaffinity_cluster,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { cluster_text(cluster, buf, cap, out_len, |c| Ok(c.metrics().to_prometheus())) }
}
