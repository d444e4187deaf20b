//! Planned drains next to this process's own evidence (issue [core-review-3]
//! items 2 and 3): a drain's deadline survives heartbeats and ejections, and
//! a drain never lifts a Down that heartbeats or an ejection imposed.

mod common;

use common::cluster_with_clock;
use racaffinity::{DownCause, ManualClock, NodeState};

const CONFIG: &str = "nodes = A, B\nheartbeat.misses = 1\nhealth.eject_after_failures = 1";

fn drain(node: &str, timeout_s: Option<u32>) -> String {
    let t = timeout_s.map_or(String::new(), |t| format!(" drain_timeout={t}"));
    format!("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={node} status=down reason=USER{t}")
}

#[test]
fn a_drains_deadline_survives_missed_heartbeats_that_come_and_go() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let a = c.node_by_name("A").unwrap();
    c.apply_event(&drain("A", Some(30))).unwrap();
    clock.advance_ms(5_000);
    c.report_probe(a.id(), false).unwrap();
    assert_eq!(a.state(), NodeState::Down);
    c.report_probe(a.id(), true).unwrap();
    assert_eq!(a.state(), NodeState::Draining, "back to the drain, not to Up");
    clock.advance_ms(55_000);
    assert_eq!(a.state(), NodeState::Down, "60 s into a 30 s drain the node is Down");
    assert_eq!(a.drain_deadline_ms(), None);
}

#[test]
fn a_context_pin_leaves_a_drained_node_at_the_deadline_after_an_ejection_was_lifted() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let ctx = c.new_context_key();
    let node = c.pin_context(ctx).unwrap().node;
    let name = c.node_name(node).unwrap();
    c.apply_event(&drain(&name, Some(10))).unwrap();
    assert_eq!(c.pick_in(ctx).unwrap().node, node, "existing work continues during the drain");
    c.report_outcome(node, false).unwrap();
    assert_eq!(c.node(node).unwrap().down_cause(), DownCause::Ejected);
    c.report_probe(node, true).unwrap();
    assert_eq!(c.node(node).unwrap().state(), NodeState::Draining);
    clock.advance_ms(20_000);
    assert_ne!(c.pick_in(ctx).unwrap().node, node, "20 s into a 10 s drain the pin has moved");
}

#[test]
fn a_planned_drain_never_lifts_a_down_this_process_saw() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let ctx = c.new_context_key();
    let node = c.pin_context(ctx).unwrap().node;
    let name = c.node_name(node).unwrap();
    c.report_probe(node, false).unwrap();
    assert_eq!(c.node(node).unwrap().state(), NodeState::Down);
    c.apply_event(&drain(&name, None)).unwrap();
    assert_eq!(c.node(node).unwrap().state(), NodeState::Down, "a drain is no sign of life");
    assert_ne!(c.pick_in(ctx).unwrap().node, node, "the pin is not served on the dead node");
    // Only a FAN up or an answering probe lifts it; the probe leaves the drain.
    c.report_probe(node, true).unwrap();
    assert_eq!(c.node(node).unwrap().state(), NodeState::Draining);
    // The same for an ejection.
    let other = c.node_by_name(if name == "A" { "B" } else { "A" }).unwrap();
    c.report_outcome(other.id(), false).unwrap();
    c.apply_event(&drain(other.name(), Some(30))).unwrap();
    assert_eq!(other.state(), NodeState::Down);
}

#[test]
fn a_drain_without_a_timeout_after_one_with_it_is_the_latest_word() {
    // Decided (docs/semantics.md): the later announcement replaces the
    // earlier one, deadline included; with versions, the later version.
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let a = c.node_by_name("A").unwrap();
    c.apply_event(&drain("A", Some(30))).unwrap();
    assert!(a.drain_deadline_ms().is_some());
    c.apply_event(&drain("A", None)).unwrap();
    assert_eq!(a.drain_deadline_ms(), None);
    clock.advance_ms(60_000);
    assert_eq!(a.state(), NodeState::Draining);
    // At one timestamp the longer drain wins, in any order.
    let at = |t: Option<u32>| format!("{} timestamp=2026-12-04 10:00:00", drain("B", t));
    let b = c.node_by_name("B").unwrap();
    c.apply_event(&at(Some(30))).unwrap();
    c.apply_event(&at(None)).unwrap();
    assert!(b.drain_deadline_ms().is_some(), "same second: the drain with the deadline wins");
}

/// A Down that ends a planned drain says so (`Drained`), apart from a Down a
/// failure brings during the drain (`Event`): the pools abort connections in
/// use for the second only, and every binding reads the difference here, not
/// from which of its own calls applied the event (a FAN failure delivered
/// through the topology feed or JMX counted as the drain's end before).
#[test]
fn a_drains_end_and_a_failure_during_a_drain_are_told_apart() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let (a, b) = (c.node_by_name("A").unwrap(), c.node_by_name("B").unwrap());
    c.apply_event(&drain("A", Some(30))).unwrap();
    c.apply_event(&drain("B", Some(30))).unwrap();
    assert_eq!(a.down_cause(), DownCause::Event, "draining, by an event");
    clock.advance_ms(10_000);
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=B host=hb status=down reason=FAILURE")
        .unwrap();
    assert_eq!((b.state(), b.down_cause()), (NodeState::Down, DownCause::Event), "a failure during the drain");
    clock.advance_ms(20_000);
    assert_eq!((a.state(), a.down_cause()), (NodeState::Down, DownCause::Drained), "the drain's end");
    assert_eq!(b.down_cause(), DownCause::Event, "still the failure");
    // A later input about A's state is the latest word again.
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=A host=ha status=down reason=FAILURE")
        .unwrap();
    assert_eq!(a.down_cause(), DownCause::Event);
    assert_eq!(DownCause::Drained.as_str(), "drained");
}

/// Whether a Down lets connections in use finish is the core's answer
/// (`Node::down_is_planned`), not a binding's reading of the states it
/// happened to see: a pool polling every few seconds may never see the node
/// Draining at all (the Python pools aborted connections in use of a drain
/// that ended between two upkeep rounds).
#[test]
fn only_a_down_that_ends_a_drain_is_planned() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let a = c.node_by_name("A").unwrap();
    let b = c.node_by_name("B").unwrap();
    assert!(!a.down_is_planned(), "up");
    c.apply_event(&drain("A", Some(10))).unwrap();
    assert!(!a.down_is_planned(), "draining");
    clock.advance_ms(10_000);
    assert!(a.down_is_planned(), "the deadline passed: {:?}", a.down_cause());
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=A host=h status=down reason=FAILURE")
        .unwrap();
    assert!(!a.down_is_planned(), "a failure after the drain's end: {:?}", a.down_cause());
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=A host=h status=up").unwrap();
    c.apply_event(&drain("A", Some(10))).unwrap();
    clock.advance_ms(10_000);
    assert!(a.down_is_planned(), "drained again");
    c.set_node_state("A", NodeState::Down).unwrap();
    assert!(a.down_is_planned(), "the operator's Down after the drain's end");
    c.set_node_state("A", NodeState::Up).unwrap();
    c.apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=A status=up").unwrap();
    assert_eq!(a.state(), NodeState::Up);
    assert!(!a.down_is_planned(), "up again");

    // The operator's Down while the node drains ends the drain; of a node
    // taking work it is a failure.
    c.set_node_state("B", NodeState::Draining).unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    assert!(b.down_is_planned());
    c.set_node_state("B", NodeState::Up).unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    assert!(!b.down_is_planned(), "the operator's Down of a node taking work");
    c.set_node_state("B", NodeState::Up).unwrap();

    // A failure during a drain, however it comes: not planned.
    c.apply_event(&drain("B", Some(30))).unwrap();
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=B host=h status=down reason=FAILURE")
        .unwrap();
    assert_eq!(b.state(), NodeState::Down);
    assert!(!b.down_is_planned(), "a FAN failure during the drain");
    c.apply_event("INSTANCE VERSION=1.0 service=orcl database=orcl instance=B host=h status=up").unwrap();
    c.apply_event(&drain("B", Some(30))).unwrap();
    assert_eq!(b.state(), NodeState::Draining);
    c.report_probe(b.id(), false).unwrap();
    assert!(!b.down_is_planned(), "missed heartbeats during the drain: {:?}", b.down_cause());
}

#[test]
fn a_node_removed_while_it_drains_lets_its_work_finish() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(CONFIG, &clock);
    let a = c.node_by_name("A").unwrap();
    c.apply_event(&drain("A", Some(30))).unwrap();
    c.remove_node("A").unwrap();
    assert!(a.down_is_planned(), "removed while draining");
    let b = c.node_by_name("B").unwrap();
    c.remove_node("B").unwrap();
    assert!(!b.down_is_planned(), "removed while taking work");
}
