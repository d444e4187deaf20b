//! Failover: node states, FAN/RLB events, heartbeats and passive ejection.

mod common;

use common::{cluster, cluster_with_clock};
use proptest::prelude::*;
use racaffinity::{DownCause, ErrorKind, ManualClock, NodeState, Outcome, RouteKind};

fn states(c: &racaffinity::Cluster) -> Vec<NodeState> {
    c.node_ids().into_iter().map(|id| c.node(id).unwrap().state()).collect()
}

const DOC_FAN_DOWN: &str = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_2 host=h2 \
                            status=down reason=FAILURE card=1 timestamp=2026-11-29 08:00:00";
const DOC_RLB: &str = "VERSION=1.0 database=orcl service=svc { {instance=orcl2 percent=50 flag=GOOD aff=TRUE}\
                       {instance=orcl1 percent=50 flag=UNKNOWN aff=FALSE} } timestamp=2026-11-29 08:00:00";

#[test]
fn fan_failure_downs_user_drains_and_up_restores() {
    let c = cluster("nodes = orcl_1, orcl_2, orcl_3");
    let e = c.apply_event(DOC_FAN_DOWN).unwrap();
    assert_eq!(e.changes.len(), 1);
    assert_eq!((e.changes[0].name.as_str(), e.changes[0].to), ("orcl_2", NodeState::Down));
    assert_eq!(states(&c), [NodeState::Up, NodeState::Down, NodeState::Up]);
    for _ in 0..100 {
        assert_ne!(c.pick().unwrap().node, e.changes[0].node);
    }

    c.apply_event(
        "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_3 host=h3 status=down reason=USER card=0",
    )
    .unwrap();
    assert_eq!(c.node_by_name("orcl_3").unwrap().state(), NodeState::Draining);

    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=orcl_2 host=h2 status=up reason=BOOT")
        .unwrap();
    c.apply_event(
        "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=ORCL_3 host=h3 status=up reason=USER card=1",
    )
    .unwrap();
    assert_eq!(states(&c), [NodeState::Up; 3]);
}

#[test]
fn a_srv_preconnect_event_is_understood_and_changes_nothing() {
    // SRV_PRECONNECT is one of the FAN event types Oracle documents (RAC
    // Administration, "FAN event types"): a TAF pre-connect service's
    // shadow moved. Refusing it as malformed counts a good line as bad
    // in every relay and feed; it says nothing about where work can go.
    let c = cluster("nodes = orcl_1, orcl_2, orcl_3");
    for status in ["preconn_down", "preconn_up"] {
        let line = format!(
            "SRV_PRECONNECT VERSION=1.0 service=svc_preconnect database=orcl instance=orcl_2 host=h2 \
             status={status} reason=FAILURE timestamp=2026-11-29 08:00:00 timezone=+00:00 db_domain="
        );
        let e = c.apply_event(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(e.changes.is_empty(), "{:?}", e.changes);
    }
    assert_eq!(states(&c), [NodeState::Up; 3]);
}

#[test]
fn fan_timestamps_of_different_zones_order_by_the_instant() {
    // Oracle writes `timestamp=` in the server's local time and its offset
    // in `timezone=`; Java's simplefan adapter writes UTC. The later event
    // must win whichever way each was written.
    let c = cluster("nodes = orcl_1, orcl_2");
    let down_utc = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=down reason=FAILURE \
                    timestamp=2026-11-29 15:00:00";
    let up_local_5s_later = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=up reason=BOOT \
                             timestamp=2026-11-29 08:00:05 timezone=-07:00 db_domain=example.com";
    c.apply_event(down_utc).unwrap();
    c.apply_event(up_local_5s_later).unwrap();
    assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Up, "the up came 5 s after the down");

    let c = cluster("nodes = orcl_1, orcl_2");
    let up_local = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=up reason=BOOT \
                    timestamp=2026-11-29 16:00:00 timezone=+01:00";
    let down_utc_5s_earlier = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=down \
                               reason=FAILURE timestamp=2026-11-29 14:59:55";
    c.apply_event(up_local).unwrap();
    c.apply_event(down_utc_5s_earlier).unwrap();
    assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Up, "the down is 5 s older than the up");
}

#[test]
fn node_down_event_downs_every_instance_on_that_host() {
    let c = cluster(
        "nodes = a1, a2, b1\nnode.a1.address = hosta:1521\nnode.a2.address = hosta:1522\nnode.b1.address = hostb:1521",
    );
    let e = c
        .apply_event("NODE VERSION=1.0 host=hosta incarnation=175 status=nodedown reason=member_leave timestamp=x")
        .unwrap();
    assert_eq!(e.changes.len(), 2);
    assert_eq!(states(&c), [NodeState::Down, NodeState::Down, NodeState::Up]);
    assert_eq!(
        c.apply_event("NODE VERSION=1.0 host=nohost status=nodedown reason=member_leave").unwrap_err().kind(),
        ErrorKind::UnknownNode
    );
}

#[test]
fn fan_up_does_not_override_an_operators_down() {
    let c = cluster("nodes = orcl_1, orcl_2");
    c.set_node_state("orcl_2", NodeState::Down).unwrap();
    c.apply_event("INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=up reason=BOOT").unwrap();
    assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Down);
    assert_eq!(c.node_by_name("orcl_2").unwrap().down_cause(), DownCause::Admin);
}

#[test]
fn rlb_advisory_sets_percent_flag_and_affinity() {
    let c = cluster("nodes = orcl1, orcl2");
    let e = c.apply_event(DOC_RLB).unwrap();
    assert_eq!(e.advised.len(), 2);
    assert_eq!(e.revoked, vec![c.node_by_name("orcl1").unwrap().id()]);
    let n1 = c.node_by_name("orcl1").unwrap();
    assert_eq!(n1.rlb_percent(), Some(50));
    assert!(!n1.affinity_advised());
    assert!(c.node_by_name("orcl2").unwrap().affinity_advised());
}

#[test]
fn foreign_and_unknown_events_change_nothing() {
    let c = cluster("nodes = orcl1, orcl2\ndatabase = orcl\nservice = svc");
    let other_db =
        "SERVICEMEMBER VERSION=1.0 service=svc database=other instance=orcl1 host=h status=down reason=FAILURE";
    assert_eq!(c.apply_event(other_db).unwrap_err().kind(), ErrorKind::ForeignEvent);
    let other_svc =
        "SERVICEMEMBER VERSION=1.0 service=batch database=orcl instance=orcl1 host=h status=down reason=FAILURE";
    assert_eq!(c.apply_event(other_svc).unwrap_err().kind(), ErrorKind::ForeignEvent);
    let unknown =
        "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl9 host=h status=down reason=FAILURE";
    assert_eq!(c.apply_event(unknown).unwrap_err().kind(), ErrorKind::UnknownNode);
    // One unknown instance in an advisory rejects the whole advisory.
    let partly = "VERSION=1.0 database=orcl service=svc { {instance=orcl1 percent=10 flag=GOOD aff=FALSE}\
                  {instance=orcl9 percent=90 flag=GOOD aff=TRUE} }";
    assert_eq!(c.apply_event(partly).unwrap_err().kind(), ErrorKind::UnknownNode);
    let n1 = c.node_by_name("orcl1").unwrap();
    assert_eq!((n1.state(), n1.rlb_percent(), n1.affinity_advised()), (NodeState::Up, None, true));
}

#[test]
fn instance_events_carrying_the_database_in_service_pass_the_service_filter() {
    let c = cluster("nodes = orcl1, orcl2\ndatabase = orcl\nservice = svc");
    c.apply_event(
        "INSTANCE VERSION=1.0 service=orcl database=orcl instance=orcl1 host=node1 status=down reason=FAILURE",
    )
    .unwrap();
    assert_eq!(c.node_by_name("orcl1").unwrap().state(), NodeState::Down);
}

#[test]
fn passive_ejection_backs_off_exponentially_with_half_open_trials() {
    let clock = ManualClock::new(1);
    let c = cluster_with_clock(
        "nodes = A, B\npolicy = round_robin\nhealth.eject_after_failures = 3\nhealth.eject_backoff = 1s\nhealth.eject_backoff_max = 4s",
        &clock,
    );
    let a = c.node_by_name("A").unwrap();
    for _ in 0..2 {
        c.report_outcome(a.id(), false).unwrap();
    }
    assert_eq!(a.state(), NodeState::Up, "below the threshold");
    let ch = c.report_outcome(a.id(), false).unwrap().expect("third failure ejects");
    assert_eq!((ch.from, ch.to), (NodeState::Up, NodeState::Down));
    assert_eq!(a.down_cause(), DownCause::Ejected);
    assert_eq!(a.ejected_for_ms(&clock), 1000);

    let picks_on_a = |n: usize| (0..n).filter(|_| c.pick().unwrap().node == a.id()).count();
    assert_eq!(picks_on_a(20), 0, "ejected: no picks during back-off");
    clock.advance_ms(1000);
    assert_eq!(picks_on_a(20), 1, "exactly one half-open trial per back-off period");
    // The trial fails: ejected again for twice as long.
    c.report_outcome(a.id(), false).unwrap();
    assert_eq!(a.ejected_for_ms(&clock), 2000);
    clock.advance_ms(2000);
    assert_eq!(picks_on_a(10), 1);
    c.report_outcome(a.id(), false).unwrap();
    assert_eq!(a.ejected_for_ms(&clock), 4000);
    c.report_outcome(a.id(), false).unwrap();
    assert_eq!(a.ejected_for_ms(&clock), 4000, "capped at eject_backoff_max");
    clock.advance_ms(4000);
    // The trial succeeds through a lease: the node is back.
    let trial = loop {
        let r = c.pick().unwrap();
        if r.node == a.id() {
            break r;
        }
    };
    c.lease(trial).release(Outcome::Ok);
    assert_eq!(a.state(), NodeState::Up);
    assert!(picks_on_a(20) >= 9);
}

#[test]
fn heartbeat_misses_down_a_node_after_three_and_a_success_restores_it() {
    let c = cluster("nodes = A, B");
    assert_eq!(c.heartbeat_interval_ms(), 10_000);
    let a = c.node_by_name("A").unwrap().id();
    assert_eq!(c.report_probe(a, false).unwrap(), None);
    assert_eq!(c.report_probe(a, false).unwrap(), None);
    let ch = c.report_probe(a, false).unwrap().expect("third miss");
    assert_eq!(ch.to, NodeState::Down);
    assert_eq!(c.node(a).unwrap().down_cause(), DownCause::Heartbeat);
    let ch = c.report_probe(a, true).unwrap().expect("probe OK restores");
    assert_eq!(ch.to, NodeState::Up);
    // A success in between resets the count.
    c.report_probe(a, false).unwrap();
    c.report_probe(a, false).unwrap();
    c.report_probe(a, true).unwrap();
    assert_eq!(c.report_probe(a, false).unwrap(), None);
}

/// A probe or an outcome begun before its node was removed and reported
/// after (a heartbeat holding the id, a removal from the feed meanwhile) is
/// accepted and ignored, as a host lease's end is: counting it would act on
/// a node that routes nothing, and an error made every such race a failure
/// for the host to handle. An id this cluster never issued is UnknownNode.
#[test]
fn a_late_report_about_a_removed_node_is_accepted_and_changes_nothing() {
    let c = cluster("nodes = A, B\nheartbeat.misses = 1\nhealth.eject_after_failures = 1");
    let a = c.node_by_name("A").unwrap().id();
    c.remove_node("A").unwrap();
    let before = (c.metrics().to_json(), c.node(a).unwrap().state());
    for ok in [false, true, false] {
        assert_eq!(c.report_probe(a, ok).map_err(|e| e.kind()), Ok(None), "probe {ok}");
        assert_eq!(c.report_outcome(a, ok).map_err(|e| e.kind()), Ok(None), "outcome {ok}");
    }
    assert_eq!((c.metrics().to_json(), c.node(a).unwrap().state()), before);
    let never = racaffinity::NodeId(2);
    assert_eq!(c.report_probe(never, false).unwrap_err().kind(), ErrorKind::UnknownNode);
    assert_eq!(c.report_outcome(never, false).unwrap_err().kind(), ErrorKind::UnknownNode);
}

#[test]
fn heartbeat_success_does_not_lift_an_event_or_operator_down() {
    let c = cluster("nodes = orcl_1, orcl_2");
    c.apply_event("INSTANCE VERSION=1.0 database=orcl instance=orcl_1 host=h1 status=down reason=FAILURE").unwrap();
    let a = c.node_by_name("orcl_1").unwrap();
    c.report_probe(a.id(), true).unwrap();
    assert_eq!(a.state(), NodeState::Down);
}

#[test]
fn nodes_can_be_added_and_removed_at_runtime() {
    let c = cluster("nodes = A");
    let e0 = c.epoch();
    let b = c.add_node(racaffinity::NodeSpec::new("B").weight(3)).unwrap();
    assert!(c.epoch() > e0);
    assert_eq!(c.add_node(racaffinity::NodeSpec::new("b")).unwrap_err().kind(), ErrorKind::DuplicateNode);
    assert_eq!(c.node_ids().len(), 2);
    c.remove_node("A").unwrap();
    for _ in 0..20 {
        assert_eq!(c.pick().unwrap().node, b);
    }
    assert_eq!(c.remove_node("A").unwrap_err().kind(), ErrorKind::UnknownNode);
    // A late probe of a removed node is taken and ignored.
    assert_eq!(c.report_probe(racaffinity::NodeId(0), true).unwrap(), None);
    assert_eq!(c.add_node(racaffinity::NodeSpec::new("bad name")).unwrap_err().kind(), ErrorKind::InvalidArgument);
    // Removed ids are not reused.
    assert_eq!(c.add_node(racaffinity::NodeSpec::new("A")).unwrap(), racaffinity::NodeId(2));
}

#[test]
fn pick_kind_is_balanced_when_no_affinity_applies() {
    let c = cluster("nodes = A, B");
    assert_eq!(c.pick().unwrap().kind, RouteKind::Balanced);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Garbage never changes state: any line that fails to apply leaves every
    /// node as it was.
    #[test]
    fn malformed_event_text_changes_nothing(line in "\\PC{0,120}", prefix in prop_oneof![
        Just(""), Just("SERVICEMEMBER "), Just("VERSION=1.0 "), Just("NODE VERSION=1.0 "), Just("{ {"),
        Just("SERVICEMEMBER VERSION=1.0 instance=orcl1 "),
    ]) {
        let c = cluster("nodes = orcl1, orcl2");
        let text = format!("{prefix}{line}");
        if c.apply_event(&text).is_err() {
            prop_assert_eq!(states(&c), vec![NodeState::Up, NodeState::Up]);
            let n = c.node_by_name("orcl1").unwrap();
            prop_assert_eq!(n.rlb_percent(), None);
            prop_assert!(n.affinity_advised());
        }
    }

    /// Truncating a documented example anywhere gives an error or a valid
    /// event, never a panic.
    #[test]
    fn truncated_documented_examples_never_panic(cut in 0usize..200) {
        let c = cluster("nodes = orcl_2, orcl1, orcl2");
        for ex in [DOC_FAN_DOWN, DOC_RLB] {
            let mut end = cut.min(ex.len());
            while !ex.is_char_boundary(end) { end -= 1; }
            let _ = c.apply_event(&ex[..end]);
        }
    }
}

#[test]
fn lease_tokens_close_once_and_a_second_close_changes_nothing() {
    let c = cluster("nodes = A, B");
    let a = c.node_by_name("A").unwrap().id();
    let t = c.open_lease(a).unwrap();
    assert_eq!(c.open_lease_count(), 1);
    assert_eq!(c.node(a).unwrap().in_flight(), 1);
    assert_eq!(c.close_lease(t, Outcome::Failed).unwrap(), a);
    let e = c.close_lease(t, Outcome::Failed).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownLease);
    let m = c.metrics();
    assert_eq!((m.nodes[0].in_flight, m.nodes[0].failures), (0, 1));
    assert_eq!(c.open_lease(racaffinity::NodeId(9)).unwrap_err().kind(), ErrorKind::UnknownNode);
}

#[test]
fn an_answering_probe_lifts_the_ejection_but_never_ends_a_planned_drain() {
    // The planned drain came from a FAN event; the ejection and the probe
    // are this process's own evidence and lift only what they imposed.
    let c = common::cluster("nodes = A, B\nhealth.eject_after_failures = 1\nheartbeat.misses = 1");
    let a = c.node_by_name("A").unwrap();
    c.apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=A status=down reason=USER").unwrap();
    assert_eq!(a.state(), NodeState::Draining);
    c.report_probe(a.id(), false).unwrap();
    assert_eq!(a.state(), NodeState::Down, "missed heartbeats take the draining node down");
    c.report_probe(a.id(), true).unwrap();
    assert_eq!(a.state(), NodeState::Draining, "the drain still holds once the probe answers");
    c.apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=A status=up").unwrap();
    assert_eq!(a.state(), NodeState::Up);
}

/// Oracle's `NODE` event names the cluster node by its short name, while a
/// node's address is usually its VIP or a full DNS name: the event reaches
/// a node by its `machine` too, and by the first label of either.
#[test]
fn node_down_event_matches_the_machine_and_the_short_host_name() {
    let c = cluster(
        "nodes = a1, a2, b1, c1\n\
         node.a1.address = rac1-vip.example.com:1521\nnode.a1.machine = rac1\n\
         node.a2.address = rac1.example.com:1522\n\
         node.b1.address = rac2-vip.example.com:1521\nnode.b1.machine = RAC2.example.com\n\
         node.c1.address = rac10.example.com:1521",
    );
    let e = c.apply_event("NODE VERSION=1.0 host=rac1 incarnation=175 status=nodedown reason=member_leave").unwrap();
    assert_eq!(e.changes.len(), 2, "a1 by its machine, a2 by its address's short name: {e:?}");
    assert_eq!(states(&c), [NodeState::Down, NodeState::Down, NodeState::Up, NodeState::Up]);
    c.apply_event("NODE VERSION=1.0 host=rac2 incarnation=9 status=nodedown reason=member_leave").unwrap();
    assert_eq!(states(&c), [NodeState::Down, NodeState::Down, NodeState::Down, NodeState::Up]);
    // A full name never matches a longer or another label, nor a VIP's own name.
    for host in ["rac1.other.com", "rac", "rac1-vip2", "example.com"] {
        let line = format!("NODE VERSION=1.0 host={host} status=nodedown reason=member_leave");
        assert_eq!(c.apply_event(&line).unwrap_err().kind(), ErrorKind::UnknownNode, "{host}");
    }
    assert_eq!(states(&c)[3], NodeState::Up);
}
