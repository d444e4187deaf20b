//! Topology-feed records applied to a cluster (`Cluster::apply_feed_record`),
//! one after another: what a subscriber hands the core for every key it
//! reads under its prefix, written by operators, tools and other processes.
//!
//! Input: the first byte picks a cluster shape; the rest is split at `\n`
//! into records `<version> <key>[ <value>]` (no value: a deleted key; a
//! version that does not read as a number is the line's position).
//!
//! Properties (docs/operations.md, "Feed records"):
//! - never a panic;
//! - an `Err` is one of the documented kinds (`InvalidArgument`,
//!   `UnknownNode`, or a `fan/` line's `EventParse` / `ForeignEvent`) and
//!   **changes nothing**: the fingerprint, every node's name, address,
//!   state, operator layer, weight and removal, the partition owners and the
//!   whole metrics snapshot are the same before and after;
//! - a record applied again at its version changes nothing (records arrive
//!   twice: a watch and a re-read after a reconnect).
//!
//! Time is a `ManualClock` that never moves.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use racaffinity::{Cluster, Config, ErrorKind, ManualClock, MetricsSnapshot, NodeState};

const CONFIGS: [&str; 3] = [
    "nodes = A, B, C\nnode.A.address = h1:1521\nnode.B.address = h2:1521\ndata.partitions = 8",
    "database = orcl\nservice = svc\nnodes = orcl_1, orcl_2\ntransaction.strict = true\ntransaction.settle = 3s",
    "nodes = A\nnode.A.weight = 5",
];

#[derive(Debug, PartialEq)]
struct Snapshot {
    fingerprint: String,
    nodes: Vec<(String, Option<String>, NodeState, NodeState, u32, bool)>,
    owners: Vec<Option<u32>>,
    metrics: MetricsSnapshot,
}

fn snapshot(c: &Cluster) -> Snapshot {
    let nodes = c
        .node_ids()
        .into_iter()
        .map(|id| {
            let n = c.node(id).expect("listed id");
            (n.name().to_string(), n.address(), n.state(), n.admin_state(), n.weight(), n.is_removed())
        })
        .collect();
    Snapshot {
        fingerprint: c.topology_fingerprint(),
        nodes,
        owners: (0..8).map(|p| c.partition_owner(p).ok().map(|n| n.0)).collect(),
        metrics: c.metrics(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, lines)) = data.split_first() else { return };
    let config = Config::parse(CONFIGS[usize::from(shape) % CONFIGS.len()]).expect("fixed config");
    let cluster = Cluster::with_clock(config, Arc::new(ManualClock::new(1_000_000))).expect("fixed config builds");
    let mut before = snapshot(&cluster);
    for (i, raw) in lines.split(|&b| b == b'\n').enumerate() {
        // Keys and values come from etcd as bytes; the subscriber refuses
        // invalid UTF-8 before the core sees them.
        let Ok(line) = std::str::from_utf8(raw) else { continue };
        let (version, rest) = match line.split_once(' ') {
            Some((v, rest)) => (v.parse().unwrap_or(i as u64 + 1), rest),
            None => (i as u64 + 1, line),
        };
        let (key, value) = match rest.split_once(' ') {
            Some((k, v)) => (k, Some(v)),
            None => (rest, None),
        };
        match cluster.apply_feed_record(version, key, value) {
            Err(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        ErrorKind::InvalidArgument
                            | ErrorKind::UnknownNode
                            | ErrorKind::EventParse
                            | ErrorKind::ForeignEvent
                    ),
                    "undocumented error kind {:?} for {line:?}: {e}",
                    e.kind()
                );
                let after = snapshot(&cluster);
                assert_eq!(before, after, "a refused record changed state: {line:?} -> {e}");
                before = after;
            }
            Ok(_) => {
                let once = snapshot(&cluster);
                let again = cluster.apply_feed_record(version, key, value);
                assert!(again.is_ok(), "a record applied once is refused again: {line:?} -> {again:?}");
                let twice = snapshot(&cluster);
                assert_eq!(
                    (&once.fingerprint, &once.nodes, &once.owners),
                    (&twice.fingerprint, &twice.nodes, &twice.owners),
                    "a record applied again at its version changed state: {line:?}"
                );
                before = twice;
            }
        }
    }
});
