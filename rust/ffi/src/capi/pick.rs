//! Picks, leases, thread pins and explicit context pins.

use std::ptr::addr_of;

use super::buffer::put;
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result, Failure};
use super::types::{node_id, outcome_arg, racaffinity_lease, racaffinity_route, LEASE_LIVE, LEASE_RELEASED};

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
    // SAFETY: per this function's contract.
    guard(|| handle::with(cluster, |c| unsafe { put(out, c.pick()?.into(), "out") }))
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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        handle::with(cluster, |c| {
            let r: racaffinity_route = c.pick()?.into();
            c.begin_lease(node_id(r.node));
            let lease =
                racaffinity_lease { node: r.node, kind: r.kind, owner: handle::tag(cluster), state: LEASE_LIVE };
            // SAFETY: checked non-NULL; writable per the contract.
            unsafe { put(out, lease, "out") }
        })
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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        handle::with(cluster, |c| {
            let r: racaffinity_route = c.pick_in(racaffinity_core::ContextKey(context))?.into();
            c.begin_lease(node_id(r.node));
            let lease =
                racaffinity_lease { node: r.node, kind: r.kind, owner: handle::tag(cluster), state: LEASE_LIVE };
            // SAFETY: checked non-NULL; writable per the contract.
            unsafe { put(out, lease, "out") }
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
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        handle::with(cluster, |c| {
            if c.node(node_id(node)).is_none_or(|n| n.is_removed()) {
                return Err(super::cluster::unknown(node));
            }
            c.begin_lease(node_id(node));
            let kind = super::types::racaffinity_route_kind::Affinity;
            let lease = racaffinity_lease { node, kind, owner: handle::tag(cluster), state: LEASE_LIVE };
            // SAFETY: checked non-NULL; writable per the contract.
            unsafe { put(out, lease, "out") }
        })
    })
}

/// Releases a lease with an outcome (`racaffinity_outcome`). A second
/// release, or a lease from another cluster, returns INVALID_LEASE.
///
/// # Safety
/// `lease` must be NULL or point to a lease filled by this library.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_lease_release(
    cluster: *const racaffinity_cluster,
    lease: *mut racaffinity_lease,
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
        let (node, owner, state) = unsafe {
            (addr_of!((*lease).node).read(), addr_of!((*lease).owner).read(), addr_of!((*lease).state).read())
        };
        handle::with(cluster, |c| {
            if owner != handle::tag(cluster) || state != LEASE_LIVE {
                return Err(Failure::new(
                    racaffinity_result::InvalidLease,
                    if state == LEASE_RELEASED { "lease already released" } else { "lease is not from this cluster" },
                ));
            }
            // SAFETY: non-NULL and writable per the contract.
            unsafe { std::ptr::addr_of_mut!((*lease).state).write(LEASE_RELEASED) };
            c.end_lease(node_id(node), outcome);
            Ok(())
        })
    })
}

/// Pins the calling OS thread (or deepens its pin) and writes the pinned
/// route. Pair every success with `racaffinity_thread_unpin` on this thread.
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
            if !out.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { out.write(r.into()) };
            }
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
            if !out_released.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { out_released.write(gone) };
            }
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
    // SAFETY: per this function's contract.
    guard(|| handle::with(cluster, |c| unsafe { put(out, c.new_context_key().0, "out") }))
}

/// Pins (or deepens the pin of) context `context`.
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
            if !out.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { out.write(r.into()) };
            }
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
            if !out_released.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { out_released.write(gone) };
            }
            Ok(())
        })
    })
}
