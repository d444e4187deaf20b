//! XA-side calls of `io.racaffinity.Cluster` (`io.racaffinity.Native`): the
//! soft-mode span counter per node, which the `nodeMetrics` counter layout
//! predates, and the key of an Xid's global transaction.

use jni::objects::{JByteArray, JLongArray};
use jni::sys::{jint, jlong};

use super::{run, with_bytes, with_cluster};

jni_export! {
    /// `long[] nodeTxSpans(long handle)`: per live node, `{id, tx_spans}` pairs,
    /// where `tx_spans` counts the transactions that had branches on the node and
    /// then one placed elsewhere (soft transaction affinity; each is a two-node commit).
    fn Java_io_racaffinity_Native_nodeTxSpans<'l>(env, h: jlong) -> JLongArray<'l> {
        run(&mut env, |env| {
            let pairs = with_cluster(h, |c| {
                let snap = c.metrics();
                Ok(snap
                    .nodes
                    .iter()
                    .flat_map(|n| [jlong::from(n.id.0), n.tx_spans.min(i64::MAX as u64) as jlong])
                    .collect::<Vec<jlong>>())
            })?;
            let out = JLongArray::new(env, pairs.len())?;
            out.set_region(env, 0, &pairs)?;
            Ok(out)
        })
    }

    /// `byte[] xaTransactionKey(int formatId, byte[] gtrid)`: the key the core
    /// registers the XA global transaction under (`xa_transaction_key`), the
    /// same bytes C and Python get for the Xid.
    fn Java_io_racaffinity_Native_xaTransactionKey<'l>(env, format_id: jint, gtrid: JByteArray<'l>) -> JByteArray<'l> {
        run(&mut env, |env| {
            let key = with_bytes(env, &gtrid, "gtrid", |g| Ok(racaffinity_core::xa_transaction_key(format_id, g)))?;
            Ok(env.byte_array_from_slice(&key)?)
        })
    }
}
