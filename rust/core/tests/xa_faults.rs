//! The core's side of [xa-faults]: 2PC commands are never refused for routing
//! reasons, a soft-mode span is counted, and recovery knows whether the nodes
//! are independent databases or instances of one (RAC).

mod common;

use common::cluster;
use racaffinity::{Cluster, ErrorKind, NodeId, NodeState, RecoveryScope, RouteKind};

fn id(c: &Cluster, name: &str) -> NodeId {
    c.node_by_name(name).expect("known node").id()
}

#[test]
fn two_phase_commands_go_to_the_owner_whatever_its_state() {
    for strict in [false, true] {
        let c = cluster(&format!("nodes = A, B, C\ntransaction.strict = {strict}"));
        let owner = c.tx_begin(b"unprepared").unwrap().node;
        c.tx_begin_on(b"prepared", Some(owner)).unwrap();
        c.tx_prepared(b"prepared").unwrap();
        c.set_node_state(&c.node_name(owner).unwrap(), NodeState::Down).unwrap();
        for g in [&b"unprepared"[..], b"prepared"] {
            let r = c.tx_route(g).unwrap();
            assert_eq!((r.node, r.kind), (owner, RouteKind::Affinity), "strict={strict}");
        }
        // Rollback of an unprepared branch, then its entry goes.
        c.tx_end(b"unprepared").unwrap();
        assert!(c.tx_info(b"unprepared").is_none());
    }
}

#[test]
fn soft_span_is_counted_on_the_node_the_transaction_left() {
    let c = cluster("nodes = A, B, C");
    let first = c.tx_begin(b"g").unwrap().node;
    c.set_node_state(&c.node_name(first).unwrap(), NodeState::Down).unwrap();
    let second = c.tx_begin(b"g").unwrap();
    assert_eq!(second.kind, RouteKind::Repinned);
    let m = c.metrics();
    assert_eq!(m.nodes[first.0 as usize].tx_spans, 1);
    assert_eq!(m.nodes.iter().map(|n| n.tx_spans).sum::<u64>(), 1);
    assert_eq!(m.tx_spans, 1, "the cluster total");
    assert!(m.to_json().contains(r#""sessions_expired":0,"tx_spans":1,"#), "{}", m.to_json());
    assert!(m.to_json().contains("\"tx_spans\":1"), "{}", m.to_json());
    assert!(m.to_prometheus().contains("racaffinity_node_tx_spans_total{"));
}

#[test]
fn strict_mode_refuses_to_span() {
    let c = cluster("nodes = A, B, C\ntransaction.strict = true");
    let first = c.tx_begin(b"g").unwrap().node;
    c.set_node_state(&c.node_name(first).unwrap(), NodeState::Down).unwrap();
    assert_eq!(c.tx_begin(b"g").unwrap_err().kind(), ErrorKind::StrictAffinity);
    assert_eq!(c.metrics().nodes[first.0 as usize].tx_spans, 0);
}

#[test]
fn recovery_scope_defaults_to_node_and_parses_database() {
    assert_eq!(cluster("nodes = A").recovery_scope(), RecoveryScope::Node);
    assert_eq!(cluster("nodes = A\nrecovery.scope = database").recovery_scope(), RecoveryScope::Database);
    let e = racaffinity::Config::parse("nodes = A\nrecovery.scope = cluster").unwrap_err();
    assert!(e.to_string().contains("recovery.scope"), "{e}");
}

#[test]
fn node_scope_the_same_xid_from_two_nodes_is_a_split() {
    let c = cluster("nodes = A, B");
    c.tx_recovered(b"g", id(&c, "A")).unwrap();
    assert!(c.tx_recovered(b"g", id(&c, "B")).is_err());
}

#[test]
fn database_scope_the_same_xid_from_every_instance_is_one_transaction() {
    let c = cluster("nodes = A, B, C\nrecovery.scope = database");
    for n in ["A", "B", "C"] {
        c.tx_recovered(b"g", id(&c, n)).unwrap();
    }
    assert_eq!(c.tx_count(), 1);
    assert_eq!(c.tx_route(b"g").unwrap().node, id(&c, "A"), "the first instance that returned it completes it");
}

#[test]
fn database_scope_completes_through_another_instance_when_the_owner_is_down() {
    let text = "nodes = A, B, C\nrecovery.scope = database";
    let (p, q) = (cluster(text), cluster(text));
    for c in [&p, &q] {
        for i in 0..50 {
            c.tx_recovered(format!("g{i}").as_bytes(), id(c, "A")).unwrap();
        }
        c.set_node_state("A", NodeState::Down).unwrap();
    }
    for i in 0..50 {
        let g = format!("g{i}");
        let (a, b) = (p.tx_route(g.as_bytes()).unwrap(), q.tx_route(g.as_bytes()).unwrap());
        assert_ne!(a.node, id(&p, "A"));
        assert_eq!(a.kind, RouteKind::Repinned);
        assert_eq!(a.node, b.node, "{g}: two processes complete through different instances");
    }
}

#[test]
fn a_gtrid_recovered_from_two_nodes_counts_one_span_however_often_it_is_scanned() {
    // Two processes whose views differed put branches of one gtrid on two
    // databases; neither saw a span. Recovery, which asks every node, does.
    for strict in ["false", "true"] {
        let c = common::cluster(&format!("nodes = A, B\nrecovery.scope = node\ntransaction.strict = {strict}"));
        let (a, b) = (c.node_by_name("A").unwrap().id(), c.node_by_name("B").unwrap().id());
        c.tx_recovered(b"across", a).unwrap();
        for _ in 0..3 {
            let e = c.tx_recovered(b"across", b).unwrap_err();
            assert!(e.to_string().contains("split transaction"), "{e}");
        }
        let spans: u64 = c.metrics().nodes.iter().map(|n| n.tx_spans).sum();
        assert_eq!(spans, 1, "strict = {strict}: one span, counted once");
        assert_eq!(c.metrics().tx_spans, 1);
    }
}
