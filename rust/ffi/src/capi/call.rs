//! Shared bodies of the calls that take a byte span (a gtrid or a key): the
//! argument checks come first and in the same order everywhere, so a NULL
//! output never leaves a registered branch or session behind.

use std::os::raw::c_char;

use racaffinity_core::{Cluster, Route};

use super::buffer::{bytes_arg, out_arg, write_str};
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result, Failure};
use super::types::racaffinity_route;

/// Checks `out` and the span, then writes the route `f` returns.
///
/// # Safety
/// `span` must be valid for `len` bytes; `out` NULL or writable.
pub(crate) unsafe fn span_route(
    cluster: *const racaffinity_cluster,
    span: *const u8,
    len: usize,
    what: &str,
    out: *mut racaffinity_route,
    f: impl FnOnce(&Cluster, &[u8]) -> racaffinity_core::Result<Route>,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, s) = unsafe { (out_arg(out, "out")?, bytes_arg(span, len, what)?) };
        handle::with(cluster, |c| out.set(f(c, s)?.into()))
    })
}

/// Checks the span, then runs `f` for its effect.
///
/// # Safety
/// `span` must be valid for `len` bytes.
pub(crate) unsafe fn span_call<R>(
    cluster: *const racaffinity_cluster,
    span: *const u8,
    len: usize,
    what: &str,
    f: impl FnOnce(&Cluster, &[u8]) -> Result<R, Failure>,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let s = unsafe { bytes_arg(span, len, what) }?;
        handle::with(cluster, |c| f(c, s).map(|_| ()))
    })
}

/// Writes the text `f` makes of the cluster (a name, an address, metrics)
/// into the caller's buffer.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
pub(crate) unsafe fn cluster_text(
    cluster: *const racaffinity_cluster,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
    f: impl FnOnce(&Cluster) -> Result<String, Failure>,
) -> racaffinity_result {
    guard(|| {
        let text = handle::with(cluster, f)?;
        // SAFETY: per this function's contract.
        unsafe { write_str(&text, buf, cap, out_len) }
    })
}
