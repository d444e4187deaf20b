//! The routing epoch for Java: the page as a direct `ByteBuffer` that Java
//! reads with acquire semantics through a `VarHandle`, so a cached pinned
//! route is served without crossing into the library (see
//! `io.racaffinity.Cluster#route()`).

use jni::objects::JByteBuffer;
use jni::sys::{jint, jlong};
use racaffinity_core::{ContextKey, HostLeased, Outcome, RoutingEpoch};

use super::{enum_arg, pack, run, run_cluster_fast, run_fast, run_node_fast, Fail};
use crate::capi::epoch::{hand_out, handed_out_word, release};
use crate::capi::result::{racaffinity_result, Failure};
use crate::capi::types::racaffinity_outcome;

/// Set in a packed route when the answer may be cached under the epoch read
/// before the call (bits 0..40 are the route, see [`pack`]).
const CACHEABLE: jlong = 1 << 40;
/// Set when the library began a host lease for Java (see `contextPickHostLeased`).
const HOST_LEASED: jlong = 1 << 41;
/// Set when the library leased the node because the host lease word was full.
const OVER_CAP: jlong = 1 << 42;

jni_export! {
    /// `long epochPage(long handle)`: a strong reference to the cluster's epoch
    /// page, as a hand-out id (never reissued, unlike the page's address);
    /// free it with `epochPageFree` once nothing reads it.
    fn Java_io_racaffinity_Native_epochPage<'l>(env, h: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(hand_out(c.routing_epoch_page())?.0 as jlong))
    }

    /// `ByteBuffer epochBuffer(long page)`: a direct buffer over the page: the
    /// epoch word, then the host lease table (native order). It is valid while
    /// the page is not freed.
    fn Java_io_racaffinity_Native_epochBuffer<'l>(env, page: jlong) -> JByteBuffer<'l> {
        run(&mut env, |env| {
            if page == 0 {
                return Err(Fail::Core(Failure::new(racaffinity_result::NullArgument, "`page` is 0".to_string())));
            }
            let word = handed_out_word(page as u64).ok_or_else(|| {
                Fail::Core(Failure::new(racaffinity_result::InvalidHandle, format!("no epoch page hand-out {page:#x}")))
            })?;
            // SAFETY: `word` starts the page of a live hand-out: `page_len`
            // bytes of atomics that live until the caller frees the hand-out,
            // which it does only once the buffer is unreachable. Java reads the
            // epoch word and changes the host lease words only with atomic
            // access modes.
            Ok(unsafe { env.new_direct_byte_buffer(word as *mut u8, RoutingEpoch::page_len()) }?)
        })
    }

    /// `void epochPageFree(long page)`: drops the reference `epochPage` made.
    fn Java_io_racaffinity_Native_epochPageFree<'l>(env, page: jlong) {
        run_fast(&mut env, || {
            if page != 0 {
                // Java frees each page once (a Cleaner action), after the
                // buffer over it became unreachable; a repeat is a no-op.
                release(page as u64);
            }
            Ok(())
        })
    }

    /// `long contextRouteCacheable(long handle, long context)`: `contextRoute`,
    /// with bit 40 set when the route may be served from the caller's cache
    /// while the epoch it read before this call is current.
    fn Java_io_racaffinity_Native_contextRouteCacheable<'l>(env, h: jlong, context: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| {
            let (r, cacheable) = c.pick_in_cacheable(ContextKey(context as u64))?;
            Ok(pack(r) | if cacheable { CACHEABLE } else { 0 })
        })
    }

    /// `long contextPickHostLeased(long handle, long context, int stripe, int cap)`:
    /// `contextPick` in one crossing for every route: bit 41 set when the
    /// library began a host lease on the word of `stripe` (Java ends it on the
    /// page), bit 42 when it leased the node itself because that word held
    /// `cap` leases in flight, bit 40 when the route may be cached.
    fn Java_io_racaffinity_Native_contextPickHostLeased<'l>(env, h: jlong, context: jlong, stripe: jint, cap: jint) -> jlong {
        run_cluster_fast(&mut env, h, |c| {
            let (r, cacheable, leased) =
                c.pick_in_host_leased(ContextKey(context as u64), stripe.max(0) as usize, cap.max(0) as u64)?;
            let by = match leased {
                HostLeased::Host => HOST_LEASED,
                HostLeased::OverCap => OVER_CAP,
                HostLeased::No => 0,
            };
            Ok(pack(r) | by | if cacheable { CACHEABLE } else { 0 })
        })
    }

    /// `void hostLeaseEnd(long handle, int node, int outcome)`: the outcome of
    /// a host lease Java already took off its word (a failure, or an end after
    /// the epoch moved).
    fn Java_io_racaffinity_Native_hostLeaseEnd<'l>(env, h: jlong, node: jint, outcome: jint) {
        run_node_fast(&mut env, h, node, |c, node| {
            let outcome: Outcome = enum_arg::<racaffinity_outcome, _>(outcome)?;
            Ok(c.end_host_lease(node, outcome)?)
        })
    }

    /// `void countHostHits(long handle, int node, long count)`: routes Java
    /// served from its cache, merged into the metrics.
    fn Java_io_racaffinity_Native_countHostHits<'l>(env, h: jlong, node: jint, count: jlong) {
        run_node_fast(&mut env, h, node, |c, node| Ok(c.count_host_hits(node, count.max(0) as u64)?))
    }
}
