//! One leased pick for a unit of work that may hold several affinities; the
//! core decides which one applies (`Cluster::route`).

use racaffinity_core::RouteRequest;

use std::os::raw::c_char;

use super::buffer::{bytes_arg, out_arg, str_arg};
use super::handle::{self, racaffinity_cluster};
use super::pick::routed_lease;
use super::result::{guard, racaffinity_result, Failure};
use super::types::{racaffinity_lease, racaffinity_route};
use crate::ops;

/// What a host knows about the unit of work asking for a connection. Every
/// field is optional: a zero length (or `context` 0) means "none". Only
/// integers and pointers, so any bit pattern a caller leaves is defined.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct racaffinity_route_request {
    /// The global transaction's gtrid (its branch begun with `racaffinity_tx_begin`).
    pub gtrid: *const u8,
    /// Length of `gtrid`; 0: no transaction.
    pub gtrid_len: usize,
    /// A data (sharding) key.
    pub key: *const u8,
    /// Length of `key`; 0: no byte key.
    pub key_len: usize,
    /// An integer data key, used when `key_is_i64` is nonzero.
    pub key_i64: i64,
    /// Nonzero: route by `key_i64`.
    pub key_is_i64: u32,
    /// A web session key.
    pub session: *const u8,
    /// Length of `session`; 0: no session.
    pub session_len: usize,
    /// An explicit pin context (`racaffinity_context_new`); 0: the calling
    /// thread's pin.
    pub context: u64,
}

/// Picks and leases a node for a request, by the first affinity that applies:
/// the transaction, then the data key, then the session, then the context's
/// (or thread's) pin, else load balancing. Release with `racaffinity_lease_release`.
/// With `thread.auto_pin` such a pick pins the request's context, so a
/// `context` this cluster never issued is `RACAFFINITY_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `request` must be NULL or point to a readable `racaffinity_route_request`
/// whose non-empty spans are readable; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_request_pick(
    cluster: *const racaffinity_cluster,
    request: *const racaffinity_route_request,
    out: *mut racaffinity_lease,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, req) = unsafe { (out_arg(out, "out")?, request_arg(request)?) };
        handle::with(cluster, |c| out.set(routed_lease(cluster, c, c.route(&req)?.into())?))
    })
}

/// Begins or joins a branch of `gtrid` (1..=64 bytes). A *new* gtrid is
/// placed where the request's other affinities point (its data key, else its
/// session, else the context's or thread's pin), else by the transaction
/// placement policy; `request->gtrid` is ignored. `request` may be NULL.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes; `request` NULL or readable with
/// readable non-empty spans; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_begin_for(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
    request: *const racaffinity_route_request,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, g) = unsafe { (out_arg(out, "out")?, bytes_arg(gtrid, len, "gtrid")?) };
        let req = if request.is_null() {
            RouteRequest::default()
        } else {
            // SAFETY: non-NULL and readable per the contract.
            unsafe { request_arg(request)? }
        };
        handle::with(cluster, |c| out.set(c.tx_begin_for(g, &req)?.into()))
    })
}

/// `racaffinity_tx_begin_for` for a request that carries a session routing
/// token (`token`, NUL-terminated, as `racaffinity_session_token_route`
/// takes it): a *new* gtrid goes to the request's data key's owner, else to
/// the node the token routes the request to (in strict transaction mode
/// across processes, `transaction.settle` > 0: the token's primary while
/// every process sees it take new work, else the gtrid's own placement),
/// else as `racaffinity_tx_begin_for` places it. The token never makes the
/// call fail for its node's sake, even in strict session mode; a malformed
/// or foreign token is INVALID_ARGUMENT and changes nothing. A separate
/// function, not a field of `racaffinity_route_request`, so that callers
/// built against 0.2.0 keep their struct's size.
///
/// # Safety
/// `gtrid` must be valid for `len` bytes; `request` NULL or readable with
/// readable non-empty spans; `token` NULL or NUL-terminated; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_tx_begin_for_token(
    cluster: *const racaffinity_cluster,
    gtrid: *const u8,
    len: usize,
    request: *const racaffinity_route_request,
    token: *const c_char,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, g, t) = unsafe { (out_arg(out, "out")?, bytes_arg(gtrid, len, "gtrid")?, str_arg(token, "token")?) };
        let mut req = if request.is_null() {
            RouteRequest::default()
        } else {
            // SAFETY: non-NULL and readable per the contract.
            unsafe { request_arg(request)? }
        };
        req.token = Some(t);
        handle::with(cluster, |c| out.set(c.tx_begin_for(g, &req)?.into()))
    })
}

/// Reads a C request into the core's form.
///
/// # Safety
/// `request` must be NULL or readable, with readable non-empty spans.
unsafe fn request_arg<'a>(request: *const racaffinity_route_request) -> Result<RouteRequest<'a>, Failure> {
    if request.is_null() {
        return Err(Failure::null("request"));
    }
    // SAFETY: non-NULL and readable per the contract.
    let r = unsafe { request.read() };
    // SAFETY: the spans are readable per the contract; empty ones are not read.
    let (gtrid, key, session) = unsafe {
        (
            bytes_arg(r.gtrid, r.gtrid_len, "request.gtrid")?,
            bytes_arg(r.key, r.key_len, "request.key")?,
            bytes_arg(r.session, r.session_len, "request.session")?,
        )
    };
    // In C a zero length means "none" (the struct has no other way to say it).
    let given = |s: &'a [u8]| (!s.is_empty()).then_some(s);
    Ok(ops::route_request(
        given(gtrid),
        given(key),
        (r.key_is_i64 != 0).then_some(r.key_i64),
        given(session),
        r.context,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::cluster::{racaffinity_cluster_free, racaffinity_cluster_new};
    use crate::capi::transaction::{racaffinity_tx_begin, racaffinity_tx_end};
    use crate::capi::types::racaffinity_route_kind;

    /// The header: "a malformed or foreign token is INVALID_ARGUMENT and
    /// changes nothing", whether the gtrid is new or has branches already.
    #[test]
    fn a_malformed_token_is_refused_for_a_gtrid_that_exists_too() {
        let _turn = crate::capi::handle::tests::serial();
        let mut c: *mut racaffinity_cluster = std::ptr::null_mut();
        let mut r = racaffinity_route { node: 0, kind: racaffinity_route_kind::Balanced };
        // SAFETY: NUL-terminated literals, a 1-byte gtrid, writable outputs.
        unsafe {
            assert_eq!(racaffinity_cluster_new(c"nodes = A, B".as_ptr(), &mut c), racaffinity_result::Ok);
            assert_eq!(racaffinity_tx_begin(c, b"g".as_ptr(), 1, &mut r), racaffinity_result::Ok);
            for bad in [c"junk", c"s!ra9.00000000.none", c"s!ra1.0000000g.none"] {
                let rc = racaffinity_tx_begin_for_token(c, b"g".as_ptr(), 1, std::ptr::null(), bad.as_ptr(), &mut r);
                assert_eq!(rc, racaffinity_result::InvalidArgument, "{bad:?}");
            }
            // One branch, as before the refused calls: its end is the last.
            assert_eq!(racaffinity_tx_end(c, b"g".as_ptr(), 1), racaffinity_result::Ok);
            assert_eq!(racaffinity_tx_end(c, b"g".as_ptr(), 1), racaffinity_result::UnknownTransaction);
        }
        assert_eq!(racaffinity_cluster_free(c), racaffinity_result::Ok);
    }
}
