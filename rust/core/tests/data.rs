//! Data (sharding key) affinity.

mod common;

use common::{assert_refused_with_owner_down, cluster, moved_with_owner_down, name};
use proptest::prelude::*;
use racaffinity::{DataKey, ErrorKind, NodeState, RouteKind};

#[test]
fn keys_route_to_their_partition_owner() {
    let c = cluster("nodes = A, B, C\ndata.partitions = 64");
    for k in 0..1000i64 {
        let p = c.partition_of(DataKey::Int(k)).unwrap();
        assert!(p < 64);
        let r = c.route_key_i64(k).unwrap();
        assert_eq!(r.node, c.partition_owner(p).unwrap());
        assert_eq!(r.kind, RouteKind::Affinity);
    }
    let r = c.route_key(b"customer-17").unwrap();
    assert_eq!(r.node, c.partition_owner(c.partition_of(DataKey::Bytes(b"customer-17")).unwrap()).unwrap());
}

#[test]
fn explicit_partition_map_overrides_rendezvous() {
    let c = cluster("nodes = A, B, C\ndata.partitions = 4\ndata.partition.0 = C\ndata.partition.1 = C");
    let cid = c.node_by_name("C").unwrap().id();
    assert_eq!(c.partition_owner(0).unwrap(), cid);
    assert_eq!(c.partition_owner(1).unwrap(), cid);
    c.set_partition(2, "A").unwrap();
    assert_eq!(c.partition_owner(2).unwrap(), c.node_by_name("A").unwrap().id());
    assert!(c.clear_partition(2));
    assert_eq!(c.set_partition(9, "A").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(c.set_partition(0, "ZZ").unwrap_err().kind(), ErrorKind::UnknownNode);
}

#[test]
fn unavailable_owner_falls_back_to_load_balancing_unless_strict() {
    let c = cluster("nodes = A, B, C");
    let (owner, _) = moved_with_owner_down(&c, RouteKind::Fallback, || c.route_key(b"k"));
    c.set_node_state(&name(&c, owner), NodeState::Up).unwrap();
    assert_eq!(c.route_key(b"k").unwrap().node, owner, "partitions come back with their node");

    assert_refused_with_owner_down("nodes = A, B, C\ndata.strict = true", "data", |c| c.route_key(b"k"));
}

#[test]
fn balanced_placement_remembers_each_partition() {
    let c = cluster("nodes = A, B, C\ndata.placement = balanced\npolicy = round_robin\ndata.partitions = 16");
    let first: Vec<_> = (0..16).map(|p| c.route_key_i64(p).unwrap()).collect();
    for (p, r) in first.iter().enumerate() {
        let again = c.route_key_i64(p as i64).unwrap();
        assert_eq!(again.node, r.node);
        assert_eq!(again.kind, RouteKind::Affinity);
    }
}

#[test]
fn oversized_data_keys_are_rejected() {
    let c = cluster("nodes = A");
    assert_eq!(c.route_key(&vec![0u8; 4096]).unwrap_err().kind(), ErrorKind::InvalidArgument);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Removing one of N nodes moves only the keys that node owned.
    #[test]
    fn removing_a_node_moves_only_its_keys(
        n in 2usize..10,
        victim in 0usize..10,
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..40), 50..200),
        weighted in any::<bool>(),
    ) {
        let victim = victim % n;
        let names: Vec<String> = (0..n).map(|i| format!("NODE{i}")).collect();
        let mut text = format!("nodes = {}\ndata.partitions = 100000", names.join(","));
        if weighted {
            for (i, nm) in names.iter().enumerate() {
                text.push_str(&format!("\nnode.{nm}.weight = {}", i + 1));
            }
        }
        let c = cluster(&text);
        let before: Vec<_> = keys.iter().map(|k| c.route_key(k).unwrap().node).collect();
        let tx_before: Vec<_> = keys.iter().map(|k| c.tx_begin(&k[..k.len().min(64)]).unwrap().node).collect();
        let gone = c.remove_node(&names[victim]).unwrap();
        for (i, k) in keys.iter().enumerate() {
            let after = c.route_key(k).unwrap().node;
            prop_assert_ne!(after, gone);
            if before[i] != gone {
                prop_assert_eq!(after, before[i]);
            }
        }
        // Transaction placement on a fresh cluster without the victim agrees
        // for every gtrid the victim did not own.
        let rest: Vec<&String> = names.iter().filter(|x| **x != names[victim]).collect();
        let mut text2 = format!("nodes = {}", rest.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(","));
        if weighted {
            for nm in &rest {
                let i: usize = nm[4..].parse().unwrap();
                text2.push_str(&format!("\nnode.{nm}.weight = {}", i + 1));
            }
        }
        let c2 = cluster(&text2);
        for (i, k) in keys.iter().enumerate() {
            if tx_before[i] != gone {
                let placed = c2.tx_begin(&k[..k.len().min(64)]).unwrap().node;
                prop_assert_eq!(c2.node_name(placed).unwrap(), c.node_name(tx_before[i]).unwrap());
            }
        }
    }
}

#[test]
fn rlb_advisories_never_move_data_ownership() {
    let c = cluster("nodes = MYDB1, MYDB2, MYDB3");
    let before: Vec<_> = (0..4096).map(|p| c.partition_owner(p).unwrap()).collect();
    c.apply_event(
        "VERSION=1.0 { {instance=MYDB1 percent=80 flag=GOOD}{instance=MYDB2 percent=10 flag=GOOD}\
         {instance=MYDB3 percent=10 flag=BLOCKED} }",
    )
    .unwrap();
    let after: Vec<_> = (0..4096).map(|p| c.partition_owner(p).unwrap()).collect();
    assert_eq!(before, after);
}

/// Nodes come and go while threads route keys: a route whose topology
/// snapshot predates a node that another route had already made the owner
/// of its partition in the owner table (filled under the newer epoch) must
/// still answer, never panic ("ids are never dropped";
/// RACAFFINITY_RESULT_PANIC in C). More threads than cores, so some are
/// preempted between their snapshot and their read of the epoch.
#[test]
fn a_key_owned_by_a_node_added_during_the_route_never_panics() {
    let c = std::sync::Arc::new(racaffinity::Cluster::from_config_text("nodes = A\ndata.partitions = 4").unwrap());
    common::calls_while_nodes_come_and_go(
        &c,
        12,
        10,
        "a key route",
        |c, k| {
            let _ = c.route_key_i64((k % 4) as i64);
        },
        |c| {
            for k in 0..4 {
                let _ = c.route_key_i64(k);
            }
        },
    );
}

/// An unversioned replacement (`replace_partition_map`) replaces the whole
/// map, the entries a versioned map set included, and keeps the version in
/// force: a versioned map applies after it only when newer than every
/// versioned map seen (a watch and a re-read both deliver the same one),
/// as an unversioned node-state input keeps the node's version
/// (docs/semantics.md, "Agreement across processes").
#[test]
fn an_unversioned_replacement_replaces_every_entry_and_keeps_the_version_in_force() {
    let c = cluster("nodes = A, B, C\ndata.partitions = 8");
    let id = |n: &str| c.node_by_name(n).unwrap().id();
    let (hashed, hashed1) = (c.partition_owner(0).unwrap(), c.partition_owner(1).unwrap());
    let other = ["A", "B", "C"].into_iter().find(|n| id(n) != hashed).unwrap();
    let other1 = ["A", "B", "C"].into_iter().find(|n| id(n) != hashed1).unwrap();
    assert!(c.replace_partition_map_at(&[(0, other), (2, other)], "feed", 5).unwrap());
    assert_eq!(c.partition_owner(0).unwrap(), id(other));
    c.replace_partition_map(&[(1, other1)], "loader").unwrap();
    assert_eq!(c.partition_owner(0).unwrap(), hashed, "the versioned entry went with the rest of its map");
    assert_eq!(c.partition_owner(1).unwrap(), id(other1));
    assert!(!c.replace_partition_map_at(&[(0, other), (2, other)], "feed", 5).unwrap(), "the same map again");
    assert!(!c.replace_partition_map_at(&[(0, other)], "feed", 3).unwrap(), "an older map");
    assert_eq!(c.partition_owner(0).unwrap(), hashed);
    assert_eq!(c.partition_owner(1).unwrap(), id(other1));
    assert!(c.replace_partition_map_at(&[(0, other)], "feed", 6).unwrap(), "a newer map");
    assert_eq!(c.partition_owner(0).unwrap(), id(other));
    assert_eq!(c.partition_owner(1).unwrap(), hashed1, "the newer map replaced the unversioned one whole");
}
