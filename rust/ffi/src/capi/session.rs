//! Web-session affinity.

use super::buffer::{bytes_arg, write_opt};
use super::call::span_route;
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};
use super::types::racaffinity_route;

/// Routes a request of session `key` (1..=1024 bytes).
///
/// # Safety
/// `key` must be valid for `len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_route(
    cluster: *const racaffinity_cluster,
    key: *const u8,
    len: usize,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_route(cluster, key, len, "key", out, |c, k| c.session_route(k)) }
}

/// Ends session `key`'s affinity. `*out_existed` (may be NULL) tells whether it had one.
///
/// # Safety
/// `key` must be valid for `len` bytes; `out_existed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_session_end(
    cluster: *const racaffinity_cluster,
    key: *const u8,
    len: usize,
    out_existed: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let k = unsafe { bytes_arg(key, len, "key") }?;
        let existed = handle::with(cluster, |c| Ok(c.session_end(k)?))?;
        // SAFETY: `out_existed` is NULL or writable per the contract.
        unsafe { write_opt(out_existed, existed) };
        Ok(())
    })
}
