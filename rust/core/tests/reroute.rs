//! `Cluster::reroute`: a request whose node could not give a connection goes,
//! once, where the core names next, and its affinity moves with it (soft
//! scopes only; never a transaction's branch).

mod common;

use common::cluster;
use racaffinity::{DataKey, NodeId, RouteKind, RouteRequest, Scope};

const THREE: &str = "nodes = A, B, C\npolicy = round_robin";

fn request<'a>() -> RouteRequest<'a> {
    RouteRequest::default()
}

#[test]
fn a_session_moves_off_the_failed_node_and_stays_moved() {
    let c = cluster(THREE);
    let req = RouteRequest { session: Some(b"JSESSIONID=s1"), ..request() };
    let first = c.route(&req).unwrap();
    let next = c.reroute(&req, first.node).unwrap().expect("a soft session is rerouted");
    assert_ne!(next.node, first.node);
    assert_eq!(next.kind, RouteKind::Repinned);
    for _ in 0..10 {
        let r = c.route(&req).unwrap();
        assert_eq!((r.node, r.kind), (next.node, RouteKind::Affinity), "the session stays on its new node");
    }
    assert_eq!(c.metrics().nodes.iter().map(|m| m.repins).sum::<u64>(), 1);
}

#[test]
fn a_session_moved_meanwhile_keeps_its_new_node() {
    let c = cluster(THREE);
    let req = RouteRequest { session: Some(b"s2"), ..request() };
    let first = c.route(&req).unwrap();
    let moved = c.reroute(&req, first.node).unwrap().unwrap();
    // A second caller of the same session failed on the old node too: it joins the move.
    let again = c.reroute(&req, first.node).unwrap().unwrap();
    assert_eq!((again.node, again.kind), (moved.node, RouteKind::Affinity));
}

#[test]
fn a_context_pin_moves_and_a_strict_one_does_not() {
    let c = cluster(THREE);
    let key = c.new_context_key();
    let pinned = c.pin_context(key).unwrap();
    let req = RouteRequest { context: Some(key), ..request() };
    let next = c.reroute(&req, pinned.node).unwrap().expect("a soft pin is rerouted");
    assert_ne!(next.node, pinned.node);
    assert_eq!(next.kind, RouteKind::Repinned);
    assert_eq!(c.context_pinned_node(key), Some(next.node), "the pin moved with it");
    assert_eq!(c.pick_in(key).unwrap().node, next.node);

    c.set_strict(Scope::Thread, true);
    assert_eq!(c.reroute(&req, next.node).unwrap(), None, "a strict pin is never moved");
    assert_eq!(c.context_pinned_node(key), Some(next.node));
}

#[test]
fn a_strict_session_is_not_rerouted() {
    let c = cluster(&format!("{THREE}\nsession.strict = true"));
    let req = RouteRequest { session: Some(b"s3"), ..request() };
    let first = c.route(&req).unwrap();
    assert_eq!(c.reroute(&req, first.node).unwrap(), None);
    assert_eq!(c.route(&req).unwrap().node, first.node, "the affinity stayed");
}

#[test]
fn a_transaction_branch_is_never_rerouted() {
    let c = cluster(THREE);
    let begun = c.tx_begin(b"gtrid-1").unwrap();
    let req = RouteRequest { transaction: Some(b"gtrid-1"), session: Some(b"s4"), ..request() };
    assert_eq!(c.reroute(&req, begun.node).unwrap(), None);
    assert_eq!(c.tx_route(b"gtrid-1").unwrap().node, begun.node);
}

#[test]
fn a_data_key_falls_back_for_this_call_only() {
    let c = cluster(THREE);
    let key = DataKey::Bytes(b"customer-42");
    let req = RouteRequest { key: Some(key), ..request() };
    let owner = c.route(&req).unwrap().node;
    let next = c.reroute(&req, owner).unwrap().expect("a soft key falls back");
    assert_ne!(next.node, owner);
    assert_eq!(next.kind, RouteKind::Fallback);
    assert_eq!(c.route(&req).unwrap().node, owner, "the data still lives on its owner");

    c.set_strict(Scope::Data, true);
    assert_eq!(c.reroute(&req, owner).unwrap(), None);
}

#[test]
fn plain_balancing_avoids_the_failed_node() {
    let c = cluster(THREE);
    for failed in 0..3 {
        for _ in 0..20 {
            let r = c.reroute(&request(), NodeId(failed)).unwrap().unwrap();
            assert_ne!(r.node, NodeId(failed));
            assert_eq!(r.kind, RouteKind::Balanced);
        }
    }
}

#[test]
fn no_other_usable_node_means_no_retry() {
    let c = cluster("nodes = A, B");
    c.set_node_state("B", racaffinity::NodeState::Down).unwrap();
    let a = c.node_by_name("A").unwrap().id();
    assert_eq!(c.reroute(&request(), a).unwrap(), None, "retrying on the failed node itself is no retry");
    let req = RouteRequest { session: Some(b"s5"), ..request() };
    c.route(&req).unwrap();
    assert_eq!(c.reroute(&req, a).unwrap(), None);
}

#[test]
fn an_unknown_failed_node_is_an_error() {
    let c = cluster(THREE);
    assert!(c.reroute(&request(), NodeId(7)).is_err());
}

#[test]
fn an_invalid_key_is_refused_even_in_a_strict_scope() {
    let c = cluster("nodes = A, B, C\ndata.strict = true\nsession.strict = true");
    let a = NodeId(0);
    let empty = RouteRequest { key: Some(DataKey::Bytes(b"")), ..request() };
    assert_eq!(c.reroute(&empty, a).unwrap_err().kind(), racaffinity::ErrorKind::InvalidArgument);
    let long = vec![b'k'; 4096];
    let session = RouteRequest { session: Some(&long), ..request() };
    assert_eq!(c.reroute(&session, a).unwrap_err().kind(), racaffinity::ErrorKind::InvalidArgument);
}

#[test]
fn a_rerouted_session_never_returns_to_an_entry_that_was_revoked_or_expired() {
    let clock = racaffinity::ManualClock::new(0);
    let c = common::cluster_with_clock("nodes = A, B, C\npolicy = round_robin\nsession.idle_ttl = 1m", &clock);
    let req = RouteRequest { session: Some(b"revoked"), ..request() };
    let home = c.route(&req).unwrap().node;
    let other = c.node_ids().into_iter().find(|&n| n != home).unwrap();
    // The session's instance withdraws affinity (RLB aff=FALSE): its sessions are released.
    let name = c.node_name(home).unwrap();
    c.apply_event(&format!(
        "VERSION=1.0 database=orcl service=svc {{ {{instance={name} percent=30 flag=GOOD aff=FALSE}} }}"
    ))
    .unwrap();
    // Another caller's connection failed on some other node: the session must
    // not be handed back its revoked entry as an affinity hit.
    let r = c.reroute(&req, other).unwrap().expect("rerouted");
    assert_ne!((r.node, r.kind), (home, RouteKind::Affinity), "a revoked entry was served");

    let req = RouteRequest { session: Some(b"expired"), ..request() };
    let home = c.route(&req).unwrap().node;
    let other = c.node_ids().into_iter().find(|&n| n != home).unwrap();
    clock.advance_ms(61_000);
    let r = c.reroute(&req, other).unwrap().expect("rerouted");
    assert_ne!(r.kind, RouteKind::Affinity, "an expired entry was served as an affinity");
}

/// A node removed while a request waited on it (a pool's waiter sent on by
/// the removal): its id is one the cluster had, so the request is routed
/// again away from it as from a Down node, its affinity moved. Before, a
/// removed node's id was refused as unknown and the waiter got an error
/// (Java: "unknown node `#2`" from `repickFor`).
#[test]
fn a_request_whose_node_was_removed_is_rerouted_as_from_a_down_node() {
    let c = cluster(THREE);
    let req = RouteRequest { session: Some(b"removed-home"), ..request() };
    let home = c.route(&req).unwrap().node;
    let removed = c.remove_node(&c.node_name(home).unwrap()).unwrap();
    assert_eq!(removed, home);
    let next = c.reroute(&req, home).unwrap().expect("a soft session is rerouted off a removed node");
    assert_ne!(next.node, home);
    assert_eq!(c.route(&req).unwrap().node, next.node, "the session stays on its new node");
    let plain = c.reroute(&request(), home).unwrap().expect("plain balancing picks another node");
    assert_ne!(plain.node, home);
    let c2 = cluster(THREE);
    let key = c2.new_context_key();
    let pinned = c2.pin_context(key).unwrap().node;
    c2.remove_node(&c2.node_name(pinned).unwrap()).unwrap();
    let ctx = RouteRequest { context: Some(key), ..request() };
    let moved = c2.reroute(&ctx, pinned).unwrap().expect("a soft pin moves off a removed node");
    assert_ne!(moved.node, pinned);
    assert_eq!(c2.context_pinned_node(key), Some(moved.node), "the pin moved with it");
    assert!(c.reroute(&request(), NodeId(7)).is_err(), "an id the cluster never had is still an error");
}
