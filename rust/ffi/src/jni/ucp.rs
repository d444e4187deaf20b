//! Seed 002 (UCP) parity for Java (`io.racaffinity.Native`, used by
//! `io.racaffinity.Cluster`): a context pinned by a scope's rules (UCP's
//! connection affinity context) and the partition map replaced as a whole.
//! The C ABI twins are in `capi/ucp.rs`; the rules both share are in
//! [`crate::ops`].

use jni::objects::{JIntArray, JObjectArray, JString};
use jni::sys::{jint, jlong};
use racaffinity_core::ContextKey;

use super::{enum_arg, pack, run, run_cluster_fast, string, with_cluster};
use crate::capi::result::{racaffinity_result, Failure};
use crate::capi::types::racaffinity_scope;
use crate::ops;

jni_export! {
    /// `long contextPinFor(long handle, long context, int scope)`: pins (or
    /// deepens the pin of) a context by the rules of `scope` (`Scope` ordinal:
    /// TRANSACTION obeys `transaction.strict`, SESSION obeys `session.strict`
    /// and is released by `aff=FALSE`); returns the packed route.
    fn Java_io_racaffinity_Native_contextPinFor<'l>(env, h: jlong, context: jlong, scope: jint) -> jlong {
        run_cluster_fast(&mut env, h, |c| {
            let scope = enum_arg::<racaffinity_scope, _>(scope)?;
            Ok(pack(c.pin_context_for(ContextKey(context as u64), scope)?))
        })
    }

    /// `long partitionMapReplace(long handle, int[] partitions, String[] nodes,
    /// String source)`: replaces the whole explicit partition → node map
    /// (`partitions[i]` → `nodes[i]`); returns the map's new epoch. Any bad
    /// entry changes nothing.
    fn Java_io_racaffinity_Native_partitionMapReplace<'l>(
        env,
        h: jlong,
        partitions: JIntArray<'l>,
        nodes: JObjectArray<'l, JString<'l>>,
        source: JString<'l>,
    ) -> jlong {
        run(&mut env, |env| {
            if partitions.is_null() || nodes.is_null() {
                let name = if partitions.is_null() { "partitions" } else { "nodes" };
                return Err(Failure::null(name).into());
            }
            let source = string(env, &source, "source")?;
            let len = partitions.len(env)?;
            if nodes.len(env)? != len {
                return Err(Failure::new(
                    racaffinity_result::InvalidArgument,
                    format!("{len} partitions but {} nodes", nodes.len(env)?),
                )
                .into());
            }
            ops::partition_map_len(len)?;
            let mut ids = vec![0i32; len];
            partitions.get_region(env, 0, &mut ids)?;
            let mut map = Vec::with_capacity(len);
            for (i, &p) in ids.iter().enumerate() {
                let name = nodes.get_element(env, i)?;
                let text = string(env, &name, "nodes[i]")?;
                env.delete_local_ref(name);
                let p = u32::try_from(p).map_err(|_| {
                    Failure::new(racaffinity_result::InvalidArgument, format!("partition {p} is out of range"))
                })?;
                map.push((p, text));
            }
            let map: Vec<(u32, &str)> = map.iter().map(|(p, n)| (*p, n.as_str())).collect();
            let epoch = with_cluster(h, |c| Ok(c.replace_partition_map(&map, &source)?))?;
            Ok(epoch.min(i64::MAX as u64) as jlong)
        })
    }

    /// `void partitionMapLoadFailed(long handle, String source, String error)`:
    /// the host's loader failed; the map stays and the metrics count it.
    fn Java_io_racaffinity_Native_partitionMapLoadFailed<'l>(env, h: jlong, source: JString<'l>, error: JString<'l>) {
        run(&mut env, |env| {
            let source = string(env, &source, "source")?;
            let error = string(env, &error, "error")?;
            with_cluster(h, |c| Ok(c.partition_map_load_failed(&source, &error)?))
        })
    }
}
