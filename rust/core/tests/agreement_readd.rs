//! Agreement across processes (two clusters stand for two processes) for
//! inputs about one name across its removal and re-addition, for
//! cluster-wide FAN events and nodes added later, and for a deleted weight
//! record: the same inputs in any order (or a watcher against a process that
//! re-read the log after a compaction) end in the same state. Each test
//! failed before its fix (review of 2026-12-05).
mod common;

use common::cluster_with_clock;
use racaffinity::{Cluster, ManualClock, NodeSpec};

const CFG: &str = "nodes = A, B, C\ntransaction.strict = true\ntransaction.settle = 3s";

fn two() -> (Cluster, Cluster, ManualClock, ManualClock) {
    let (cp, cq) = (ManualClock::new(1_000_000), ManualClock::new(1_000_000));
    (cluster_with_clock(CFG, &cp), cluster_with_clock(CFG, &cq), cp, cq)
}

fn view(c: &Cluster) -> Vec<String> {
    ["A", "B", "C", "E", "N15384", "N6403"]
        .iter()
        .filter_map(|n| c.node_by_name(n).ok())
        .map(|n| {
            format!("{}:{}:shared={}:w={}:addr={:?}", n.name(), n.state(), n.shared_state(), n.weight(), n.address())
        })
        .collect()
}

/// Gtrids the two place on different nodes (None = refused).
fn split_gtrids(p: &Cluster, q: &Cluster) -> Vec<String> {
    (0..200)
        .filter_map(|i| {
            let g = format!("g-{i}");
            let a = p.tx_begin(g.as_bytes()).map(|r| p.node_name(r.node).unwrap()).map_err(|e| e.to_string());
            let b = q.tx_begin(g.as_bytes()).map(|r| q.node_name(r.node).unwrap()).map_err(|e| e.to_string());
            let _ = p.tx_complete(g.as_bytes());
            let _ = q.tx_complete(g.as_bytes());
            (a != b).then(|| format!("{g}: {a:?} vs {b:?}"))
        })
        .collect()
}

fn settle(cs: &[&ManualClock]) {
    for c in cs {
        c.advance_ms(10_000);
    }
}

fn report(p: &Cluster, q: &Cluster) -> (Vec<String>, Vec<String>, Vec<String>) {
    let s = split_gtrids(p, q);
    let (vp, vq) = (view(p), view(q));
    eprintln!("P: {vp:?}\nQ: {vq:?}\nsplit gtrids: {} of 200, e.g. {:?}", s.len(), &s[..s.len().min(3)]);
    (vp, vq, s)
}

/// Feed records of a runtime-added node: present@10, state down@15,
/// removed@20, present@30. P applies them in revision order (a watcher);
/// Q applies them in another order (all accepted, no error).
#[test]
fn a_readded_node_takes_its_state_whatever_the_order() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    let recs: [(u64, &str, Option<&str>); 4] = [
        (10, "node/E", Some("present")),
        (15, "node/E/state", Some("down")),
        (20, "node/E", Some("removed")),
        (30, "node/E", Some("present")),
    ];
    for i in [0, 1, 2, 3] {
        let (v, k, val) = recs[i];
        eprintln!("P {v} {k} {val:?} -> {:?}", p.apply_feed_record(v, k, val));
    }
    for i in [0, 2, 3, 1] {
        let (v, k, val) = recs[i];
        eprintln!("Q {v} {k} {val:?} -> {:?}", q.apply_feed_record(v, k, val));
    }
    settle(&[&cp, &cq]);
    let (vp, vq, _s) = report(&p, &q);
    assert_eq!(vp, vq, "same records, different state");
}

/// The same log, Q being a process that reads the prefix after a
/// compaction (only the latest record of each key, in revision order, a
/// record about an unknown node retried after the batch, as the subscriber does).
#[test]
fn a_readded_node_agrees_between_a_watcher_and_a_full_read() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    for (v, k, val) in [
        (10, "node/E", Some("present")),
        (15, "node/E/state", Some("down")),
        (20, "node/E", Some("removed")),
        (30, "node/E", Some("present")),
    ] {
        eprintln!("P(watch) {v} {k} {val:?} -> {:?}", p.apply_feed_record(v, k, val));
    }
    // Full read: node/E/state@15 and node/E@30 are what etcd still holds.
    eprintln!("Q(read) 15 node/E/state -> {:?}", q.apply_feed_record(15, "node/E/state", Some("down")));
    eprintln!("Q(read) 30 node/E -> {:?}", q.apply_feed_record(30, "node/E", Some("present")));
    eprintln!("Q(retry) 15 node/E/state -> {:?}", q.apply_feed_record(15, "node/E/state", Some("down")));
    settle(&[&cp, &cq]);
    let (vp, vq, _s) = report(&p, &q);
    assert_eq!(vp, vq, "watcher and re-reader differ");
}

/// Same with a configured node (A): no record is ever refused.
#[test]
fn a_readded_configured_node_agrees_between_a_watcher_and_a_full_read() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    for (v, k, val) in
        [(15, "node/A/state", Some("down")), (20, "node/A", Some("removed")), (30, "node/A", Some("present"))]
    {
        eprintln!("P(watch) {v} {k} {val:?} -> {:?}", p.apply_feed_record(v, k, val));
    }
    for (v, k, val) in [(15, "node/A/state", Some("down")), (30, "node/A", Some("present"))] {
        eprintln!("Q(read) {v} {k} {val:?} -> {:?}", q.apply_feed_record(v, k, val));
    }
    settle(&[&cp, &cq]);
    let (vp, vq, s) = report(&p, &q);
    assert!(s.is_empty() && vp == vq, "watcher and re-reader differ");
}

/// Versioned weight applied to an incarnation later removed is lost.
#[test]
fn a_readded_node_takes_its_versioned_weight_whatever_the_order() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    // P: add@10, weight 50@35, remove@20, add@30. Q: 10, 20, 30, 35.
    p.add_node_at(NodeSpec::new("E"), 10).unwrap();
    eprintln!("P weight@35 -> {:?}", p.set_node_weight_at("E", 50, 35));
    eprintln!("P remove@20 -> {:?}", p.remove_node_at("E", 20));
    eprintln!("P add@30 -> {:?}", p.add_node_at(NodeSpec::new("E"), 30));
    q.add_node_at(NodeSpec::new("E"), 10).unwrap();
    eprintln!("Q remove@20 -> {:?}", q.remove_node_at("E", 20));
    eprintln!("Q add@30 -> {:?}", q.add_node_at(NodeSpec::new("E"), 30));
    eprintln!("Q weight@35 -> {:?}", q.set_node_weight_at("E", 50, 35));
    settle(&[&cp, &cq]);
    let (vp, vq, s) = report(&p, &q);
    assert!(s.is_empty() && vp == vq, "same inputs, different weight");
}

/// Versioned state (set_node_state_at) applied to an incarnation later removed is lost.
#[test]
fn a_readded_node_takes_its_versioned_state_whatever_the_order() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    p.add_node_at(NodeSpec::new("E"), 10).unwrap();
    eprintln!("P down@35 -> {:?}", p.set_node_state_at("E", racaffinity::NodeState::Down, 35, None));
    eprintln!("P remove@20 -> {:?}", p.remove_node_at("E", 20));
    eprintln!("P add@30 -> {:?}", p.add_node_at(NodeSpec::new("E"), 30));
    q.add_node_at(NodeSpec::new("E"), 10).unwrap();
    eprintln!("Q remove@20 -> {:?}", q.remove_node_at("E", 20));
    eprintln!("Q add@30 -> {:?}", q.add_node_at(NodeSpec::new("E"), 30));
    eprintln!("Q down@35 -> {:?}", q.set_node_state_at("E", racaffinity::NodeState::Down, 35, None));
    settle(&[&cp, &cq]);
    let (vp, vq, s) = report(&p, &q);
    assert!(s.is_empty() && vp == vq, "same inputs, different state");
}

/// A database-wide FAN event (versioned) and a node addition in opposite orders.
#[test]
fn a_service_event_and_an_addition_agree_in_either_order() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    let line = "SERVICE VERSION=1.0 service=svc status=down reason=USER timestamp=2026-12-04 10:00:05";
    p.add_node_at(NodeSpec::new("E"), 10).unwrap();
    eprintln!("P event -> {:?}", p.apply_event(line).map(|e| e.changes.len()));
    eprintln!("Q event -> {:?}", q.apply_event(line).map(|e| e.changes.len()));
    q.add_node_at(NodeSpec::new("E"), 10).unwrap();
    settle(&[&cp, &cq]);
    let (vp, vq, s) = report(&p, &q);
    assert!(s.is_empty() && vp == vq, "same inputs, different state");
}

/// The same through feed records.
#[test]
fn a_database_record_and_an_addition_record_agree_in_either_order() {
    let (p, q, cp, cq) = two();
    settle(&[&cp, &cq]);
    let line = "DATABASE VERSION=1.0 status=down";
    eprintln!("P node/E@10 -> {:?}", p.apply_feed_record(10, "node/E", Some("present")));
    eprintln!("P fan@11 -> {:?}", p.apply_feed_record(11, "fan/database-ALL", Some(line)));
    eprintln!("Q fan@11 -> {:?}", q.apply_feed_record(11, "fan/database-ALL", Some(line)));
    eprintln!("Q node/E@10 -> {:?}", q.apply_feed_record(10, "node/E", Some("present")));
    settle(&[&cp, &cq]);
    let (vp, vq, s) = report(&p, &q);
    assert!(s.is_empty() && vp == vq, "same records, different state");
}

/// Deleting a weight record resets to *this process's* configured weight.
#[test]
fn a_deleted_weight_record_leaves_the_membership_records_weight() {
    let (cp, cq) = (ManualClock::new(1_000_000), ManualClock::new(1_000_000));
    let p = cluster_with_clock(
        "nodes = A, B, C, E\nnode.E.weight = 4\ntransaction.strict = true\ntransaction.settle = 3s",
        &cp,
    );
    let q = cluster_with_clock(CFG, &cq);
    settle(&[&cp, &cq]);
    for c in [&p, &q] {
        eprintln!("{:?}", c.apply_feed_record(10, "node/E", Some("present weight=4")));
        eprintln!("{:?}", c.apply_feed_record(15, "node/E/weight", Some("7")));
        eprintln!("{:?}", c.apply_feed_record(20, "node/E/weight", None));
    }
    settle(&[&cp, &cq]);
    let (vp, vq, s) = report(&p, &q);
    assert!(s.is_empty() && vp == vq, "different weights");
}
