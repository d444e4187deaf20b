//! Picks, leases, thread pins and explicit context pins.

use std::ptr::addr_of;

use racaffinity_core::LeaseToken;

use super::buffer::{out_arg, write_opt};
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result, Failure};
use super::types::{node_id, outcome_arg, racaffinity_lease, racaffinity_route, racaffinity_route_kind};

/// Routes the calling thread's next unit of work (its pin, else load
/// balancing) without leasing. The cheapest routing call.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_route(
    cluster: *const racaffinity_cluster,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.pick()?.into()))
    })
}

/// Picks a node for the calling thread (its pin, else load balancing) and
/// leases it. Release the lease with `racaffinity_lease_release`.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_pick(
    cluster: *const racaffinity_cluster,
    out: *mut racaffinity_lease,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(routed_lease(cluster, c, c.pick()?.into())?))
    })
}

/// Routes context `context`'s next unit of work (its pin, else load
/// balancing) without leasing: the cheapest call for a pinned context.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_route(
    cluster: *const racaffinity_cluster,
    context: u64,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.pick_in(racaffinity_core::ContextKey(context))?.into()))
    })
}

/// Like `racaffinity_cluster_pick`, for the explicit pin context `context`.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_pick(
    cluster: *const racaffinity_cluster,
    context: u64,
    out: *mut racaffinity_lease,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| {
            out.set(routed_lease(cluster, c, c.pick_in(racaffinity_core::ContextKey(context))?.into())?)
        })
    })
}

/// Leases `node`, which another call routed to (a transaction, session or key
/// route), so the work's outcome feeds balancing and health. The lease's
/// `kind` is AFFINITY.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_lease_begin(
    cluster: *const racaffinity_cluster,
    node: u32,
    out: *mut racaffinity_lease,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| {
            let route = racaffinity_route { node, kind: racaffinity_route_kind::Affinity };
            out.set(lease(cluster, c, route)?)
        })
    })
}

/// Releases a lease with an outcome (`racaffinity_outcome`). A second
/// release (also of a copy), or a lease from another cluster, returns
/// INVALID_LEASE and changes nothing.
///
/// # Safety
/// `lease` must be NULL or point to a readable `racaffinity_lease`.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_lease_release(
    cluster: *const racaffinity_cluster,
    lease: *const racaffinity_lease,
    outcome: u32,
) -> racaffinity_result {
    guard(|| {
        if lease.is_null() {
            return Err(Failure::null("lease"));
        }
        let outcome = outcome_arg(outcome)?;
        // Fields are read one by one: the caller's `kind` may hold any integer,
        // and copying the whole struct would read it as an enum.
        // SAFETY: non-NULL and readable per the contract.
        let (owner, token) = unsafe { (addr_of!((*lease).owner).read(), addr_of!((*lease).token).read()) };
        handle::with(cluster, |c| {
            if owner != handle::tag(cluster) {
                return Err(Failure::new(racaffinity_result::InvalidLease, "lease is not from this cluster"));
            }
            c.close_lease(LeaseToken(token), outcome)?;
            Ok(())
        })
    })
}

pub(crate) fn lease(
    h: *const racaffinity_cluster,
    c: &racaffinity_core::Cluster,
    route: racaffinity_route,
) -> Result<racaffinity_lease, Failure> {
    Ok(tracked(h, route, c.open_lease(node_id(route.node))?))
}

/// [`lease`] of a node the call itself just routed to: a removal of that
/// node since the route still leases it, rather than failing a pick that
/// succeeded.
pub(crate) fn routed_lease(
    h: *const racaffinity_cluster,
    c: &racaffinity_core::Cluster,
    route: racaffinity_route,
) -> Result<racaffinity_lease, Failure> {
    Ok(tracked(h, route, c.open_routed_lease(node_id(route.node))?))
}

/// The C view of a lease the core opened: `racaffinity_lease_release` finds
/// it by owner and token, and ends it exactly once.
pub(crate) fn tracked(h: *const racaffinity_cluster, route: racaffinity_route, token: LeaseToken) -> racaffinity_lease {
    racaffinity_lease { node: route.node, kind: route.kind, owner: handle::tag(h), token: token.0 }
}

/// A route the host leases itself: no owner and no token, so releasing it
/// through the library is INVALID_LEASE rather than a second count.
pub(crate) fn host_held(route: racaffinity_route) -> racaffinity_lease {
    racaffinity_lease { node: route.node, kind: route.kind, owner: 0, token: 0 }
}

/// Pins the calling OS thread (or deepens its pin) and writes the pinned
/// route. Pair every success with `racaffinity_thread_unpin` on this thread.
/// A pin already nested 2^32 - 1 levels deep is `INVALID_ARGUMENT` (and
/// stays as it was).
///
/// # Safety
/// `out` must be NULL or writable (NULL is allowed: the route is optional).
#[no_mangle]
pub unsafe extern "C" fn racaffinity_thread_pin(
    cluster: *const racaffinity_cluster,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        handle::with(cluster, |c| {
            let r = c.enter_thread_pin()?;
            // SAFETY: `out` is NULL or writable per the contract.
            unsafe { write_opt(out, r.into()) };
            Ok(())
        })
    })
}

/// Releases one level of the calling thread's pin. `*out_released` (may be
/// NULL) is set when the pin is gone.
///
/// # Safety
/// `out_released` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_thread_unpin(
    cluster: *const racaffinity_cluster,
    out_released: *mut bool,
) -> racaffinity_result {
    guard(|| {
        handle::with(cluster, |c| {
            let gone = c.leave_thread_pin();
            // SAFETY: `out_released` is NULL or writable per the contract.
            unsafe { write_opt(out_released, gone) };
            Ok(())
        })
    })
}

/// A fresh explicit pin context key for hosts whose unit of work is not an
/// OS thread (a coroutine, a request).
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_new(
    cluster: *const racaffinity_cluster,
    out: *mut u64,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.new_context_key().0))
    })
}

/// Pins (or deepens the pin of) context `context`. A pin already nested
/// 2^32 - 1 levels deep is `INVALID_ARGUMENT` (and stays as it was).
///
/// # Safety
/// `out` must be NULL or writable (NULL is allowed).
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_pin(
    cluster: *const racaffinity_cluster,
    context: u64,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        handle::with(cluster, |c| {
            let r = c.pin_context(racaffinity_core::ContextKey(context))?;
            // SAFETY: `out` is NULL or writable per the contract.
            unsafe { write_opt(out, r.into()) };
            Ok(())
        })
    })
}

/// Releases one level of context `context`'s pin.
///
/// # Safety
/// `out_released` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_unpin(
    cluster: *const racaffinity_cluster,
    context: u64,
    out_released: *mut bool,
) -> racaffinity_result {
    guard(|| {
        handle::with(cluster, |c| {
            let gone = c.unpin_context(racaffinity_core::ContextKey(context));
            // SAFETY: `out_released` is NULL or writable per the contract.
            unsafe { write_opt(out_released, gone) };
            Ok(())
        })
    })
}

/// Releases context `context`'s pin at every level (a unit of work that
/// ended with pin scopes still open, or an auto-pin). `*out_existed` (may be
/// NULL) is set when a pin existed.
///
/// # Safety
/// `out_existed` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_release(
    cluster: *const racaffinity_cluster,
    context: u64,
    out_existed: *mut bool,
) -> racaffinity_result {
    guard(|| {
        handle::with(cluster, |c| {
            let existed = c.release_context(racaffinity_core::ContextKey(context));
            // SAFETY: `out_existed` is NULL or writable per the contract.
            unsafe { write_opt(out_existed, existed) };
            Ok(())
        })
    })
}

/// Whether `thread.auto_pin` is set: a pick or route of an unpinned thread
/// or context pins it. A host that keeps its own context keys (Python's
/// contextvars) issues a key for the context before such a call.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_auto_pin(
    cluster: *const racaffinity_cluster,
    out: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.config().thread.auto_pin))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::cluster::{
        racaffinity_cluster_free, racaffinity_cluster_new, racaffinity_node_add, racaffinity_node_remove,
    };
    use crate::capi::result::racaffinity_result;

    /// A pick races the removal of the node it picked: the removal may come
    /// between the choice and the lease, as it may come just after the lease
    /// began. Either way the pick succeeds with a lease to release.
    #[test]
    fn a_pick_that_races_the_removal_of_its_node_still_leases_it() {
        let _turn = crate::capi::handle::tests::serial();
        let mut c: *mut racaffinity_cluster = std::ptr::null_mut();
        // SAFETY: the config is a NUL-terminated literal and `c` is writable.
        let rc = unsafe { racaffinity_cluster_new(c"nodes = A, B\npolicy = round_robin".as_ptr(), &mut c) };
        assert_eq!(rc, racaffinity_result::Ok);
        let bits = c as usize;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let c = bits as *const racaffinity_cluster;
                for _ in 0..20_000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    // SAFETY: NUL-terminated literals; the id output may be NULL.
                    unsafe {
                        assert_eq!(racaffinity_node_remove(c, c"B".as_ptr()), racaffinity_result::Ok);
                        let rc = racaffinity_node_add(c, c"B".as_ptr(), std::ptr::null(), 1, std::ptr::null_mut());
                        assert_eq!(rc, racaffinity_result::Ok);
                    }
                }
            })
        };
        let mut failed = None;
        for _ in 0..200_000 {
            let mut l = racaffinity_lease { node: 0, kind: racaffinity_route_kind::Balanced, owner: 0, token: 0 };
            // SAFETY: `l` is writable and readable.
            let rc = unsafe { racaffinity_cluster_pick(c, &mut l) };
            if rc != racaffinity_result::Ok {
                failed = Some(rc);
                break;
            }
            // SAFETY: as above.
            assert_eq!(unsafe { racaffinity_lease_release(c, &l, 2) }, racaffinity_result::Ok);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
        assert_eq!(racaffinity_cluster_free(c), racaffinity_result::Ok);
        assert_eq!(failed, None, "a pick failed because the node it picked was removed meanwhile");
    }
}
