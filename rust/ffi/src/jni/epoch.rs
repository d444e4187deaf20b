//! The routing epoch for Java: the page as a direct `ByteBuffer` that Java
//! reads with acquire semantics through a `VarHandle`, so a cached pinned
//! route is served without crossing into the library (see
//! `io.racaffinity.Cluster#route()`).

use jni::objects::JByteBuffer;
use jni::sys::{jint, jlong};
use racaffinity_core::ContextKey;

use super::{pack, run, run_cluster_fast, run_fast, run_node_fast, Fail};
use crate::capi::epoch::{page_into_raw, page_release};
use crate::capi::result::{racaffinity_result, Failure};

/// Set in a packed route when the answer may be cached under the epoch read
/// before the call (bits 0..40 are the route, see [`pack`]).
const CACHEABLE: jlong = 1 << 40;

jni_export! {
    /// `long epochPage(long handle)`: a strong reference to the cluster's epoch
    /// page, as its address; free it with `epochPageFree` once nothing reads it.
    fn Java_io_racaffinity_Native_epochPage<'l>(env, h: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(page_into_raw(c.routing_epoch_page()) as jlong))
    }

    /// `ByteBuffer epochBuffer(long page)`: a direct buffer over the epoch word
    /// (8 bytes, native order). It is valid while the page is not freed.
    fn Java_io_racaffinity_Native_epochBuffer<'l>(env, page: jlong) -> JByteBuffer<'l> {
        run(&mut env, |env| {
            if page == 0 {
                return Err(Fail::Core(Failure::new(racaffinity_result::NullArgument, "`page` is 0".to_string())));
            }
            // SAFETY: `page` is an address from `epochPage` that the caller has
            // not freed: 8 bytes of an `AtomicU64` that live until it frees it.
            // Java only reads the buffer (Cluster keeps it read-only).
            Ok(unsafe { env.new_direct_byte_buffer(page as usize as *mut u8, 8) }?)
        })
    }

    /// `void epochPageFree(long page)`: drops the reference `epochPage` made.
    fn Java_io_racaffinity_Native_epochPageFree<'l>(env, page: jlong) {
        run_fast(&mut env, || {
            if page != 0 {
                // Java frees each page once (a Cleaner action), after the
                // buffer over it became unreachable; a repeat is a no-op.
                page_release(page as usize as *const u64);
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

    /// `void countHostHits(long handle, int node, long count)`: routes Java
    /// served from its cache, merged into the metrics.
    fn Java_io_racaffinity_Native_countHostHits<'l>(env, h: jlong, node: jint, count: jlong) {
        run_node_fast(&mut env, h, node, |c, node| Ok(c.count_host_hits(node, count.max(0) as u64)?))
    }
}
