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
//!   whole metrics snapshot (what the JSON renders) are the same before and after;
//! - an `Ok` reports its state changes truthfully: exactly the nodes whose
//!   state moved are listed, each with the right `from` and `to`, and
//!   `revoked`/`advised` only name live nodes.
//!
//! Time is a `ManualClock` that never moves, so nothing changes between the
//! two snapshots but the call under test.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use racaffinity::event::RlbFlag;
use racaffinity::{Cluster, Config, DownCause, ErrorKind, ManualClock, MetricsSnapshot, NodeId, NodeState};

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
    nodes: Vec<NodeView>,
    sessions: Vec<Option<NodeId>>,
    session_count: usize,
    /// The metrics as a value: `to_json` renders exactly this (a `&self`
    /// method), so equal snapshots mean byte-equal JSON. Comparing values
    /// instead of rendered text (twice per line) more than doubled the speed.
    metrics: MetricsSnapshot,
}

/// One node's view.
#[derive(Debug, PartialEq)]
struct NodeView {
    id: NodeId,
    name: String,
    address: Option<String>,
    state: NodeState,
    cause: DownCause,
    admin: NodeState,
    removed: bool,
    weight: u32,
    effective: u32,
    percent: Option<u8>,
    flag: Option<RlbFlag>,
    aff: bool,
    in_flight: i64,
    misses: u32,
}

fn snapshot(c: &Cluster) -> Snapshot {
    let nodes = c
        .node_ids()
        .into_iter()
        .map(|id| {
            let n = c.node(id).expect("listed id");
            NodeView {
                id,
                name: n.name().to_string(),
                address: n.address(),
                state: n.state(),
                cause: n.down_cause(),
                admin: n.admin_state(),
                removed: n.is_removed(),
                weight: n.weight(),
                effective: n.effective_weight(),
                percent: n.rlb_percent(),
                flag: n.rlb_flag(),
                aff: n.affinity_advised(),
                in_flight: n.in_flight(),
                misses: n.heartbeat_misses(),
            }
        })
        .collect();
    Snapshot {
        epoch: c.epoch(),
        nodes,
        sessions: SESSIONS.iter().map(|k| c.session_node(k)).collect(),
        session_count: c.session_count(),
        metrics: c.metrics(),
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
        cluster.set_node_state(&name, NodeState::Draining).expect("operator drain");
    }
    // Nothing changes between two lines (the clock never moves), so the
    // state after one line is the state before the next: one snapshot a line.
    let mut before = snapshot(&cluster);
    for raw in lines.split(|&b| b == b'\n') {
        // `apply_event` takes `&str`; the bindings refuse invalid UTF-8 first.
        let Ok(line) = std::str::from_utf8(raw) else { continue };
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
                before = after;
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
                before = snapshot(&cluster);
            }
        }
    }
});
