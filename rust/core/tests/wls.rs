//! Seed 001 (WebLogic) in the core (issue [wls-routing]): routing data carried
//! in the session id, promotion of the backup, and colocated preference.

mod common;

use common::cluster;
use racaffinity::{node_token_id, Cluster, ErrorKind, NodeId, NodeState, RouteKind};

const FOUR: &str = "nodes = A1, A2, B1, B2\nnode.A1.machine = hostA\nnode.A2.machine = hostA\n\
                    node.B1.machine = hostB\nnode.B2.machine = hostB";

fn machine(c: &Cluster, id: NodeId) -> String {
    c.node(id).unwrap().machine().unwrap().to_string()
}

#[test]
fn every_backup_is_on_another_machine_when_the_topology_has_one() {
    let c = cluster(FOUR);
    for i in 0..500 {
        let r = c.session_routing(format!("s{i}").as_bytes()).unwrap();
        let b = r.backup.expect("a backup exists");
        assert_ne!(machine(&c, r.primary), machine(&c, b), "session s{i}");
    }
    // The machine defaults to the address's host.
    let hosts = cluster("nodes = X, Y\nnode.X.address = h1:1521\nnode.Y.address = h2:1521");
    assert_eq!(hosts.node_by_name("Y").unwrap().machine().as_deref(), Some("h2"));
}

#[test]
fn a_token_routes_the_same_in_every_process_and_carries_a_stable_format() {
    let (p, q) = (cluster(FOUR), cluster(FOUR));
    let t = p.session_token("JSESSION-42").unwrap();
    assert!(t.starts_with("JSESSION-42!ra1."), "{t}");
    let parts: Vec<&str> = t.rsplit_once('!').unwrap().1.split('.').collect();
    let primary = p.session_routing(b"JSESSION-42").unwrap().primary;
    assert_eq!(parts[1], node_token_id(&p.node_name(primary).unwrap()));
    for c in [&p, &q] {
        let r = c.route_token(&t).unwrap();
        assert_eq!((r.route.node, r.route.kind, r.token), (primary, RouteKind::Affinity, None));
    }
}

#[test]
fn the_seed_walk_through_promotes_the_backup_then_runs_out_then_recovers() {
    let c = cluster("nodes = S1, S2, S3\nnode.S1.machine = m1\nnode.S2.machine = m2\nnode.S3.machine = m3");
    let token = c.session_token("sess").unwrap();
    let first = c.session_routing(b"sess").unwrap();
    // Kill the primary: same session id, the backup is promoted, a new backup
    // on another machine.
    c.set_node_state(&c.node_name(first.primary).unwrap(), NodeState::Down).unwrap();
    let r = c.route_token(&token).unwrap();
    let t2 = r.token.expect("rewritten");
    assert!(t2.starts_with("sess!"));
    assert_eq!(r.route.node, first.backup.unwrap());
    assert_eq!(r.route.kind, RouteKind::Repinned);
    let third = ["S1", "S2", "S3"]
        .iter()
        .map(|n| c.node_by_name(n).unwrap().id())
        .find(|&n| n != first.primary && Some(n) != first.backup)
        .unwrap();
    assert!(t2.ends_with(&node_token_id(&c.node_name(third).unwrap())), "{t2}");
    assert_eq!(c.route_token(&t2).unwrap().token, None, "a settled token stays as it is");
    // Kill the second: the last one is primary, the backup slot reads none.
    c.set_node_state(&c.node_name(first.backup.unwrap()).unwrap(), NodeState::Down).unwrap();
    let r3 = c.route_token(&t2).unwrap();
    assert_eq!(r3.route.node, third);
    let t3 = r3.token.unwrap();
    assert!(t3.ends_with(".none"), "{t3}");
    // Both come back: a new backup is selected.
    for n in ["S1", "S2", "S3"] {
        c.set_node_state(n, NodeState::Up).unwrap();
    }
    let r4 = c.route_token(&t3).unwrap();
    assert_eq!(r4.route.node, third, "the session stays where it is");
    assert!(!r4.token.unwrap().ends_with(".none"));
}

#[test]
fn strict_session_mode_refuses_instead_of_promoting() {
    let c = cluster(&format!("{FOUR}\nsession.strict = true"));
    let token = c.session_token("s").unwrap();
    let primary = c.session_routing(b"s").unwrap().primary;
    c.set_node_state(&c.node_name(primary).unwrap(), NodeState::Down).unwrap();
    assert_eq!(c.route_token(&token).unwrap_err().kind(), ErrorKind::StrictAffinity);
}

#[test]
fn malformed_and_foreign_tokens_are_typed_errors_and_unknown_nodes_count_as_down() {
    let c = cluster(FOUR);
    for bad in [
        "",
        "no-routing",
        "sid!ra1.0000000g.none",
        "sid!ra1.00000000",
        "sid!ra2.00000000.none",
        "sid!xx.00000000.none",
        "!ra1.00000000.none",
        "s;id!ra1.00000000.none",
    ] {
        assert_eq!(c.route_token(bad).unwrap_err().kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }
    // Both named nodes are unknown here: a fresh primary and backup.
    let r = c.route_token("sid!ra1.00000000.ffffffff").unwrap();
    assert_eq!(r.route.kind, RouteKind::Repinned);
    assert_eq!(r.token.unwrap(), c.session_token("sid").unwrap());
    assert!(c.session_token("with space").is_err());
    // The refusal names the character, not the first byte of its UTF-8.
    let e = c.session_token("caf\u{e9}").unwrap_err();
    assert!(e.to_string().contains("'\u{e9}'"), "{e}");
}

/// A token of another cluster (its nodes are none of `FOUR`'s): well-formed,
/// but naming no node here.
fn foreign(sid: &str) -> String {
    cluster("nodes = X1, X2, X3").session_token(sid).unwrap()
}

#[test]
fn of_several_tokens_the_first_that_names_a_node_routes_else_the_first_well_formed() {
    let c = cluster(FOUR);
    let current = c.session_token("current").unwrap();
    let node = c.route_token(&current).unwrap().route.node;
    let stale = foreign("stale");
    assert!(c.route_token(&stale).unwrap().token.is_some(), "the stale one alone would move the session");
    // The browser's order: a stale cookie under a longer path first.
    let chosen = c.route_tokens([stale.as_str(), "garbage", current.as_str()]).unwrap();
    assert_eq!(chosen.index, 2, "the current token, not the stale one");
    let r = chosen.route.unwrap();
    assert_eq!((r.route.node, r.route.kind, r.token), (node, RouteKind::Affinity, None));
    // Owned strings too, and the first of two that name a node.
    let second = c.session_token("second").unwrap();
    assert_eq!(c.route_tokens(vec![second.clone(), current.clone()]).unwrap().index, 0);
    // None names a node: the first well-formed one keeps its session id, on a fresh pair.
    let chosen = c.route_tokens(["garbage", stale.as_str(), foreign("later").as_str()]).unwrap();
    assert_eq!(chosen.index, 1);
    assert_eq!(chosen.route.unwrap().token.unwrap(), c.session_token("stale").unwrap());
    // A backup of this cluster's is enough to name a node.
    let a1 = node_token_id("A1");
    let half = format!("half!ra1.00000000.{a1}");
    assert_eq!(c.route_tokens([stale.as_str(), half.as_str()]).unwrap().index, 1);
}

#[test]
fn with_no_well_formed_token_there_is_nothing_to_route_and_a_refusal_keeps_the_choice() {
    let c = cluster(&format!("{FOUR}\nsession.strict = true"));
    assert_eq!(c.route_tokens(["", "garbage", "sid!ra2.00000000.none"]), None);
    assert_eq!(c.route_tokens(Vec::<String>::new()), None);
    let token = c.session_token("s").unwrap();
    let primary = c.session_routing(b"s").unwrap().primary;
    c.set_node_state(&c.node_name(primary).unwrap(), NodeState::Down).unwrap();
    let chosen = c.route_tokens([foreign("stale").as_str(), token.as_str()]).unwrap();
    assert_eq!(chosen.index, 1, "the primary is down, but the token still names the backup");
    assert_eq!(chosen.route.unwrap_err().kind(), ErrorKind::StrictAffinity);
}

/// Decided (docs/wls-routing.md): in strict mode a token that names no node of
/// this cluster is refused, not placed afresh. A process cannot tell another
/// cluster's token from its own session on nodes it has not learned yet (a
/// feed reaches processes at different times), and placing that one afresh
/// would move a strict session.
#[test]
fn in_strict_mode_a_token_that_names_no_node_here_is_refused_not_placed_afresh() {
    let c = cluster(&format!("{FOUR}\nsession.strict = true"));
    let stale = foreign("stale");
    assert_eq!(c.route_token(&stale).unwrap_err().kind(), ErrorKind::StrictAffinity);
    let chosen = c.route_tokens([stale.as_str()]).unwrap();
    assert_eq!((chosen.index, chosen.route.unwrap_err().kind()), (0, ErrorKind::StrictAffinity));
    // Not strict: the same token keeps its session id on a fresh pair.
    let r = cluster(FOUR).route_token(&stale).unwrap();
    assert_eq!(r.token.unwrap(), cluster(FOUR).session_token("stale").unwrap());
}

const ZONES: &str = "nodes = Z1a, Z1b, Z2a, Z2b\nnode.Z1a.zone = z1\nnode.Z1b.zone = z1\nnode.Z2a.zone = z2\n\
                     node.Z2b.zone = z2\nlocal.zone = z1\npolicy = round_robin";

#[test]
fn picks_stay_in_the_local_zone_spill_over_when_it_is_down_and_come_back() {
    let c = cluster(ZONES);
    let zone = |c: &Cluster, id: NodeId| c.node(id).unwrap().zone().unwrap().to_string();
    assert!((0..100).all(|_| zone(&c, c.pick_balanced().unwrap().node) == "z1"));
    c.set_node_state("Z1a", NodeState::Down).unwrap();
    c.set_node_state("Z1b", NodeState::Draining).unwrap();
    assert!((0..100).all(|_| zone(&c, c.pick_balanced().unwrap().node) == "z2"), "spill over at once");
    c.set_node_state("Z1a", NodeState::Up).unwrap();
    assert!((0..100).all(|_| c.node_name(c.pick_balanced().unwrap().node).unwrap() == "Z1a"));
    let m = c.metrics();
    assert_eq!(m.nodes[0].locality, "zone");
    assert_eq!(m.nodes[2].locality, "remote");
    assert!(m
        .to_prometheus()
        .contains("racaffinity_locality_picks_total{cluster=\"default\",locality=\"remote\"} 100"));
}

#[test]
fn weights_still_apply_inside_the_zone_and_the_local_machine_comes_first() {
    let c =
        cluster(&format!("{}\nnode.Z1a.weight = 3\npolicy = weighted", ZONES.replace("\npolicy = round_robin", "")));
    let a = (0..4000).filter(|_| c.node_name(c.pick_balanced().unwrap().node).unwrap() == "Z1a").count();
    assert!((2700..3300).contains(&a), "Z1a has 3/4 of the zone's weight: {a} of 4000");
    let m = cluster(&format!("{ZONES}\nnode.Z1b.machine = me\nlocal.machine = me"));
    assert!((0..50).all(|_| m.node_name(m.pick_balanced().unwrap().node).unwrap() == "Z1b"));
}

#[test]
fn a_busy_local_zone_spills_when_over_its_share_of_capacity() {
    // Hold leases on the local zone: 20 of 21 in flight there, against its
    // half of the capacity.
    let remote_picks = |text: &str| {
        let c = cluster(text);
        for (name, n) in [("Z1a", 10), ("Z1b", 10), ("Z2a", 1)] {
            let id = c.node_by_name(name).unwrap().id();
            (0..n).for_each(|_| c.begin_lease(id));
        }
        (0..100).filter(|_| c.node(c.pick_balanced().unwrap().node).unwrap().zone().as_deref() == Some("z2")).count()
    };
    assert_eq!(remote_picks(ZONES), 0, "without a spill ratio the local zone always wins");
    let spilled = remote_picks(&format!("{ZONES}\nlocality.spill_percent = 100"));
    assert!((30..=70).contains(&spilled), "over its share, the zone spills to every node: {spilled} of 100");
    // Rendezvous placements ignore locality: processes must agree.
    let p = cluster(ZONES);
    let q = cluster(&ZONES.replace("local.zone = z1", "local.zone = z2"));
    for i in 0..50 {
        let g = format!("g{i}");
        assert_eq!(p.tx_begin(g.as_bytes()).unwrap().node, q.tx_begin(g.as_bytes()).unwrap().node);
    }
}
