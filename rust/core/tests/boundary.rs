//! Boundary defects of issue [chaos-fuzz] that live in the core: thread pins
//! of a dropped cluster, registries of a closed one, unknown ids and keys.

mod common;

use std::sync::Arc;

use common::cluster;
use racaffinity::{ContextKey, ErrorKind, NodeId};

#[test]
fn a_thread_pin_left_on_a_dropped_cluster_is_pruned_by_the_next_pin() {
    let first = cluster("nodes = A, B");
    let pinned = first.enter_thread_pin().unwrap().node;
    let node = Arc::downgrade(&first.node(pinned).unwrap());
    drop(first);
    let second = cluster("nodes = A, B");
    second.enter_thread_pin().unwrap();
    assert!(node.upgrade().is_none(), "the dead cluster's pin slot still holds its node");
    assert!(second.leave_thread_pin());
}

#[test]
fn closing_a_cluster_releases_its_registries_and_pins_at_once() {
    let c = cluster("nodes = A, B\nsession.mode = registry");
    for i in 0..1000 {
        c.tx_begin(format!("g{i}").as_bytes()).unwrap();
        c.session_route(format!("s{i}").as_bytes()).unwrap();
    }
    let ctx = c.new_context_key();
    c.pin_context(ctx).unwrap();
    let token = c.open_lease(NodeId(0)).unwrap();
    let shell = c.clone(); // what another thread's handle cache keeps
    c.close();
    assert_eq!((shell.tx_count(), shell.session_count(), shell.open_lease_count()), (0, 0, 0));
    assert_eq!(shell.context_pinned_node(ctx), None);
    assert_eq!(shell.metrics().nodes[0].in_flight, 0, "closing released the open lease");
    assert_eq!(shell.close_lease(token, racaffinity::Outcome::Ok).unwrap_err().kind(), ErrorKind::UnknownLease);
}

#[test]
fn tx_begin_on_an_unknown_preferred_node_is_unknown_node() {
    let c = cluster("nodes = A, B");
    let e = c.tx_begin_on(b"g", Some(NodeId(7))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownNode);
    assert!(c.tx_info(b"g").is_none(), "a refused begin registers nothing");
}

#[test]
fn a_context_key_never_issued_cannot_be_pinned() {
    let c = cluster("nodes = A, B");
    let e = c.pin_context(ContextKey(1 << 40)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(c.pin_context(ContextKey(0)).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let issued = c.new_context_key();
    c.pin_context(issued).unwrap();
    assert_ne!(c.new_context_key(), issued);
}

#[test]
fn tx_begin_for_with_a_bad_gtrid_changes_nothing() {
    use racaffinity::RouteRequest;
    let c = cluster("nodes = A, B\nsession.mode = registry");
    let before = c.metrics().to_json();
    for g in [&b""[..], &[b'g'; 65][..]] {
        let req = RouteRequest { session: Some(b"S-1"), ..Default::default() };
        assert_eq!(c.tx_begin_for(g, &req).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(c.session_count(), 0, "the request's session was placed by a refused call");
    assert_eq!(c.metrics().to_json(), before);
}

/// Found by capi_sequence: a strict `tx_begin_for` of a new gtrid places from
/// shared inputs only and never routed the request's session, so a session
/// key over 1024 bytes was accepted (and the gtrid placed) where the soft
/// mode refuses it. Bad input is refused alike in both modes, before anything
/// is placed.
#[test]
fn a_strict_tx_begin_for_refuses_an_invalid_session_key_as_soft_mode_does() {
    let long = vec![b's'; racaffinity::MAX_KEY_BYTES + 1];
    let req = racaffinity::RouteRequest { session: Some(&long), ..Default::default() };
    for strict in ["false", "true"] {
        let c = cluster(&format!("nodes = A, B\ntransaction.strict = {strict}"));
        let e = c.tx_begin_for(b"g-long-session", &req).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "transaction.strict = {strict}: {e}");
        assert!(c.tx_info(b"g-long-session").is_none(), "nothing placed");
    }
}
