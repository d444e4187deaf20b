//! Transaction (XA gtrid) affinity.

mod common;

use std::sync::{Arc, Barrier};

use common::{assert_refused_with_owner_down, cluster, moved_with_owner_down, name, owner_marked_down};
use proptest::prelude::*;
use racaffinity::{ErrorKind, NodeState, RouteKind, MAX_GTRID_BYTES};

#[test]
fn all_branches_of_a_gtrid_get_one_node_from_many_threads() {
    let c = Arc::new(cluster("nodes = A, B, C\ntransaction.placement = balanced\npolicy = random"));
    for round in 0..50 {
        let gtrid = format!("gtrid-{round}").into_bytes();
        let barrier = Arc::new(Barrier::new(8));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (c, g, b) = (c.clone(), gtrid.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    c.tx_begin(&g).unwrap().node
                })
            })
            .collect();
        let nodes: std::collections::HashSet<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(nodes.len(), 1, "gtrid {round} was split over {nodes:?}");
        assert_eq!(c.tx_info(&gtrid).unwrap().branches, 8);
        for _ in 0..8 {
            c.tx_end(&gtrid).unwrap();
        }
        assert!(c.tx_info(&gtrid).is_none(), "last end releases the entry");
    }
    assert_eq!(c.tx_count(), 0);
}

#[test]
fn rendezvous_placement_is_the_same_in_independent_clusters() {
    // Two clusters stand in for two processes with no shared state.
    let a = cluster("nodes = MYDB1, MYDB2, MYDB3");
    let b = cluster("nodes = MYDB1, MYDB2, MYDB3\npolicy = round_robin");
    let mut per_node = [0; 3];
    for i in 0..3000 {
        let g = format!("1.2.3-{i}");
        let ra = a.tx_begin(g.as_bytes()).unwrap();
        assert_eq!(ra.kind, RouteKind::Placed);
        assert_eq!(ra.node, b.tx_begin(g.as_bytes()).unwrap().node);
        per_node[ra.node.0 as usize] += 1;
    }
    assert!(per_node.iter().all(|&n| n > 800), "rendezvous spreads gtrids: {per_node:?}");
}

#[test]
fn preferred_node_places_a_new_gtrid_but_an_existing_entry_wins() {
    let c = cluster("nodes = A, B, C");
    let b = c.node_by_name("B").unwrap().id();
    let cc = c.node_by_name("C").unwrap().id();
    assert_eq!(c.tx_begin_on(b"g1", Some(b)).unwrap().node, b);
    let r = c.tx_begin_on(b"g1", Some(cc)).unwrap();
    assert_eq!((r.node, r.kind), (b, RouteKind::Affinity));
}

#[test]
fn a_prepared_branch_never_moves_even_in_soft_mode() {
    let c = cluster("nodes = A, B, C\ntransaction.strict = false");
    let owner = c.tx_begin(b"g").unwrap().node;
    assert_eq!(c.tx_prepared(b"g").unwrap(), owner);
    c.set_node_state(&name(&c, owner), NodeState::Down).unwrap();
    let e = c.tx_begin(b"g").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PreparedNodeUnavailable);
    assert!(e.to_string().contains(&name(&c, owner)));
    // Its 2PC still goes to the owner: only that node holds the branch.
    assert_eq!(c.tx_route(b"g").unwrap().node, owner);
    c.set_node_state(&name(&c, owner), NodeState::Up).unwrap();
    assert_eq!(c.tx_route(b"g").unwrap().node, owner, "commit goes to the owner once it is back");
}

#[test]
fn soft_mode_repins_an_unprepared_gtrid_and_strict_refuses() {
    let c = cluster("nodes = A, B, C");
    let (_, r) = moved_with_owner_down(&c, RouteKind::Repinned, || c.tx_begin(b"g"));
    assert_eq!(c.tx_begin(b"g").unwrap().node, r.node);

    assert_refused_with_owner_down("nodes = A, B, C\ntransaction.strict = true", "transaction", |c| c.tx_begin(b"g"));
}

#[test]
fn strict_can_be_switched_at_runtime() {
    let c = cluster("nodes = A, B");
    c.set_strict(racaffinity::Scope::Transaction, true);
    owner_marked_down(&c, || c.tx_begin(b"g"));
    assert_eq!(c.tx_begin(b"g").unwrap_err().kind(), ErrorKind::StrictAffinity);
    c.set_strict(racaffinity::Scope::Transaction, false);
    assert_eq!(c.tx_begin(b"g").unwrap().kind, RouteKind::Repinned);
}

#[test]
fn draining_owner_keeps_its_transactions_but_gets_no_new_ones() {
    let c = cluster("nodes = A, B, C");
    let owner = c.tx_begin(b"old").unwrap().node;
    c.set_node_state(&name(&c, owner), NodeState::Draining).unwrap();
    assert_eq!(c.tx_begin(b"old").unwrap().node, owner);
    for i in 0..200 {
        assert_ne!(c.tx_begin(format!("new{i}").as_bytes()).unwrap().node, owner);
    }
}

#[test]
fn recovery_records_the_node_that_returned_an_in_doubt_id() {
    let c = cluster("nodes = A, B, C");
    let b = c.node_by_name("B").unwrap().id();
    c.tx_recovered(b"indoubt", b).unwrap();
    let info = c.tx_info(b"indoubt").unwrap();
    assert!(info.prepared);
    assert_eq!(c.tx_route(b"indoubt").unwrap().node, b);
    // The same id reported by a second node is a split transaction.
    let a = c.node_by_name("A").unwrap().id();
    let e = c.tx_recovered(b"indoubt", a).unwrap_err();
    assert!(e.to_string().contains("split"), "{e}");
    assert_eq!(c.tx_complete(b"indoubt").unwrap(), b);
    assert_eq!(c.tx_route(b"indoubt").unwrap_err().kind(), ErrorKind::UnknownTransaction);
}

#[test]
fn bad_gtrids_are_typed_errors() {
    let c = cluster("nodes = A");
    assert_eq!(c.tx_begin(b"").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(c.tx_begin(&[7u8; MAX_GTRID_BYTES + 1]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert!(c.tx_begin(&[7u8; MAX_GTRID_BYTES]).is_ok());
    assert_eq!(c.tx_end(b"nope").unwrap_err().kind(), ErrorKind::UnknownTransaction);
    assert_eq!(c.tx_prepared(b"nope").unwrap_err().kind(), ErrorKind::UnknownTransaction);
}

#[test]
fn removed_owner_breaks_the_affinity_like_a_down_node() {
    let c = cluster("nodes = A, B, C");
    let owner = c.tx_begin(b"g").unwrap().node;
    c.remove_node(&name(&c, owner)).unwrap();
    let r = c.tx_begin(b"g").unwrap();
    assert_eq!(r.kind, RouteKind::Repinned);
    assert!(!c.node(r.node).unwrap().is_removed());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Once prepared, every route of the gtrid names the original owner or
    /// fails; it never names another node, whatever states change.
    #[test]
    fn prepared_branches_never_move(
        gtrid in prop::collection::vec(any::<u8>(), 1..=64),
        ops in prop::collection::vec((0usize..3, 0u8..3, any::<bool>()), 1..30),
        strict in any::<bool>(),
    ) {
        let c = cluster(&format!("nodes = A, B, C\ntransaction.strict = {strict}"));
        let owner = c.tx_begin(&gtrid).unwrap().node;
        c.tx_prepared(&gtrid).unwrap();
        for (i, s, join) in ops {
            let st = [NodeState::Up, NodeState::Draining, NodeState::Down][s as usize];
            c.set_node_state(["A", "B", "C"][i], st).unwrap();
            let r = if join { c.tx_begin(&gtrid) } else { c.tx_route(&gtrid) };
            match r {
                Ok(r) => prop_assert_eq!(r.node, owner),
                Err(e) => {
                    prop_assert_eq!(e.kind(), ErrorKind::PreparedNodeUnavailable);
                    prop_assert_eq!(c.node(owner).unwrap().state(), NodeState::Down);
                }
            }
        }
    }
}

#[test]
fn soft_mode_2pc_for_a_lost_unprepared_branch_goes_to_its_node_without_counting_as_strict() {
    let c = cluster("nodes = A, B, C");
    let owner = owner_marked_down(&c, || c.tx_begin(b"g"));
    assert_eq!(c.tx_route(b"g").unwrap().node, owner, "a rollback is never refused for routing reasons");
    assert_eq!(c.metrics().scopes[racaffinity::Scope::Transaction as usize].strict_refusals, 0);
}

#[test]
fn a_new_gtrid_follows_the_requests_key_session_or_pin_and_an_existing_one_stays() {
    use racaffinity::{DataKey, RouteRequest};
    let c = cluster("nodes = A, B, C, D, E, F, G, H\npolicy = round_robin");
    let key_node = c.route_key(b"customer-9").unwrap().node;
    let with_key = RouteRequest { key: Some(DataKey::Bytes(b"customer-9")), ..Default::default() };
    assert_eq!(c.tx_begin_for(b"g-key", &with_key).unwrap().node, key_node);
    let session_node = c.session_route(b"S-1").unwrap().node;
    let with_session = RouteRequest { session: Some(b"S-1"), ..Default::default() };
    assert_eq!(c.tx_begin_for(b"g-session", &with_session).unwrap().node, session_node);
    let ctx = c.new_context_key();
    let pinned = c.pin_context(ctx).unwrap().node;
    let with_pin = RouteRequest { context: Some(ctx), ..Default::default() };
    assert_eq!(c.tx_begin_for(b"g-pin", &with_pin).unwrap().node, pinned);
    // An existing gtrid joins its owner whatever the request says.
    let r = c.tx_begin_for(b"g-key", &with_pin).unwrap();
    assert_eq!((r.node, r.kind), (key_node, RouteKind::Affinity));
    assert_eq!(c.tx_info(b"g-key").unwrap().branches, 2);
    // No affinity in the request: the placement policy (rendezvous) decides,
    // as in a fresh cluster.
    let fresh = cluster("nodes = A, B, C, D, E, F, G, H");
    assert_eq!(
        c.node_name(c.tx_begin_for(b"g-none", &RouteRequest::default()).unwrap().node),
        fresh.node_name(fresh.tx_begin(b"g-none").unwrap().node)
    );
}

/// A transaction placed, by another thread, on a node added after a call on
/// it took its topology snapshot: the entry names an id that snapshot does
/// not have. Calls on the gtrid must answer, never panic ("ids are never
/// dropped"; RACAFFINITY_RESULT_PANIC in C). Nodes come and go while other
/// threads route the gtrid, more threads than cores, so some are preempted
/// between their snapshot and the registry lock.
#[test]
fn a_transaction_moved_to_a_node_added_during_a_call_never_panics() {
    let c = std::sync::Arc::new(racaffinity::Cluster::from_config_text("nodes = A").unwrap());
    c.set_node_state("A", NodeState::Down).unwrap();
    common::calls_while_nodes_come_and_go(
        &c,
        6,
        2,
        "a call on the gtrid",
        |c, _| {
            let _ = c.tx_route(b"g");
            let _ = c.tx_begin(b"g");
            let _ = c.tx_end(b"g");
        },
        |c| {
            let _ = c.tx_begin(b"g");
            let _ = c.tx_end(b"g");
        },
    );
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Fixed bytes, not a second implementation: Java's and Python's tests check
/// the same vectors, and a change here moves live transactions.
#[test]
fn the_xa_transaction_key_is_the_format_id_then_the_gtrid_or_its_digest() {
    use racaffinity::{xa_transaction_key, MAX_XA_TRANSACTION_KEY_BYTES};
    assert_eq!(xa_transaction_key(0x1234, b"abc"), unhex("00001234616263"));
    assert_eq!(xa_transaction_key(-1, b"g"), unhex("ffffffff67"));
    assert_eq!(xa_transaction_key(0x5241_4646, b"x"), b"RAFFx".to_vec());
    let sixty = vec![b'x'; 60];
    assert_eq!(xa_transaction_key(7, &sixty), [&[0, 0, 0, 7][..], &sixty].concat(), "60 bytes fit as they are");
    assert_eq!(
        xa_transaction_key(7, &[b'x'; 61]),
        unhex("00000007c508e75f24e25db94dff52c9564a51025f69510191cc7dc2cfe16a6cb4b29f53"),
        "61 bytes: SHA-256"
    );
    let all: Vec<u8> = (0..64).collect();
    assert_eq!(
        xa_transaction_key(i32::MIN, &all),
        unhex("80000000fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108")
    );
    assert!(xa_transaction_key(7, &sixty).len() <= MAX_XA_TRANSACTION_KEY_BYTES);
    // Passed on for the tx_* call to refuse, as an Xid's gtrid would be.
    assert_eq!(xa_transaction_key(7, b""), Vec::<u8>::new());
    assert_eq!(xa_transaction_key(7, &[b'y'; 65]), vec![b'y'; 65]);
    let c = cluster("nodes = A, B");
    for bad in [xa_transaction_key(7, b""), xa_transaction_key(7, &[b'y'; 65])] {
        assert_eq!(c.tx_begin(&bad).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn equal_gtrids_of_two_formats_are_two_keys() {
    use racaffinity::xa_transaction_key;
    for g in [&b"g"[..], &[b'z'; 60], &[b'z'; 64]] {
        assert_ne!(xa_transaction_key(1, g), xa_transaction_key(2, g));
    }
    assert_ne!(xa_transaction_key(1, &[b'z'; 61]), xa_transaction_key(1, &[b'z'; 62]));
}
