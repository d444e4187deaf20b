//! A new gtrid begun for a request that carries a session routing token
//! (`RouteRequest::token`): the request's session work and its transaction
//! belong on one node. Before, `tx_begin_for` never saw the token, so the
//! gtrid went where the thread's pin or the placement policy put it, and
//! the request ran on two nodes. docs/semantics.md, "Token routes and new
//! transactions", is the rule these tests hold.

mod common;

use common::cluster_with_clock;
use racaffinity::{Cluster, DataKey, ErrorKind, ManualClock, NodeState, RouteRequest};

const SOFT: &str = "nodes = A, B, C, D";
const STRICT: &str = "nodes = A, B, C, D\ntransaction.strict = true\ntransaction.settle = 3s";

fn fan(node: &str, status: &str, reason: &str) -> String {
    format!("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={node} status={status} reason={reason}")
}

fn with_token(token: &str) -> RouteRequest<'_> {
    RouteRequest { token: Some(token), ..Default::default() }
}

/// Begins `gtrid` for a request with `token` and completes it at once:
/// the node's name, or the refusal.
fn begin(c: &Cluster, gtrid: &str, token: &str) -> Result<String, racaffinity::Error> {
    let r = c.tx_begin_for(gtrid.as_bytes(), &with_token(token));
    let _ = c.tx_complete(gtrid.as_bytes());
    r.map(|r| c.node_name(r.node).unwrap())
}

fn primary_of(c: &Cluster, token: &str) -> String {
    c.node_name(c.decode_token(token).unwrap().primary.unwrap()).unwrap()
}

/// Tokens whose primaries cover every node, several each.
fn tokens(c: &Cluster) -> Vec<String> {
    (0..64).map(|i| c.session_token(&format!("sess{i}")).unwrap()).collect()
}

#[test]
fn soft_a_new_gtrid_goes_to_the_node_its_token_routes_to_not_to_the_pin() {
    let c = common::cluster(SOFT);
    let _pin = c.pin_thread().unwrap();
    let pinned = c.node_name(c.thread_pinned_node().unwrap()).unwrap();
    // The pin is this thread's, the token is the request's.
    let mut elsewhere = 0;
    for (i, t) in tokens(&c).iter().enumerate() {
        let primary = primary_of(&c, t);
        elsewhere += usize::from(primary != pinned);
        assert_eq!(begin(&c, &format!("g{i}"), t).unwrap(), primary, "token {t}");
    }
    assert!(elsewhere > 0, "some tokens name another node than the pin's");
}

#[test]
fn a_data_key_still_wins_over_the_token() {
    let c = common::cluster(SOFT);
    for (i, t) in tokens(&c).iter().enumerate() {
        let key = DataKey::Int(i as i64);
        let owner = c.node_name(c.route_data(key).unwrap().node).unwrap();
        let req = RouteRequest { token: Some(t), key: Some(key), ..Default::default() };
        let g = format!("k{i}");
        let r = c.tx_begin_for(g.as_bytes(), &req).unwrap();
        c.tx_complete(g.as_bytes()).unwrap();
        assert_eq!(c.node_name(r.node).unwrap(), owner);
    }
}

#[test]
fn soft_a_draining_primary_takes_no_new_gtrid_and_a_down_one_sends_it_to_the_promoted_backup() {
    let c = common::cluster(SOFT);
    let t = c.session_token("sess-drain").unwrap();
    let primary = primary_of(&c, &t);
    c.apply_event(&fan(&primary, "down", "USER")).unwrap();
    assert_eq!(c.node_by_name(&primary).unwrap().state(), NodeState::Draining);
    // The session's own work stays on its draining primary ...
    assert_eq!(c.node_name(c.route_token(&t).unwrap().route.node).unwrap(), primary);
    // ... but a new transaction is a new affinity.
    for i in 0..20 {
        assert_ne!(begin(&c, &format!("d{i}"), &t).unwrap(), primary);
    }
    c.apply_event(&fan(&primary, "down", "FAILURE")).unwrap();
    let promoted = c.node_name(c.route_token(&t).unwrap().route.node).unwrap();
    assert_ne!(promoted, primary);
    assert_eq!(begin(&c, "after-down", &t).unwrap(), promoted);
}

#[test]
fn soft_session_strict_never_refuses_a_new_gtrid_for_the_tokens_sake() {
    let c = common::cluster(&format!("{SOFT}\nsession.strict = true"));
    let t = c.session_token("sess-strict").unwrap();
    let primary = primary_of(&c, &t);
    c.apply_event(&fan(&primary, "down", "FAILURE")).unwrap();
    assert_eq!(c.route_token(&t).unwrap_err().kind(), ErrorKind::StrictAffinity);
    let placed = begin(&c, "g", &t).expect("no branch exists yet: placing it splits nothing");
    assert_ne!(placed, primary);
}

#[test]
fn a_malformed_token_is_refused_and_changes_nothing() {
    let c = common::cluster(SOFT);
    for bad in ["", "no-routing-data", "s!ra1.zz.none", "s!ra9.00000000.none", "s!ra1.0000000g.none"] {
        let e = c.tx_begin_for(b"bad", &with_token(bad)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}: {e}");
        assert!(c.tx_info(b"bad").is_none(), "{bad:?}: a refused begin registered the gtrid");
    }
}

#[test]
fn soft_a_token_of_a_node_this_cluster_does_not_know_follows_the_node_its_route_gives_the_session() {
    let c = common::cluster(SOFT);
    // Well formed, naming no node of this cluster (another cluster's token):
    // route_token gives the session a fresh primary, and the gtrid follows it.
    let foreign = "sess!ra1.0badbeef.none";
    assert!(c.decode_token(foreign).unwrap().primary.is_none());
    let routed = c.node_name(c.route_token(foreign).unwrap().route.node).unwrap();
    for i in 0..20 {
        assert_eq!(begin(&c, &format!("foreign-{i}"), foreign).unwrap(), routed);
    }
}

#[test]
fn strict_a_token_of_a_node_no_process_knows_places_the_gtrid_on_its_own_hash_alike() {
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(STRICT, &cp), cluster_with_clock(STRICT, &cq));
    for c in [&cp, &cq] {
        c.advance_ms(10_000);
    }
    let foreign = "sess!ra1.0badbeef.none";
    assert_eq!(never_split(&p, &q, foreign, "foreign"), (0, 40));
    // The same nodes as gtrids begun with no request at all.
    for i in 0..40 {
        let g = format!("foreign-{i}");
        assert_eq!(begin(&p, &g, foreign).ok(), common::place(&q, &g), "{g}");
    }
}

/// Two processes, strict across processes: never a split, whatever one of
/// them has seen of the token's primary.
fn never_split(p: &Cluster, q: &Cluster, t: &str, prefix: &str) -> (usize, usize) {
    let (mut refused, mut alike) = (0, 0);
    for i in 0..40 {
        let g = format!("{prefix}-{i}");
        match (begin(p, &g, t), begin(q, &g, t)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "gtrid {g} split: {a} vs {b}");
                alike += 1;
            }
            (Err(e), _) | (_, Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::StrictAffinity, "{e}");
                refused += 1;
            }
        }
    }
    (refused, alike)
}

#[test]
fn strict_across_processes_the_tokens_primary_places_alike_and_changes_refuse_never_split() {
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(STRICT, &cp), cluster_with_clock(STRICT, &cq));
    for c in [&cp, &cq] {
        c.advance_ms(10_000);
    }
    let t = p.session_token("sess-agree").unwrap();
    let primary = primary_of(&p, &t);
    // Up everywhere: the primary, in both.
    assert_eq!(never_split(&p, &q, &t, "up"), (0, 40));
    assert_eq!(begin(&p, "up-x", &t).unwrap(), primary);

    // Draining by FAN in p first: p refuses while it settles; q still places on the primary.
    p.apply_event(&fan(&primary, "down", "USER")).unwrap();
    let (refused, _) = never_split(&p, &q, &t, "drain-one");
    assert_eq!(refused, 40, "p saw the drain within the settle time: it refuses");
    q.apply_event(&fan(&primary, "down", "USER")).unwrap();
    for c in [&cp, &cq] {
        c.advance_ms(3_000);
    }
    // Settled in both: placed on the gtrid's own hash, alike, never on the
    // drained primary (nor on a promoted backup, which is each process's own).
    let (refused, alike) = never_split(&p, &q, &t, "drained");
    assert_eq!((refused, alike), (0, 40));
    assert_ne!(begin(&p, "drained-x", &t).unwrap(), primary);

    // Up again everywhere and settled: the primary again.
    for c in [&p, &q] {
        c.apply_event(&fan(&primary, "up", "USER")).unwrap();
    }
    for c in [&cp, &cq] {
        c.advance_ms(3_000);
    }
    assert_eq!(never_split(&p, &q, &t, "back"), (0, 40));
    assert_eq!(begin(&q, "back-x", &t).unwrap(), primary);
}

#[test]
fn strict_a_primary_down_only_in_this_processs_view_refuses_where_the_others_would_place_it() {
    let config = format!("{STRICT}\nheartbeat.misses = 2");
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(&config, &cp), cluster_with_clock(&config, &cq));
    for c in [&cp, &cq] {
        c.advance_ms(10_000);
    }
    let t = p.session_token("sess-local").unwrap();
    let primary = primary_of(&p, &t);
    let id = p.node_by_name(&primary).unwrap().id();
    for _ in 0..2 {
        p.report_probe(id, false).unwrap();
    }
    assert_eq!(p.node_by_name(&primary).unwrap().state(), NodeState::Down);
    for c in [&cp, &cq] {
        c.advance_ms(60_000);
    }
    let e = begin(&p, "local", &t).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StrictAffinity, "{e}");
    assert!(e.to_string().contains("this process"), "says the view is this process's own: {e}");
    assert_eq!(begin(&q, "local", &t).unwrap(), primary);
    assert_eq!(never_split(&p, &q, &t, "local"), (40, 0));

    // A FAN down (shared) reaching both, settled: placed alike around it.
    for c in [&p, &q] {
        c.apply_event(&fan(&primary, "down", "FAILURE")).unwrap();
    }
    for c in [&cp, &cq] {
        c.advance_ms(3_000);
    }
    assert_eq!(never_split(&p, &q, &t, "shared"), (0, 40));
    assert_ne!(begin(&p, "shared-x", &t).unwrap(), primary);
}

#[test]
fn strict_a_token_naming_a_node_removed_within_the_settle_time_refuses() {
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(STRICT, &cp), cluster_with_clock(STRICT, &cq));
    for c in [&cp, &cq] {
        c.advance_ms(10_000);
    }
    let t = p.session_token("sess-removed").unwrap();
    let primary = primary_of(&p, &t);
    p.remove_node(&primary).unwrap();
    let (refused, _) = never_split(&p, &q, &t, "removing");
    assert!(refused > 0, "p removed the primary within the settle time: it refuses");
    q.remove_node(&primary).unwrap();
    for c in [&cp, &cq] {
        c.advance_ms(3_000);
    }
    assert_eq!(never_split(&p, &q, &t, "removed"), (0, 40));
}
