//! Routing calls: explicit pin contexts, leases, XA transactions, web
//! sessions, data keys and whole requests. Routes return packed `long`s (see
//! [`super::pack`]).
//!
//! Java pins use the core's explicit context keys, never the OS-thread pins
//! of `racaffinity_thread_pin`: a Java thread (and above all a virtual thread,
//! which shares carrier OS threads) is not an OS thread.

use jni::objects::{JByteArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};
use racaffinity_core::{Cluster, ContextKey, DataKey, Outcome, RouteRequest};

use super::{
    enum_arg, node_arg, pack, run, run_bytes, run_cluster_fast, run_fast, run_node_fast, string, with_bytes,
    with_cluster, with_opt_bytes, JResult,
};
use crate::capi::result::{racaffinity_result, Failure};
use crate::capi::types::{node_id, racaffinity_outcome};
use crate::ops;

fn ctx(key: jlong) -> ContextKey {
    ContextKey(key as u64)
}

jni_export! {
    /// `long contextNew(long handle)`: a fresh pin context key.
    fn Java_io_racaffinity_Native_contextNew<'l>(env, h: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(c.new_context_key().0 as jlong))
    }

    /// `long contextPin(long handle, long context)`: pins (or deepens the pin of)
    /// a context; returns the pinned route.
    fn Java_io_racaffinity_Native_contextPin<'l>(env, h: jlong, context: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(pack(c.pin_context(ctx(context))?)))
    }

    /// `boolean contextUnpin(long handle, long context)`: releases one level;
    /// returns whether the pin is gone.
    fn Java_io_racaffinity_Native_contextUnpin<'l>(env, h: jlong, context: jlong) -> jboolean {
        run_cluster_fast(&mut env, h, |c| Ok(c.unpin_context(ctx(context))))
    }

    /// `boolean contextRelease(long handle, long context)`: releases every level
    /// (a Java thread that died pinned); returns whether a pin existed.
    fn Java_io_racaffinity_Native_contextRelease<'l>(env, h: jlong, context: jlong) -> jboolean {
        run_cluster_fast(&mut env, h, |c| Ok(c.release_context(ctx(context))))
    }

    /// `int contextPinnedNode(long handle, long context)`: the pinned node, or -1.
    fn Java_io_racaffinity_Native_contextPinnedNode<'l>(env, h: jlong, context: jlong) -> jint {
        run_cluster_fast(&mut env, h, |c| Ok(c.context_pinned_node(ctx(context)).map_or(-1, |n| n.0 as jint)))
    }

    /// `long contextRoute(long handle, long context)`: the context's pin, else
    /// load balancing (or a new pin with `thread.auto_pin`), without a lease.
    fn Java_io_racaffinity_Native_contextRoute<'l>(env, h: jlong, context: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(pack(c.pick_in(ctx(context))?)))
    }

    /// `long contextPick(long handle, long context)`: like `contextRoute`, and
    /// leases the node (release with `leaseEnd`).
    fn Java_io_racaffinity_Native_contextPick<'l>(env, h: jlong, context: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| {
            let r = c.pick_in(ctx(context))?;
            c.begin_lease(r.node);
            Ok(pack(r))
        })
    }
}

/// The optional affinities of a request as Java passes them: a null array
/// is "none"; the rules that combine them are [`ops::route_request`]'s.
struct RequestArgs<'a, 'l> {
    key: &'a JByteArray<'l>,
    key_i64: jlong,
    key_is_i64: jboolean,
    session: &'a JByteArray<'l>,
    context: jlong,
}

impl RequestArgs<'_, '_> {
    /// Calls `f` with the request for `transaction` and these affinities.
    fn with<R>(
        &self,
        env: &Env<'_>,
        transaction: Option<&[u8]>,
        f: impl FnOnce(&RouteRequest<'_>) -> JResult<R>,
    ) -> JResult<R> {
        with_opt_bytes(env, self.key, "key", |key| {
            with_opt_bytes(env, self.session, "session", |session| {
                let key_i64 = self.key_is_i64.then_some(self.key_i64);
                f(&ops::route_request(transaction, key, key_i64, session, self.context as u64))
            })
        })
    }
}

/// [`run`] for `requestPick` and `requestRoute`: `gtrid` is optional.
fn run_request(
    env: &mut EnvUnowned<'_>,
    h: jlong,
    gtrid: &JByteArray<'_>,
    args: RequestArgs<'_, '_>,
    f: impl FnOnce(&Cluster, &RouteRequest<'_>) -> Result<jlong, Failure>,
) -> jlong {
    run(env, |env| {
        with_opt_bytes(env, gtrid, "gtrid", |gtrid| args.with(env, gtrid, |req| with_cluster(h, |c| f(c, req))))
    })
}

jni_export! {
    /// `long requestPick(long handle, byte[] gtrid, byte[] key, long keyI64,
    /// boolean keyIsI64, byte[] session, long context)`: routes a unit of work
    /// that may hold several affinities by the core's precedence
    /// (`Cluster::route`: transaction, data key, session, the context's pin or
    /// load balancing) and leases the node like `contextPick` (release with
    /// `leaseEnd`). A null array is "none"; `keyIsI64` routes by `keyI64`
    /// instead of `key`; `context` 0 is "none" (the OS thread's pin).
    #[allow(clippy::too_many_arguments)]
    fn Java_io_racaffinity_Native_requestPick<'l>(
        env,
        h: jlong,
        gtrid: JByteArray<'l>,
        key: JByteArray<'l>,
        key_i64: jlong,
        key_is_i64: jboolean,
        session: JByteArray<'l>,
        context: jlong,
    ) -> jlong {
        let args = RequestArgs { key: &key, key_i64, key_is_i64, session: &session, context };
        run_request(&mut env, h, &gtrid, args, |c, req| {
            let r = c.route(req)?;
            c.begin_lease(r.node);
            Ok(pack(r))
        })
    }

    /// `long requestRoute(long handle, byte[] gtrid, byte[] key, long keyI64,
    /// boolean keyIsI64, byte[] session, long context)`: like `requestPick`,
    /// without a lease (as `contextRoute`).
    #[allow(clippy::too_many_arguments)]
    fn Java_io_racaffinity_Native_requestRoute<'l>(
        env,
        h: jlong,
        gtrid: JByteArray<'l>,
        key: JByteArray<'l>,
        key_i64: jlong,
        key_is_i64: jboolean,
        session: JByteArray<'l>,
        context: jlong,
    ) -> jlong {
        let args = RequestArgs { key: &key, key_i64, key_is_i64, session: &session, context };
        run_request(&mut env, h, &gtrid, args, |c, req| Ok(pack(c.route(req)?)))
    }

    /// `long requestRepick(long handle, byte[] key, long keyI64, boolean keyIsI64,
    /// byte[] session, long context, int failed)`: after node `failed` could not
    /// give the request a connection, routes it again away from that node and
    /// moves the affinity that chose it (`Cluster::reroute`), leasing the new
    /// node like `requestPick`. -1: no retry (a strict scope, or no other usable
    /// node). No gtrid: a transaction's branch is never rerouted.
    #[allow(clippy::too_many_arguments)]
    fn Java_io_racaffinity_Native_requestRepick<'l>(
        env,
        h: jlong,
        key: JByteArray<'l>,
        key_i64: jlong,
        key_is_i64: jboolean,
        session: JByteArray<'l>,
        context: jlong,
        failed: jint,
    ) -> jlong {
        let args = RequestArgs { key: &key, key_i64, key_is_i64, session: &session, context };
        run(&mut env, |env| {
            let failed = node_id(node_arg(failed)?);
            args.with(env, None, |req| {
                with_cluster(h, |c| {
                    Ok(match c.reroute(req, failed)? {
                        Some(r) => {
                            c.begin_lease(r.node);
                            pack(r)
                        }
                        None => -1,
                    })
                })
            })
        })
    }
}

jni_export! {
    /// `void leaseBegin(long handle, int node)`: leases a node that another call
    /// routed to (transaction, session or key route).
    fn Java_io_racaffinity_Native_leaseBegin<'l>(env, h: jlong, node: jint) {
        run_node_fast(&mut env, h, node, ops::begin_lease)
    }

    /// `void leaseEnd(long handle, int node, int outcome)`: ends one lease with a
    /// `racaffinity_outcome`. The Java `Lease` object guarantees exactly once.
    fn Java_io_racaffinity_Native_leaseEnd<'l>(env, h: jlong, node: jint, outcome: jint) {
        run_fast(&mut env, || {
            let node = node_arg(node)?;
            let outcome: Outcome = enum_arg::<racaffinity_outcome, _>(outcome)?;
            with_cluster(h, |c| Ok(c.try_end_lease(node_id(node), outcome)?))
        })
    }

    /// `long txBegin(long handle, byte[] gtrid)`: begins or joins a branch.
    fn Java_io_racaffinity_Native_txBegin<'l>(env, h: jlong, gtrid: JByteArray<'l>) -> jlong {
        run_bytes(&mut env, h, &gtrid, "gtrid", |c, g| Ok(pack(c.tx_begin(g)?)))
    }

    /// `long txBeginOn(long handle, byte[] gtrid, int preferred)`: a new gtrid
    /// is placed on `preferred` when that node accepts new work (else strict
    /// refuses, soft places as `txBegin`).
    fn Java_io_racaffinity_Native_txBeginOn<'l>(env, h: jlong, gtrid: JByteArray<'l>, preferred: jint) -> jlong {
        run(&mut env, |env| {
            let preferred = node_arg(preferred)?;
            with_bytes(env, &gtrid, "gtrid", |g| {
                with_cluster(h, |c| Ok(pack(c.tx_begin_on(g, Some(node_id(preferred)))?)))
            })
        })
    }
}

jni_export! {
    /// `long txBeginFor(long handle, byte[] gtrid, byte[] key, long keyI64,
    /// boolean keyIsI64, byte[] session, String token, long context)`: begins
    /// or joins a branch; a new gtrid is placed where the request's other
    /// affinities point (`Cluster::tx_begin_for`: data key, the session
    /// routing token's node, session, the context's pin, else the placement
    /// policy). The optional arguments are as for `requestPick`; `token` may
    /// be null.
    #[allow(clippy::too_many_arguments)]
    fn Java_io_racaffinity_Native_txBeginFor<'l>(
        env,
        h: jlong,
        gtrid: JByteArray<'l>,
        key: JByteArray<'l>,
        key_i64: jlong,
        key_is_i64: jboolean,
        session: JByteArray<'l>,
        token: JString<'l>,
        context: jlong,
    ) -> jlong {
        let args = RequestArgs { key: &key, key_i64, key_is_i64, session: &session, context };
        run(&mut env, |env| {
            let token = if token.is_null() { None } else { Some(string(env, &token, "token")?) };
            with_bytes(env, &gtrid, "gtrid", |g| {
                args.with(env, None, |req| {
                    let req = RouteRequest { token: token.as_deref(), ..*req };
                    with_cluster(h, |c| Ok(pack(c.tx_begin_for(g, &req)?)))
                })
            })
        })
    }
}

jni_export! {
    /// `long txRoute(long handle, byte[] gtrid)`: where 2PC commands go.
    fn Java_io_racaffinity_Native_txRoute<'l>(env, h: jlong, gtrid: JByteArray<'l>) -> jlong {
        run_bytes(&mut env, h, &gtrid, "gtrid", |c, g| Ok(pack(c.tx_route(g)?)))
    }

    /// `int txPrepared(long handle, byte[] gtrid)`: marks a branch prepared;
    /// returns the owning node id.
    fn Java_io_racaffinity_Native_txPrepared<'l>(env, h: jlong, gtrid: JByteArray<'l>) -> jint {
        run_bytes(&mut env, h, &gtrid, "gtrid", |c, g| Ok(c.tx_prepared(g)?.0 as jint))
    }

    /// `int txEnd(long handle, byte[] gtrid)`: ends one branch; returns the node id.
    fn Java_io_racaffinity_Native_txEnd<'l>(env, h: jlong, gtrid: JByteArray<'l>) -> jint {
        run_bytes(&mut env, h, &gtrid, "gtrid", |c, g| Ok(c.tx_end(g)?.0 as jint))
    }

    /// `int txComplete(long handle, byte[] gtrid)`: forgets the whole transaction.
    fn Java_io_racaffinity_Native_txComplete<'l>(env, h: jlong, gtrid: JByteArray<'l>) -> jint {
        run_bytes(&mut env, h, &gtrid, "gtrid", |c, g| Ok(c.tx_complete(g)?.0 as jint))
    }

    /// `void txRecovered(long handle, byte[] gtrid, int node)`: `node` returned
    /// `gtrid` from a recovery scan.
    fn Java_io_racaffinity_Native_txRecovered<'l>(env, h: jlong, gtrid: JByteArray<'l>, node: jint) {
        run(&mut env, |env| {
            let node = node_arg(node)?;
            with_bytes(env, &gtrid, "gtrid", |g| with_cluster(h, |c| Ok(c.tx_recovered(g, node_id(node))?)))
        })
    }

    /// `long sessionRoute(long handle, byte[] key)`.
    fn Java_io_racaffinity_Native_sessionRoute<'l>(env, h: jlong, key: JByteArray<'l>) -> jlong {
        run_bytes(&mut env, h, &key, "key", |c, k| Ok(pack(c.session_route(k)?)))
    }

    /// `boolean sessionEnd(long handle, byte[] key)`: whether it had an affinity.
    fn Java_io_racaffinity_Native_sessionEnd<'l>(env, h: jlong, key: JByteArray<'l>) -> jboolean {
        run_bytes(&mut env, h, &key, "key", |c, k| Ok(c.session_end(k)?))
    }

    /// `long keyRoute(long handle, byte[] key)`: data affinity by byte key.
    fn Java_io_racaffinity_Native_keyRoute<'l>(env, h: jlong, key: JByteArray<'l>) -> jlong {
        run_bytes(&mut env, h, &key, "key", |c, k| Ok(pack(c.route_key(k)?)))
    }

    /// `long keyRouteLong(long handle, long key)`: data affinity by integer key.
    fn Java_io_racaffinity_Native_keyRouteLong<'l>(env, h: jlong, key: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(pack(c.route_key_i64(key)?)))
    }

    /// `int keyPartition(long handle, byte[] key)`.
    fn Java_io_racaffinity_Native_keyPartition<'l>(env, h: jlong, key: JByteArray<'l>) -> jint {
        run_bytes(&mut env, h, &key, "key", |c, k| Ok(c.partition_of(DataKey::Bytes(k))? as jint))
    }

    /// `int keyPartitionLong(long handle, long key)`.
    fn Java_io_racaffinity_Native_keyPartitionLong<'l>(env, h: jlong, key: jlong) -> jint {
        run_cluster_fast(&mut env, h, |c| Ok(c.partition_of(DataKey::Int(key))? as jint))
    }

    /// `int partitionOwner(long handle, int partition)`: the owner, ignoring state.
    fn Java_io_racaffinity_Native_partitionOwner<'l>(env, h: jlong, partition: jint) -> jint {
        run_fast(&mut env, || {
            let p = u32::try_from(partition).map_err(|_| {
                Failure::new(racaffinity_result::InvalidArgument, format!("partition {partition} is negative"))
            })?;
            with_cluster(h, |c| Ok(c.partition_owner(p)?.0 as jint))
        })
    }
}
