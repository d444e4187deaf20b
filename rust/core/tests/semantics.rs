//! The core against its README (issue [core-semantics]): each test names the
//! behaviour the README promises and failed before the fix.

mod common;

use common::{cluster, cluster_with_clock};
use racaffinity::{
    Cluster, DataKey, DownCause, ErrorKind, ManualClock, NodeId, NodeSpec, NodeState, Outcome, RouteKind, RouteRequest,
};

fn id(c: &Cluster, name: &str) -> NodeId {
    c.node_by_name(name).expect("known node").id()
}

fn fan(instance: &str, status: &str, reason: &str) -> String {
    format!("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={instance} status={status} reason={reason}")
}

fn eject(c: &Cluster, node: NodeId) {
    while c.node(node).unwrap().state() != NodeState::Down {
        c.report_outcome(node, false).unwrap();
    }
}

// ---- 1. the half-open trial ------------------------------------------------

const TRIAL: &str = "nodes = A, B\ntransaction.placement = balanced\nsession.placement = balanced\n\
                     data.placement = balanced\nhealth.eject_after_failures = 1";

/// A cluster of `TRIAL` on `clock` with node A ejected: its half-open trial is due once the
/// back-off (1 s) has passed.
fn a_ejected(clock: &ManualClock) -> (Cluster, NodeId) {
    let c = cluster_with_clock(TRIAL, clock);
    let a = id(&c, "A");
    eject(&c, a);
    (c, a)
}

/// [`a_ejected`] with the back-off passed: A's trial is due.
fn a_trial_due() -> (ManualClock, Cluster, NodeId) {
    let clock = ManualClock::new(0);
    let (c, a) = a_ejected(&clock);
    clock.advance_ms(1_000);
    (clock, c, a)
}

#[test]
fn half_open_trial_never_places_a_transaction() {
    let (_clock, c, a) = a_trial_due();
    for i in 0..64 {
        let g = format!("g{i}");
        let first = c.tx_begin(g.as_bytes()).unwrap();
        let second = c.tx_begin(g.as_bytes()).unwrap();
        assert_ne!(first.node, a, "gtrid {g} placed on the ejected node");
        assert_eq!(first.node, second.node, "gtrid {g} split: {first:?} then {second:?}");
    }
}

#[test]
fn half_open_trial_never_places_a_session_pin_or_partition() {
    let (_clock, c, a) = a_trial_due();
    for i in 0..64 {
        assert_ne!(c.session_route(format!("s{i}").as_bytes()).unwrap().node, a, "session placed on the trial node");
        assert_ne!(c.route_key_i64(i).unwrap().node, a, "partition placed on the trial node");
        let ctx = c.new_context_key();
        assert_ne!(c.pin_context(ctx).unwrap().node, a, "pin placed on the trial node");
        c.release_context(ctx);
    }
}

#[test]
fn half_open_trial_goes_to_one_unpinned_pick_per_back_off() {
    let clock = ManualClock::new(0);
    let (c, a) = a_ejected(&clock);
    let trials = |c: &Cluster| (0..200).filter(|_| c.pick_balanced().unwrap().node == a).count();
    assert_eq!(trials(&c), 0, "no trial before the back-off ends");
    clock.advance_ms(1_000);
    assert_eq!(trials(&c), 1, "exactly one trial once the back-off ended");
}

// ---- 2. placements processes must agree on --------------------------------

#[test]
fn tx_begin_for_with_an_unavailable_key_owner_is_placed_deterministically() {
    let text = "nodes = A, B, C, D";
    let (p, q) = (cluster(text), cluster(text));
    // The owner of every key below is marked down in both processes.
    let owner = p.partition_owner(p.partition_of(DataKey::Int(7)).unwrap()).unwrap();
    let name = p.node_name(owner).unwrap();
    for c in [&p, &q] {
        c.set_node_state(&name, NodeState::Down).unwrap();
    }
    for i in 0..100 {
        let g = format!("gtrid-{i}");
        let req = RouteRequest { key: Some(DataKey::Int(7)), ..Default::default() };
        let a = p.tx_begin_for(g.as_bytes(), &req).unwrap();
        let b = q.tx_begin_for(g.as_bytes(), &req).unwrap();
        assert_eq!(a.node, b.node, "two processes placed {g} differently");
        assert_ne!(a.node, owner);
    }
}

// ---- 3. sessions never land on a Down node while Up nodes exist ------------

#[test]
fn sessions_avoid_a_down_node_when_up_nodes_advise_against_affinity() {
    for placement in ["balanced", "rendezvous"] {
        let c = cluster(&format!("nodes = A, B, C\nsession.placement = {placement}"));
        c.apply_event(
            "VERSION=1.0 database=orcl service=svc { {instance=A percent=50 flag=GOOD aff=FALSE}\
             {instance=B percent=50 flag=GOOD aff=FALSE} }",
        )
        .unwrap();
        c.set_node_state("C", NodeState::Down).unwrap();
        let down = id(&c, "C");
        for i in 0..300 {
            let r = c.session_route(format!("session-{i}").as_bytes()).unwrap();
            assert_ne!(r.node, down, "{placement}: session placed on Down C");
            assert_ne!(r.kind, RouteKind::Panic, "{placement}: panic while A and B are Up");
        }
    }
}

// ---- 4. and 5. the operator's layer ------------------------------------------

#[test]
fn fan_up_never_lifts_an_operator_mark_down() {
    let c = cluster("nodes = A, B");
    c.set_node_state("A", NodeState::Down).unwrap();
    c.apply_event(&fan("A", "down", "FAILURE")).unwrap();
    c.apply_event(&fan("A", "up", "FAILURE")).unwrap();
    let a = c.node_by_name("A").unwrap();
    assert_eq!(a.state(), NodeState::Down);
    assert_eq!(a.down_cause(), DownCause::Admin);
}

#[test]
fn probes_never_lift_an_operator_drain() {
    let c = cluster("nodes = A, B");
    let a = id(&c, "A");
    c.set_node_state("A", NodeState::Draining).unwrap();
    for _ in 0..3 {
        c.report_probe(a, false).unwrap();
    }
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down, "a dead draining node is Down");
    c.report_probe(a, true).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Draining, "the probe lifted the operator's drain");
    assert_eq!(c.node(a).unwrap().down_cause(), DownCause::Admin);
}

#[test]
fn ejection_recovery_never_lifts_an_operator_drain() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B\nhealth.eject_after_failures = 2", &clock);
    let a = id(&c, "A");
    c.set_node_state("A", NodeState::Draining).unwrap();
    eject(&c, a);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down);
    c.report_probe(a, true).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Draining);
    c.set_node_state("A", NodeState::Up).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up, "the operator lifts it");
}

// ---- 6. leases in flight at ejection ---------------------------------------

/// Node A of "nodes = A, B" with `begun` leases begun on it, the first
/// `failed` of which have ended in failure: leases in flight at ejection.
fn leases_on_a(clock: &ManualClock, begun: usize, failed: usize) -> (Cluster, NodeId) {
    let c = cluster_with_clock("nodes = A, B", clock);
    let a = id(&c, "A");
    for _ in 0..begun {
        c.begin_lease(a);
    }
    for _ in 0..failed {
        c.end_lease(a, Outcome::Failed);
    }
    (c, a)
}

#[test]
fn failures_of_leases_in_flight_at_ejection_eject_once() {
    let clock = ManualClock::new(0);
    let (c, a) = leases_on_a(&clock, 10, 10);
    let n = c.node(a).unwrap();
    assert_eq!(n.state(), NodeState::Down);
    assert_eq!(c.metrics().nodes[a.0 as usize].ejections, 1);
    assert_eq!(n.ejected_for_ms(&clock), 1_000, "back-off grew without a trial");
}

#[test]
fn success_of_a_lease_begun_before_ejection_does_not_close_the_breaker() {
    let clock = ManualClock::new(0);
    let (c, a) = leases_on_a(&clock, 6, 5);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down);
    c.end_lease(a, Outcome::Ok);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down, "a stale success closed the breaker");
    // The trial's own success does.
    clock.advance_ms(1_000);
    let trial = (0..100).map(|_| c.pick_balanced().unwrap()).find(|r| r.node == a).expect("a trial");
    c.lease(trial).release(Outcome::Ok);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up);
}

// ---- 7. stateless sessions use static weights -------------------------------

#[test]
fn stateless_sessions_of_a_down_owner_use_static_weights() {
    let c = cluster("nodes = A, B, C, D\nsession.mode = stateless");
    c.apply_event(
        "VERSION=1.0 database=orcl service=svc { {instance=A percent=10 flag=GOOD aff=TRUE}\
         {instance=B percent=20 flag=GOOD aff=TRUE}{instance=C percent=30 flag=GOOD aff=TRUE}\
         {instance=D percent=40 flag=GOOD aff=TRUE} }",
    )
    .unwrap();
    c.set_node_state("D", NodeState::Down).unwrap();
    let without_d = cluster("nodes = A, B, C\nsession.mode = stateless");
    for i in 0..600 {
        let key = format!("k{i}");
        let got = c.node_name(c.session_route(key.as_bytes()).unwrap().node).unwrap();
        let want = without_d.node_name(without_d.session_route(key.as_bytes()).unwrap().node).unwrap();
        assert_eq!(got, want, "key {key}");
    }
}

// ---- 8. config ---------------------------------------------------------------

#[test]
fn config_refuses_one_partition_given_twice_in_two_spellings() {
    for dup in ["data.partition.01 = B", "data.partition.+1 = B"] {
        let e = racaffinity::Config::parse(&format!("nodes = A, B\ndata.partition.1 = A\n{dup}")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{dup}");
    }
}

#[test]
fn config_refuses_undocumented_spellings_naming_the_key() {
    for (text, key) in [
        ("nodes = A\nsession.idle_ttl = 10 s", "session.idle_ttl"),
        ("nodes = A\nsession.idle_ttl = 10min", "session.idle_ttl"),
        ("nodes = A\nthread.strict = yes", "thread.strict"),
        ("nodes = A\nthread.strict = 1", "thread.strict"),
        ("nodes = A\ndata.strict = on", "data.strict"),
        ("nodes = A,,B", "nodes"),
        ("nodes = A\ndata.partitions = +8", "data.partitions"),
    ] {
        let e = racaffinity::Config::parse(text).expect_err(text);
        assert_eq!(e.kind(), ErrorKind::Config, "{text}");
        assert!(e.to_string().contains(key), "{text}: {e}");
    }
    // The documented spellings still parse.
    racaffinity::Config::parse("nodes = A, B\nthread.strict = TRUE\nsession.idle_ttl = 10s\ndata.partition.1 = A")
        .unwrap();
}

// ---- decided behaviours -------------------------------------------------------

#[test]
fn soft_route_of_a_transaction_on_a_lost_node_repins_it() {
    let c = cluster("nodes = A, B, C");
    let first = c.tx_begin(b"g").unwrap();
    c.set_node_state(&c.node_name(first.node).unwrap(), NodeState::Down).unwrap();
    let r = c.route(&RouteRequest { transaction: Some(b"g"), ..Default::default() }).unwrap();
    assert_eq!(r.kind, RouteKind::Repinned);
    assert_ne!(r.node, first.node);
    assert_eq!(c.tx_info(b"g").unwrap().node, r.node, "later branches follow the new node");
    c.set_strict(racaffinity::Scope::Transaction, true);
    c.set_node_state(&c.node_name(r.node).unwrap(), NodeState::Down).unwrap();
    let e = c.route(&RouteRequest { transaction: Some(b"g"), ..Default::default() }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StrictAffinity);
}

#[test]
fn strict_data_routes_to_a_draining_owner_that_still_holds_the_data() {
    let c = cluster("nodes = A, B, C\ndata.strict = true");
    let owner = c.partition_owner(c.partition_of(DataKey::Int(42)).unwrap()).unwrap();
    c.set_node_state(&c.node_name(owner).unwrap(), NodeState::Draining).unwrap();
    let r = c.route_key_i64(42).unwrap();
    assert_eq!((r.node, r.kind), (owner, RouteKind::Affinity));
}

#[test]
fn balanced_partition_of_a_removed_node_is_placed_again() {
    let c = cluster("nodes = A, B, C\ndata.placement = balanced");
    let first = c.route_key_i64(5).unwrap().node;
    c.remove_node(&c.node_name(first).unwrap()).unwrap();
    let again = c.route_key_i64(5).unwrap();
    assert_ne!(again.node, first);
    assert_eq!(again.kind, RouteKind::Placed);
    let next = c.route_key_i64(5).unwrap();
    assert_eq!((next.node, next.kind), (again.node, RouteKind::Affinity), "the new owner sticks");
}

#[test]
fn explicit_partition_follows_a_removed_and_re_added_node() {
    let c = cluster(
        "nodes = A, B\ndata.strict = true\ndata.partitions = 4\ndata.partition.0 = A\n\
                     data.partition.1 = A\ndata.partition.2 = A\ndata.partition.3 = A",
    );
    c.remove_node("A").unwrap();
    let a2 = c.add_node(NodeSpec::new("A")).unwrap();
    let r = c.route_key_i64(1).unwrap();
    assert_eq!((r.node, r.kind), (a2, RouteKind::Affinity));
}

#[test]
fn tx_recovered_on_a_removed_and_re_added_node_is_not_a_split() {
    let c = cluster("nodes = A, B");
    c.tx_recovered(b"g", id(&c, "A")).unwrap();
    c.remove_node("A").unwrap();
    let a2 = c.add_node(NodeSpec::new("A")).unwrap();
    c.tx_recovered(b"g", a2).unwrap();
    assert_eq!(c.tx_route(b"g").unwrap().node, a2);
}

#[test]
fn prometheus_carries_rlb_aff_down_cause_and_strict() {
    let c = cluster("nodes = A, B\ntransaction.strict = true");
    c.apply_event("VERSION=1.0 database=orcl service=svc { {instance=A percent=70 flag=GOOD aff=FALSE} }").unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    let p = c.metrics().to_prometheus();
    for want in [
        "racaffinity_node_rlb_percent{cluster=\"default\",node=\"A\"} 70",
        "racaffinity_node_affinity_advised{cluster=\"default\",node=\"A\"} 0",
        "racaffinity_node_down_cause{cluster=\"default\",node=\"B\",cause=\"admin\"} 1",
        "racaffinity_scope_strict{cluster=\"default\",scope=\"transaction\"} 1",
        "racaffinity_scope_strict{cluster=\"default\",scope=\"session\"} 0",
    ] {
        assert!(p.contains(want), "missing `{want}` in:\n{p}");
    }
}

#[test]
fn advisory_naming_some_nodes_gives_the_others_no_advised_share() {
    let c = cluster("nodes = A, B\npolicy = weighted");
    c.apply_event("VERSION=1.0 database=orcl service=svc { {instance=A percent=50 flag=GOOD aff=TRUE} }").unwrap();
    let b = c.node_by_name("B").unwrap();
    assert_eq!(b.effective_weight(), 0, "B kept static weight 1 against a percent of 50");
    assert!((0..200).all(|_| c.pick_balanced().unwrap().node != b.id()));
}
