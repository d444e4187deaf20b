//! Seed 002 (UCP) parity in the core (issue [ucp-parity]): planned drains with
//! a timeout, the partition map replaced as a whole, and affinity contexts
//! that obey their policy's strict switch.

mod common;

use common::{cluster, cluster_with_clock};
use racaffinity::event::FanEvent;
use racaffinity::{DataKey, DownCause, ErrorKind, ManualClock, NodeState, RouteKind, Scope};

const DRAIN: &str = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=B status=down reason=USER \
                     drain_timeout=30";

#[test]
fn fan_drain_timeout_is_parsed() {
    assert_eq!(FanEvent::parse(DRAIN).unwrap().drain_timeout_s, Some(30));
    let e = FanEvent::parse(&DRAIN.replace("=30", "=soon")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::EventParse);
}

#[test]
fn a_planned_drain_keeps_existing_work_until_its_timeout_then_moves_it() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B, C\npolicy = round_robin", &clock);
    let b = c.node_by_name("B").unwrap().id();
    let ctx = (0..3).map(|_| c.new_context_key()).find(|&k| c.pin_context(k).unwrap().node == b).unwrap();
    c.apply_event(DRAIN).unwrap();
    assert_eq!(c.node(b).unwrap().state(), NodeState::Draining);
    for _ in 0..20 {
        assert_ne!(c.pick_balanced().unwrap().node, b, "no new work on a draining node");
    }
    clock.advance_ms(29_999);
    assert_eq!(c.pick_in(ctx).unwrap().node, b, "existing pins run on during the drain");
    clock.advance_ms(1);
    let moved = c.pick_in(ctx).unwrap();
    assert_ne!(moved.node, b, "the pin moves once the drain timeout ends");
    assert_eq!(moved.kind, RouteKind::Repinned);
    let node = c.node(b).unwrap();
    assert_eq!((node.state(), node.down_cause()), (NodeState::Down, DownCause::Drained));
    // Strict scopes refuse after the timeout instead of moving.
    let strict = cluster_with_clock("nodes = A, B\nthread.strict = true\npolicy = round_robin", &clock);
    let k = (0..2).map(|_| strict.new_context_key()).find(|&k| strict.pin_context(k).unwrap().node == b).unwrap();
    strict.apply_event(DRAIN).unwrap();
    clock.advance_ms(30_000);
    assert_eq!(strict.pick_in(k).unwrap_err().kind(), ErrorKind::StrictAffinity);
    // FAN up brings it back for new work.
    c.apply_event(&DRAIN.replace("status=down reason=USER drain_timeout=30", "status=up")).unwrap();
    assert_eq!(c.node(b).unwrap().state(), NodeState::Up);
}

#[test]
fn a_prepared_branch_never_moves_when_a_drain_times_out() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B, C", &clock);
    let b = c.node_by_name("B").unwrap().id();
    c.tx_begin_on(b"g", Some(b)).unwrap();
    c.tx_prepared(b"g").unwrap();
    c.apply_event(DRAIN).unwrap();
    clock.advance_ms(31_000);
    assert_eq!(c.tx_begin(b"g").unwrap_err().kind(), ErrorKind::PreparedNodeUnavailable);
    assert_eq!(c.tx_route(b"g").unwrap().node, b);
}

#[test]
fn the_partition_map_is_replaced_as_a_whole_with_a_new_epoch() {
    let c = cluster("nodes = A, B, C\ndata.partitions = 4");
    assert_eq!(c.partition_map_epoch(), 0);
    let epoch = c.replace_partition_map(&[(0, "A"), (1, "B"), (2, "C"), (3, "A")], "loader:table").unwrap();
    assert_eq!(epoch, 1);
    for p in 0..4u32 {
        let want = ["A", "B", "C", "A"][p as usize];
        assert_eq!(c.node_name(c.partition_owner(p).unwrap()).unwrap(), want);
    }
    // A bad entry anywhere changes nothing.
    for bad in [&[(0u32, "A"), (9, "B")][..], &[(0, "A"), (1, "NOPE")][..], &[(0, "A"), (0, "B")][..]] {
        assert!(c.replace_partition_map(bad, "loader:table").is_err());
        assert_eq!(c.partition_map_epoch(), 1);
        assert_eq!(c.node_name(c.partition_owner(1).unwrap()).unwrap(), "B");
    }
    let m = c.metrics();
    assert_eq!((m.partition_map_epoch, m.partition_map_source.as_str()), (1, "loader:table"));
    assert!(m.to_json().contains(r#""partition_map":{"epoch":1,"source":"loader:table""#), "{}", m.to_json());
    // Partitions the new map leaves out fall back to placement.
    c.replace_partition_map(&[(0, "C")], "loader:table").unwrap();
    let key = (0..1000i64).find(|&k| c.partition_of(DataKey::Int(k)).unwrap() == 0).unwrap();
    assert_eq!(c.node_name(c.route_key_i64(key).unwrap().node).unwrap(), "C");
}

#[test]
fn a_context_pinned_for_a_scope_obeys_that_scopes_strict_switch() {
    let c = cluster("nodes = A, B\ntransaction.strict = true\npolicy = round_robin");
    let key = c.new_context_key();
    let placed = c.pin_context_for(key, Scope::Transaction).unwrap();
    c.set_node_state(&c.node_name(placed.node).unwrap(), NodeState::Down).unwrap();
    assert_eq!(c.pick_in(key).unwrap_err().kind(), ErrorKind::StrictAffinity);
    // A thread-scope context on the same cluster re-pins (thread scope is soft).
    let other = c.new_context_key();
    assert_ne!(c.pin_context(other).unwrap().node, placed.node);
}

#[test]
fn a_session_context_is_released_by_the_instance_withdrawing_affinity() {
    let c = cluster("nodes = A, B\npolicy = round_robin");
    let key = c.new_context_key();
    let placed = c.pin_context_for(key, Scope::Session).unwrap();
    let name = c.node_name(placed.node).unwrap();
    let txk = c.new_context_key();
    let tx_placed = (0..4)
        .map(|_| {
            let k = c.new_context_key();
            (k, c.pin_context_for(k, Scope::Transaction).unwrap())
        })
        .find(|(_, r)| r.node == placed.node)
        .unwrap();
    let _ = txk;
    c.apply_event(&format!(
        "VERSION=1.0 database=orcl service=svc {{ {{instance={name} percent=50 flag=GOOD aff=FALSE}} }}"
    ))
    .unwrap();
    assert_eq!(c.context_pinned_node(key), None, "aff=FALSE released the web-session context");
    assert_eq!(c.context_pinned_node(tx_placed.0), Some(placed.node), "a transaction context stays");
}

#[test]
fn a_node_read_after_its_drain_timeout_says_down_without_any_route_first() {
    // Operators, metrics and health checks read the state with no routing in
    // between; they must not see Draining after the timeout ended.
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B, C", &clock);
    let b = c.node_by_name("B").unwrap().id();
    c.apply_event(DRAIN).unwrap();
    clock.advance_ms(30_000);
    let node = c.node(b).unwrap();
    assert_eq!((node.state(), node.down_cause()), (NodeState::Down, DownCause::Drained));
    let m = c.metrics();
    let nb = m.nodes.iter().find(|n| n.name == "B").unwrap();
    assert_eq!(nb.state, NodeState::Down, "metrics after the drain timeout");
}

#[test]
fn a_thread_pin_on_a_draining_node_moves_when_the_drain_times_out_with_no_other_change() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B, C\npolicy = round_robin", &clock);
    let b = c.node_by_name("B").unwrap().id();
    // Pin this thread to B (round robin reaches it within three tries).
    let pin = loop {
        let pin = c.pin_thread().unwrap();
        if pin.node() == b {
            break pin;
        }
        drop(pin);
    };
    c.apply_event(DRAIN).unwrap();
    // Picks during the drain run on B; each could be remembered for the next.
    for _ in 0..3 {
        assert_eq!(c.pick().unwrap().node, b, "existing pins run on during the drain");
    }
    // Only the clock moves: no event, no epoch change.
    clock.advance_ms(30_000);
    let moved = c.pick().unwrap();
    assert_ne!(moved.node, b, "the pin moves once the drain timeout ends");
    assert_eq!(moved.kind, RouteKind::Repinned);
    drop(pin);
}

#[test]
fn a_session_context_moved_off_a_down_node_stays_pinned_on_its_new_node() {
    let c = cluster("nodes = A, B\npolicy = round_robin");
    let advise = |aff: &str| {
        c.apply_event(&format!(
            "VERSION=1.0 database=orcl service=svc {{ {{instance=A percent=50 flag=GOOD aff=TRUE}} \
             {{instance=B percent=50 flag=GOOD aff={aff}}} }}"
        ))
        .unwrap();
    };
    // B withdrew affinity once and gave it back: its sessions' epoch moved on.
    advise("FALSE");
    advise("TRUE");
    let key = c.new_context_key();
    let a = c.node_by_name("A").unwrap().id();
    let b = c.node_by_name("B").unwrap().id();
    assert_eq!(c.pin_context_for(key, Scope::Session).unwrap().node, a);
    c.set_node_state("A", NodeState::Down).unwrap();
    let moved = c.pick_in(key).unwrap();
    assert_eq!((moved.node, moved.kind), (b, RouteKind::Repinned));
    // Nothing withdrew affinity since the move: the context is still pinned.
    assert_eq!(c.context_pinned_node(key), Some(b), "the moved session context was released");
    assert!(c.unpin_context(key), "the pin's level was lost");
}

#[test]
fn a_session_context_on_a_removed_node_is_refused_or_moved_not_released() {
    // A removal breaks affinities as a Down node does; it is no withdrawal
    // of affinity (aff=FALSE), which alone releases a session context.
    let strict = cluster("nodes = A, B, C\nsession.strict = true\npolicy = round_robin");
    let key = strict.new_context_key();
    let placed = strict.pin_context_for(key, Scope::Session).unwrap();
    strict.remove_node(&strict.node_name(placed.node).unwrap()).unwrap();
    assert_eq!(
        strict.pick_in(key).map(|r| r.node).map_err(|e| e.kind()),
        Err(ErrorKind::StrictAffinity),
        "the strict session context moved off its removed node"
    );
    let soft = cluster("nodes = A, B, C\npolicy = round_robin");
    let key = soft.new_context_key();
    let placed = soft.pin_context_for(key, Scope::Session).unwrap();
    soft.remove_node(&soft.node_name(placed.node).unwrap()).unwrap();
    let moved = soft.pick_in(key).unwrap();
    assert_eq!(moved.kind, RouteKind::Repinned, "the soft session context was released, not moved");
    assert_eq!(soft.context_pinned_node(key), Some(moved.node));
    assert!(soft.unpin_context(key));
}
