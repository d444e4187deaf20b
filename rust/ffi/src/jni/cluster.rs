//! Cluster lifecycle, nodes, settings, failover inputs and metrics
//! (`io.racaffinity.Native`, used by `io.racaffinity.Cluster`).

use jni::objects::{JIntArray, JLongArray, JObject, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::Env;
use racaffinity_core::{Cluster, NodeState, RecoveryScope, Scope};

use super::{
    enum_arg, node_arg, run, run_cluster_fast, run_fast, run_node_fast, run_str, run_to_string, string, with_cluster,
    JResult,
};
use crate::capi::handle;
use crate::capi::result::{racaffinity_result, CEnum, Failure};
use crate::capi::types::{node_id, racaffinity_node_state, racaffinity_scope};
use crate::ops;

fn strings<'local>(env: &mut Env<'local>, items: &[String]) -> JResult<JObjectArray<'local, JString<'local>>> {
    let arr = JObjectArray::<JString>::new(env, items.len(), JString::null())?;
    for (i, s) in items.iter().enumerate() {
        let js = JString::from_str(env, s)?;
        arr.set_element(env, i, &js)?;
        env.delete_local_ref(js);
    }
    Ok(arr)
}

jni_export! {
    /// `String version()`: the library version, checked by the Java loader.
    fn Java_io_racaffinity_Native_version<'l>(env) -> JString<'l> {
        run(&mut env, |env| Ok(JString::from_str(env, racaffinity_core::VERSION)?))
    }

    /// `long noop(long handle, long x)`: returns `x`. The benchmark's baseline for
    /// the cost of one JNI transition through the same wrapper as every call.
    fn Java_io_racaffinity_Native_noop<'l>(env, _h: jlong, x: jlong) -> jlong {
        run_fast(&mut env, || Ok(x))
    }

    /// `String[] exceptionClasses()`: the code → exception class table, indexed
    /// by result code, so the Java tests can check every class exists.
    fn Java_io_racaffinity_Native_exceptionClasses<'l>(env) -> JObjectArray<'l, JString<'l>> {
        run(&mut env, |env| {
            let names: Vec<String> =
                racaffinity_result::ALL.iter().map(|&c| super::exception_class(c).to_str().replace('/', ".")).collect();
            strings(env, &names)
        })
    }

    /// `long clusterNew(String config)`: builds a cluster; returns its handle.
    fn Java_io_racaffinity_Native_clusterNew<'l>(env, config: JString<'l>) -> jlong {
        run(&mut env, |env| {
            let text = string(env, &config, "config")?;
            let h = handle::insert(Cluster::from_config_text(&text)?)?;
            Ok(h as usize as jlong)
        })
    }

    /// `void clusterFree(long handle)`: frees a cluster; a second free throws
    /// `ClusterClosedException` and changes nothing.
    fn Java_io_racaffinity_Native_clusterFree<'l>(env, h: jlong) {
        run_fast(&mut env, || Ok(handle::remove(h as usize as *const handle::racaffinity_cluster)?))
    }

    /// `String clusterName(long handle)`.
    fn Java_io_racaffinity_Native_clusterName<'l>(env, h: jlong) -> JString<'l> {
        run_to_string(&mut env, || with_cluster(h, |c| Ok(c.name().to_string())))
    }

    /// `long heartbeatIntervalMillis(long handle)`: the config's `heartbeat.interval`.
    fn Java_io_racaffinity_Native_heartbeatIntervalMillis<'l>(env, h: jlong) -> jlong {
        run_cluster_fast(&mut env, h, |c| Ok(c.heartbeat_interval_ms().min(i64::MAX as u64) as jlong))
    }

    /// `boolean recoveryIsDatabase(long handle)`: `recovery.scope = database`
    /// (instances of one database) rather than `node`.
    fn Java_io_racaffinity_Native_recoveryIsDatabase<'l>(env, h: jlong) -> jboolean {
        run_cluster_fast(&mut env, h, |c| Ok(c.recovery_scope() == RecoveryScope::Database))
    }

    /// `String[] nodeNames(long handle)`: live node names in id order.
    fn Java_io_racaffinity_Native_nodeNames<'l>(env, h: jlong) -> JObjectArray<'l, JString<'l>> {
        run(&mut env, |env| {
            let names: Vec<String> =
                with_cluster(h, |c| Ok(c.node_ids().into_iter().filter_map(|id| c.node_name(id)).collect()))?;
            strings(env, &names)
        })
    }

    /// `int[] nodeIds(long handle)`: live node ids, ascending.
    fn Java_io_racaffinity_Native_nodeIds<'l>(env, h: jlong) -> JIntArray<'l> {
        run(&mut env, |env| {
            let ids: Vec<jint> = with_cluster(h, |c| Ok(c.node_ids().into_iter().map(|id| id.0 as jint).collect()))?;
            let arr = JIntArray::new(env, ids.len())?;
            arr.set_region(env, 0, &ids)?;
            Ok(arr)
        })
    }

    /// `String nodeName(long handle, int node)`: also for removed nodes.
    fn Java_io_racaffinity_Native_nodeName<'l>(env, h: jlong, node: jint) -> JString<'l> {
        run_to_string(&mut env, || {
            let node = node_arg(node)?;
            with_cluster(h, |c| ops::node_name(c, node_id(node)))
        })
    }

    /// `String nodeAddress(long handle, int node)`: the configured `host:port`,
    /// or "" when the node has none.
    fn Java_io_racaffinity_Native_nodeAddress<'l>(env, h: jlong, node: jint) -> JString<'l> {
        run_to_string(&mut env, || {
            let node = node_arg(node)?;
            with_cluster(h, |c| ops::node_address(c, node_id(node)))
        })
    }

    /// `int nodeFind(long handle, String name)`: a live node's id (case-insensitive).
    fn Java_io_racaffinity_Native_nodeFind<'l>(env, h: jlong, name: JString<'l>) -> jint {
        run_str(&mut env, h, &name, "name", |c, name| Ok(c.node_by_name(name)?.id().0 as jint))
    }

    /// `int nodeState(long handle, int node)`: a `racaffinity_node_state` value
    /// (a removed node reads as Down, as in C).
    fn Java_io_racaffinity_Native_nodeState<'l>(env, h: jlong, node: jint) -> jint {
        run_node_fast(&mut env, h, node, |c, node| Ok(racaffinity_node_state::from(ops::node_state(c, node)?) as jint))
    }

    /// `boolean nodeDownIsPlanned(long handle, int node)`: the Down ended a
    /// planned drain (`racaffinity_node_down_is_planned`).
    fn Java_io_racaffinity_Native_nodeDownIsPlanned<'l>(env, h: jlong, node: jint) -> jboolean {
        run_node_fast(&mut env, h, node, |c, node| Ok(jboolean::from(ops::node_down_is_planned(c, node)?)))
    }

    /// `int nodeSetState(long handle, String name, int state)`: as an operator
    /// would (JMX markUp/markDown/drain); returns the previous state.
    fn Java_io_racaffinity_Native_nodeSetState<'l>(env, h: jlong, name: JString<'l>, state: jint) -> jint {
        run(&mut env, |env| {
            let name = string(env, &name, "name")?;
            let state: NodeState = enum_arg::<racaffinity_node_state, _>(state)?;
            with_cluster(h, |c| Ok(racaffinity_node_state::from(c.set_node_state(&name, state)?) as jint))
        })
    }

    /// `int nodeAdd(long handle, String name, String address, int weight)`:
    /// `address` may be null; `weight` 0 means 1 (as in C). Returns the new id.
    fn Java_io_racaffinity_Native_nodeAdd<'l>(
        env,
        h: jlong,
        name: JString<'l>,
        address: JString<'l>,
        weight: jint,
    ) -> jint {
        run(&mut env, |env| {
            let name = string(env, &name, "name")?;
            let address = if address.is_null() { None } else { Some(string(env, &address, "address")?) };
            let weight = u32::try_from(weight).map_err(|_| {
                Failure::new(
                    racaffinity_result::InvalidArgument,
                    format!("weight must be 1..={}, got {weight}", racaffinity_core::MAX_WEIGHT),
                )
            })?;
            with_cluster(h, |c| Ok(ops::add_node(c, &name, address.as_deref(), weight)?.0 as jint))
        })
    }

    /// `int nodeRemove(long handle, String name)`: returns the removed id.
    fn Java_io_racaffinity_Native_nodeRemove<'l>(env, h: jlong, name: JString<'l>) -> jint {
        run_str(&mut env, h, &name, "name", |c, name| Ok(c.remove_node(name)?.0 as jint))
    }

    /// `void setStrict(long handle, int scope, boolean strict)`.
    fn Java_io_racaffinity_Native_setStrict<'l>(env, h: jlong, scope: jint, strict: jboolean) {
        run_fast(&mut env, || {
            let scope: Scope = enum_arg::<racaffinity_scope, _>(scope)?;
            with_cluster(h, |c| {
                c.set_strict(scope, strict);
                Ok(())
            })
        })
    }

    /// `boolean isStrict(long handle, int scope)`.
    fn Java_io_racaffinity_Native_isStrict<'l>(env, h: jlong, scope: jint) -> jboolean {
        run_fast(&mut env, || {
            let scope: Scope = enum_arg::<racaffinity_scope, _>(scope)?;
            with_cluster(h, |c| Ok(c.is_strict(scope)))
        })
    }

    /// `int eventApply(long handle, String line)`: one FAN event or RLB advisory;
    /// returns the number of node state changes. A failing line changes nothing.
    fn Java_io_racaffinity_Native_eventApply<'l>(env, h: jlong, line: JString<'l>) -> jint {
        run_str(&mut env, h, &line, "line", |c, line| Ok(c.apply_event(line)?.changes.len() as jint))
    }

    /// `boolean feedRecordApply(long handle, long version, String key, String value)`:
    /// one fleet feed record (a null value is a deletion); returns whether it
    /// applied (false: a record with a higher version was already in).
    fn Java_io_racaffinity_Native_feedRecordApply<'l>(
        env,
        h: jlong,
        version: jlong,
        key: JString<'l>,
        value: JString<'l>,
    ) -> jboolean {
        run(&mut env, |env| {
            let key = string(env, &key, "key")?;
            let value = if value.is_null() { None } else { Some(string(env, &value, "value")?) };
            // A Java long carries the full u64 range of revisions bit for bit.
            let version = version as u64;
            with_cluster(h, |c| {
                Ok(c.apply_feed_record(version, &key, value.as_deref())? == racaffinity_core::FeedOutcome::Applied)
            })
        })
    }

    /// `long feedEventPublish(long handle, String line)`: relays a FAN or
    /// RLB line into the topology feed; returns the record's revision.
    fn Java_io_racaffinity_Native_feedEventPublish<'l>(env, h: jlong, line: JString<'l>) -> jlong {
        // The revision's u64 fits a Java long bit for bit.
        run_str(&mut env, h, &line, "line", |c, line| Ok(c.publish_event(line)? as jlong))
    }

    /// `boolean probeReport(long handle, int node, boolean ok)`: a heartbeat
    /// result; returns whether the node's state changed.
    fn Java_io_racaffinity_Native_probeReport<'l>(env, h: jlong, node: jint, ok: jboolean) -> jboolean {
        run_node_fast(&mut env, h, node, |c, node| Ok(c.report_probe(node, ok)?.is_some()))
    }

    /// `boolean outcomeReport(long handle, int node, boolean ok)`: a node-level
    /// success or failure outside a lease; returns whether the state changed.
    fn Java_io_racaffinity_Native_outcomeReport<'l>(env, h: jlong, node: jint, ok: jboolean) -> jboolean {
        run_node_fast(&mut env, h, node, |c, node| Ok(c.report_outcome(node, ok)?.is_some()))
    }

    /// `String metricsJson(long handle)`.
    fn Java_io_racaffinity_Native_metricsJson<'l>(env, h: jlong) -> JString<'l> {
        run_to_string(&mut env, || with_cluster(h, |c| Ok(c.metrics().to_json())))
    }

    /// `String metricsPrometheus(long handle)`.
    fn Java_io_racaffinity_Native_metricsPrometheus<'l>(env, h: jlong) -> JString<'l> {
        run_to_string(&mut env, || with_cluster(h, |c| Ok(c.metrics().to_prometheus())))
    }
}

/// Counters per node in `nodeMetrics`' `long[]`, in this order.
pub(crate) const NODE_COUNTERS: usize = 13;

jni_export! {
    /// `Object[] nodeMetrics(long handle)`: one snapshot of the live nodes as
    /// `{String[] names, String[] downCauses, long[] counters}`, where counters
    /// holds, per node in id order: id, state (`racaffinity_node_state`), weight,
    /// rlb percent (-1 none), picks, affinity hits, repins, strict refusals,
    /// in flight, successes, failures, state changes, probe misses.
    fn Java_io_racaffinity_Native_nodeMetrics<'l>(env, h: jlong) -> JObjectArray<'l> {
        run(&mut env, |env| {
            // Ids from the snapshot itself: a lookup by name afterwards found
            // no node (-1), or another one, for a node removed meanwhile.
            let snap = with_cluster(h, |c| Ok(c.metrics()))?;
            let names: Vec<String> = snap.nodes.iter().map(|n| n.name.clone()).collect();
            let causes: Vec<String> = snap.nodes.iter().map(|n| n.down_cause.to_string()).collect();
            let mut counters: Vec<jlong> = Vec::with_capacity(snap.nodes.len() * NODE_COUNTERS);
            for n in &snap.nodes {
                let sat = |v: u64| v.min(i64::MAX as u64) as jlong;
                counters.extend_from_slice(&[
                    jlong::from(n.id.0),
                    racaffinity_node_state::from(n.state) as jlong,
                    jlong::from(n.weight),
                    jlong::from(n.rlb_percent),
                    sat(n.picks),
                    sat(n.affinity_hits),
                    sat(n.repins),
                    sat(n.strict_refusals),
                    n.in_flight,
                    sat(n.successes),
                    sat(n.failures),
                    sat(n.state_changes),
                    sat(n.probe_misses),
                ]);
            }
            let names = strings(env, &names)?;
            let causes = strings(env, &causes)?;
            let longs = JLongArray::new(env, counters.len())?;
            longs.set_region(env, 0, &counters)?;
            let out = JObjectArray::<JObject>::new(env, 3, JObject::null())?;
            out.set_element(env, 0, &names)?;
            out.set_element(env, 1, &causes)?;
            out.set_element(env, 2, &longs)?;
            Ok(out)
        })
    }
}

/// Counters in `feedStatus`' `long[]`, in this order.
pub(crate) const FEED_COUNTERS: usize = 9;

jni_export! {
    /// `Object[] feedStatus(long handle)`: the topology feed's health, or null
    /// without `topology.feed`: `{String url, String lastError, String
    /// lastRefused, long[] counters}` (the two messages null when there is
    /// none), counters: connected (0/1), revision, leader revision, lag,
    /// applied, stale, refused, reconnects, full reads. A typed view for
    /// JMX and the metrics binders, which would otherwise parse the JSON.
    fn Java_io_racaffinity_Native_feedStatus<'l>(env, h: jlong) -> JObjectArray<'l> {
        run(&mut env, |env| {
            let Some(f) = with_cluster(h, |c| Ok(c.metrics().feed))? else {
                return Ok(JObjectArray::<JObject>::null());
            };
            // Revisions and counts are u64: saturate rather than wrap negative.
            let sat = |v: u64| v.min(i64::MAX as u64) as jlong;
            let counters = [
                jlong::from(f.connected),
                sat(f.revision),
                sat(f.leader_revision),
                sat(f.lag),
                sat(f.applied),
                sat(f.stale),
                sat(f.refused),
                sat(f.reconnects),
                sat(f.full_reads),
            ];
            debug_assert_eq!(counters.len(), FEED_COUNTERS);
            let text = |env: &mut Env<'l>, s: Option<&str>| -> JResult<JObject<'l>> {
                Ok(match s {
                    Some(s) => JString::from_str(env, s)?.into(),
                    None => JObject::null(),
                })
            };
            let url = text(env, Some(&f.url))?;
            let last_error = text(env, f.last_error.as_deref())?;
            let last_refused = text(env, f.last_refused.as_deref())?;
            let longs = JLongArray::new(env, counters.len())?;
            longs.set_region(env, 0, &counters)?;
            let out = JObjectArray::<JObject>::new(env, 4, JObject::null())?;
            out.set_element(env, 0, &url)?;
            out.set_element(env, 1, &last_error)?;
            out.set_element(env, 2, &last_refused)?;
            out.set_element(env, 3, &longs)?;
            Ok(out)
        })
    }
}
