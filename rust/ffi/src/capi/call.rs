//! Shared bodies of the calls that take a byte span (a gtrid or a key): the
//! argument checks come first and in the same order everywhere, so a NULL
//! output never leaves a registered branch or session behind.

use racaffinity_core::{Cluster, Route};

use super::buffer::{bytes_arg, out_arg};
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
