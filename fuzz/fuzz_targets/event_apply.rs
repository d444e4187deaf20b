//! FAN HA events and RLB advisories applied to a cluster
//! (`Cluster::apply_event`), one line after another.
//!
//! Input: the first byte picks a cluster shape (with or without a configured
//! database/service, addresses sharing a host for `NODE` events, static
//! weights, an operator drain); the rest is split at `\n` into event lines
//! (the seed corpus holds tests/vectors/events.json's lines).
//!
//! Properties (README, "Events"):
//! - never a panic;
//! - an `Err` is one of the documented kinds (`EventParse`, `UnknownNode`,
//!   `ForeignEvent`) and **changes nothing**: every node's view (state, down
//!   cause, operator layer, weights, RLB percent/flag/aff, in-flight,
//!   heartbeat misses), the topology epoch, the session affinities and the
//!   whole metrics JSON are byte-for-byte the same before and after;
//! - an `Ok` reports its state changes truthfully: exactly the nodes whose
//!   state moved are listed, each with the right `from` and `to`, and
//!   `revoked`/`advised` only name live nodes.
//!
//! Time is a `ManualClock` that never moves, so nothing changes between the
//! two snapshots but the call under test.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use racaffinity::{Cluster, Config, ErrorKind, ManualClock, NodeId};

const CONFIGS: [&str; 4] = [
    // tests/vectors/events.json's cluster: database/service filters, and two
    // addresses on host h2 (one spelled H2) for NODE events.
    "database = orcl\nservice = svc\nnodes = MYDB1, MYDB2, MYDB3\nnode.MYDB1.address = h1:1521\n\
     node.MYDB2.address = h2:1521\nnode.MYDB3.address = H2:1522",
    // No filters: every database and service is ours.
    "nodes = orcl1, orcl2, orcl_2, orcl_3\nnode.orcl1.address = node1:1521\nnode.orcl2.address = node2\n\
     node.orcl_2.address = [::1]:1521\npolicy = weighted\nsession.placement = rendezvous",
    // Unequal static weights (effective weight falls back to them).
    "database = ORCL\nnodes = MYDB1, MYDB2\nnode.MYDB1.weight = 3\nnode.MYDB2.weight = 7\nnode.MYDB2.address = h2:1",
    // A single node.
    "service = svc\nnodes = orcl1\nnode.orcl1.address = h1:1521",
];

const SESSIONS: [&[u8]; 4] = [b"sess-1", b"sess-2", b"JSESSIONID=8F3A0C2B1D", b"user:alice"];

/// Everything an event could change, in comparable form.
#[derive(Debug, PartialEq)]
struct Snapshot {
    epoch: u64,
    nodes: Vec<String>,
    sessions: Vec<Option<NodeId>>,
    session_count: usize,
    metrics_json: String,
}

fn snapshot(c: &Cluster) -> Snapshot {
    let nodes = c
        .node_ids()
        .into_iter()
        .map(|id| {
            let n = c.node(id).expect("listed id");
            format!(
                "{id:?} {} addr={:?} state={:?} cause={:?} admin={:?} removed={} weight={} eff={} pct={:?} \
                 flag={:?} aff={} inflight={} misses={}",
                n.name(),
                n.address(),
                n.state(),
                n.down_cause(),
                n.admin_state(),
                n.is_removed(),
                n.weight(),
                n.effective_weight(),
                n.rlb_percent(),
                n.rlb_flag(),
                n.affinity_advised(),
                n.in_flight(),
                n.heartbeat_misses(),
            )
        })
        .collect();
    Snapshot {
        epoch: c.epoch(),
        nodes,
        sessions: SESSIONS.iter().map(|k| c.session_node(k)).collect(),
        session_count: c.session_count(),
        metrics_json: c.metrics().to_json(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, lines)) = data.split_first() else { return };
    let config = Config::parse(CONFIGS[usize::from(shape) % CONFIGS.len()]).expect("fixed config");
    let cluster = Cluster::with_clock(config, Arc::new(ManualClock::new(1_000_000))).expect("fixed config builds");
    // Live affinities an advisory could revoke, and an operator layer an
    // event must never lift.
    for k in SESSIONS {
        cluster.session_route(k).expect("all nodes up");
    }
    if shape & 0x80 != 0 {
        let last = cluster.node_ids().len() - 1;
        let name = cluster.node_name(NodeId(last as u32)).expect("node");
        cluster.set_node_state(&name, racaffinity::NodeState::Draining).expect("operator drain");
    }
    for raw in lines.split(|&b| b == b'\n') {
        // `apply_event` takes `&str`; the bindings refuse invalid UTF-8 first.
        let Ok(line) = std::str::from_utf8(raw) else { continue };
        let before = snapshot(&cluster);
        let states_before: Vec<_> =
            cluster.node_ids().into_iter().map(|id| cluster.node(id).unwrap().state()).collect();
        match cluster.apply_event(line) {
            Err(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::EventParse | ErrorKind::UnknownNode | ErrorKind::ForeignEvent),
                    "undocumented error kind {:?} for {line:?}: {e}",
                    e.kind()
                );
                let after = snapshot(&cluster);
                assert_eq!(before, after, "a failed event changed state: {line:?} -> {e}");
            }
            Ok(effect) => {
                let ids = cluster.node_ids();
                for (i, id) in ids.iter().enumerate() {
                    let now = cluster.node(*id).unwrap().state();
                    let listed: Vec<_> = effect.changes.iter().filter(|c| c.node == *id).collect();
                    if now == states_before[i] {
                        assert!(listed.is_empty(), "change reported for unchanged node {id:?}: {line:?} {effect:?}");
                    } else {
                        assert_eq!(listed.len(), 1, "state of {id:?} moved without one reported change: {line:?}");
                        assert_eq!((listed[0].from, listed[0].to), (states_before[i], now), "{line:?}");
                    }
                }
                for id in effect.revoked.iter().chain(&effect.advised) {
                    assert!(ids.contains(id), "effect names a node that is not live: {id:?}");
                }
            }
        }
    }
});
