//! Strict transaction placement across processes whose views of the cluster
//! disagree for a moment (issue [chaos-fuzz], soak finding): FAN events and
//! operator calls reach each process at its own time, up to a couple of
//! seconds apart, in order (tests/agreement.rs delivers them out of order). In strict mode two processes must never place one gtrid on
//! two nodes; one of them may refuse instead.

mod common;

use std::collections::VecDeque;

use common::{cluster_with_clock, place};
use proptest::prelude::*;
use racaffinity::{Clock, Cluster, ErrorKind, ManualClock, NodeState};

const NAMES: [&str; 4] = ["A", "B", "C", "D"];
const CONFIG: &str = "nodes = A, B, C, D\ntransaction.strict = true\ntransaction.settle = 3s";

fn fan(node: &str, status: &str) -> String {
    format!("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance={node} status={status} reason=FAILURE")
}

/// Places `n` new gtrids in both processes, once both have everything and
/// the settle time passed: each one is placed, and alike.
fn placed_alike(p: &Cluster, q: &Cluster, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let g = format!("{prefix}-{i}");
            let (a, b) = (place(p, &g), place(q, &g));
            assert!(a.is_some() && a == b, "gtrid {g}: {a:?} vs {b:?}");
            a.unwrap()
        })
        .collect()
}

/// Places 200 new gtrids in both processes, where only `p` has seen some
/// nodes fail: each gtrid is placed alike, or refused by `p` alone when `q`
/// put it on one of `seen_failing`. Returns how many `p` refused.
fn refused_by_p_alone(p: &Cluster, q: &Cluster, prefix: &str, seen_failing: &[&str]) -> usize {
    let mut refused = 0;
    for i in 0..200 {
        let g = format!("{prefix}-{i}");
        match (place(p, &g), place(q, &g)) {
            (Some(x), Some(y)) => assert_eq!(x, y, "gtrid {g} split: p placed it on {x}, q on {y}"),
            (None, Some(y)) => {
                assert!(seen_failing.contains(&y.as_str()), "p refuses only gtrids of {seen_failing:?}, not {y}");
                refused += 1;
            }
            (x, y) => panic!("unexpected placements {x:?} {y:?}"),
        }
    }
    refused
}

fn advance(clocks: [&ManualClock; 2], ms: u64) {
    for c in clocks {
        c.advance_ms(ms);
    }
}

fn assert_no_split(p: &Cluster, q: &Cluster, probe: &str) -> Result<(), TestCaseError> {
    for i in 0..24 {
        let g = format!("{probe}-{i}");
        if let (Some(a), Some(b)) = (place(p, &g), place(q, &g)) {
            prop_assert_eq!(&a, &b, "gtrid {} split: one process placed it on {}, the other on {}", g, a, b);
        }
    }
    Ok(())
}

#[test]
fn a_down_event_seen_by_one_process_first_never_splits_a_new_gtrid() {
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(CONFIG, &cp), cluster_with_clock(CONFIG, &cq));
    p.apply_event(&fan("A", "down")).unwrap();
    let refused = refused_by_p_alone(&p, &q, "g", &["A"]);
    assert!(refused > 0, "some gtrids are owned by A");
    // Once every process has seen the event and the settle time passed, the
    // node is placed around, in every process alike, with no refusal.
    q.apply_event(&fan("A", "down")).unwrap();
    advance([&cp, &cq], 3_000);
    assert!(!placed_alike(&p, &q, "h", 200).contains(&"A".to_string()));
}

#[test]
fn an_up_event_seen_by_one_process_first_never_splits_a_new_gtrid() {
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(CONFIG, &cp), cluster_with_clock(CONFIG, &cq));
    for c in [&p, &q] {
        c.apply_event(&fan("B", "down")).unwrap();
    }
    advance([&cp, &cq], 10_000);
    p.apply_event(&fan("B", "up")).unwrap();
    for i in 0..200 {
        let g = format!("g-{i}");
        if let (Some(a), Some(b)) = (place(&p, &g), place(&q, &g)) {
            assert_eq!(a, b, "gtrid {g} split across the processes");
        }
    }
}

#[test]
fn a_gtrid_given_its_node_is_refused_rather_than_moved_when_this_process_sees_it_down() {
    // The transaction manager placed the gtrid on A and passes that on (as
    // WebLogic propagates its affinity context); this process saw A go down.
    // Placing the branch anywhere else would split the transaction.
    let c = common::cluster(CONFIG);
    c.apply_event(&fan("A", "down")).unwrap();
    let a = c.node_by_name("A").unwrap().id();
    let e = c.tx_begin_on(b"tm-placed", Some(a)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StrictAffinity, "{e}");
    assert!(c.tx_info(b"tm-placed").is_none(), "a refused begin registers nothing");
    // Soft mode keeps its fallback: availability over placement.
    let soft = common::cluster("nodes = A, B, C, D");
    soft.apply_event(&fan("A", "down")).unwrap();
    let r = soft.tx_begin_on(b"tm-placed", Some(a)).unwrap();
    assert_ne!(soft.node_name(r.node).unwrap(), "A");
}

#[test]
fn the_settle_time_is_configurable_and_zero_means_the_local_view_at_once() {
    let c = common::cluster("nodes = A, B\ntransaction.strict = true\ntransaction.settle = 0s");
    c.apply_event(&fan("A", "down")).unwrap();
    for i in 0..50 {
        assert_eq!(place(&c, &format!("g-{i}")).as_deref(), Some("B"));
    }
    assert!(c.config().to_text().contains("transaction.settle = 0ms"), "{}", c.config().to_text());
    assert!(common::cluster(CONFIG).config().to_text().contains("transaction.settle = 3s"));
}

/// One input, delivered to `q` up to `lag` ms after `p`: FAN events and
/// versioned operator calls are shared; a plain operator call made in both
/// processes is each process's own (docs/semantics.md, "Agreement").
#[derive(Debug, Clone)]
enum Input {
    Fan(usize, bool),
    Admin(usize, NodeState),
    Versioned(usize, NodeState, u64),
    Advance(u64),
}

fn input() -> impl Strategy<Value = Input> {
    let st = prop_oneof![Just(NodeState::Up), Just(NodeState::Draining), Just(NodeState::Down)];
    prop_oneof![
        3 => (0..NAMES.len(), any::<bool>()).prop_map(|(n, up)| Input::Fan(n, up)),
        1 => (0..NAMES.len(), st.clone()).prop_map(|(n, s)| Input::Admin(n, s)),
        1 => (0..NAMES.len(), st, 1u64..1_000).prop_map(|(n, s, v)| Input::Versioned(n, s, v)),
        3 => (0u64..1_500).prop_map(Input::Advance),
    ]
}

fn apply(c: &Cluster, i: &Input) {
    match i {
        Input::Fan(n, up) => c.apply_event(&fan(NAMES[*n], if *up { "up" } else { "down" })).map(drop).unwrap(),
        Input::Admin(n, s) => c.set_node_state(NAMES[*n], *s).map(drop).unwrap(),
        Input::Versioned(n, s, v) => c.set_node_state_at(NAMES[*n], *s, *v, None).map(drop).unwrap(),
        Input::Advance(_) => unreachable!("time is not delivered"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Whatever the inputs, with each reaching the second process in order
    /// but up to 2.5 s late (less than `transaction.settle`), no gtrid is
    /// ever placed on two nodes; and once both have everything and the
    /// settle time passed, they place alike and refuse nothing while a node
    /// takes new work.
    #[test]
    fn processes_that_see_events_at_different_moments_never_split_a_strict_gtrid(
        steps in prop::collection::vec((input(), 0u64..2_500), 1..50)
    ) {
        let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
        let (p, q) = (cluster_with_clock(CONFIG, &cp), cluster_with_clock(CONFIG, &cq));
        let mut pending: VecDeque<(u64, Input)> = VecDeque::new();
        let mut last_due = 0;
        for (i, (inp, lag)) in steps.iter().enumerate() {
            match inp {
                Input::Advance(ms) => {
                    cp.advance_ms(*ms);
                    cq.advance_ms(*ms);
                }
                other => {
                    apply(&p, other);
                    last_due = last_due.max(cp.now_ms() + lag);
                    pending.push_back((last_due, other.clone()));
                }
            }
            while pending.front().is_some_and(|(due, _)| *due <= cq.now_ms()) {
                apply(&q, &pending.pop_front().unwrap().1);
            }
            assert_no_split(&p, &q, &format!("s{i}"))?;
        }
        for (_, inp) in pending.drain(..) {
            apply(&q, &inp);
        }
        assert_no_split(&p, &q, "drained")?;
        cp.advance_ms(3_000);
        cq.advance_ms(3_000);
        let usable = NAMES.iter().any(|n| p.node_by_name(n).unwrap().state() == NodeState::Up);
        // An operator's plain call is this process's own input: a gtrid its
        // node owns by the shared inputs is refused, never moved.
        let local_calls = NAMES.iter().any(|n| p.node_by_name(n).unwrap().admin_state() != NodeState::Up);
        for i in 0..24 {
            let g = format!("settled-{i}");
            let (a, b) = (place(&p, &g), place(&q, &g));
            prop_assert_eq!(&a, &b);
            // With no node taking new work the panic policy decides, alike.
            prop_assert!(a.is_some() || !usable || local_calls, "settled placement of {} refused", g);
        }
    }
}

#[test]
fn a_gtrid_following_its_data_key_waits_out_the_settle_time_then_is_placed_around_a_down_owner() {
    // The owner of a data key comes from this process's own view, not from a
    // transaction manager: strict mode refuses while the owner's change may
    // not have reached every process, then places the gtrid as every process
    // does (never refusing for the whole outage).
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B, C, D\ntransaction.strict = true\ntransaction.settle = 3s", &clock);
    let key = racaffinity::DataKey::Int(42);
    let owner = c.node_name(c.partition_owner(c.partition_of(key).unwrap()).unwrap()).unwrap();
    c.apply_event(&fan(&owner, "down")).unwrap();
    let req = racaffinity::RouteRequest { key: Some(key), ..Default::default() };
    let e = c.tx_begin_for(b"by-key-1", &req).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StrictAffinity, "{e}");
    clock.advance_ms(3_000);
    let r = c.tx_begin_for(b"by-key-2", &req).expect("placed once the change has settled");
    assert_ne!(c.node_name(r.node).unwrap(), owner);
    // A transaction manager's own choice still never moves.
    let owner_id = c.node_by_name(&owner).unwrap().id();
    assert_eq!(c.tx_begin_on(b"tm-choice", Some(owner_id)).unwrap_err().kind(), ErrorKind::StrictAffinity);
}

#[test]
fn a_node_added_or_removed_in_one_process_first_never_splits_a_new_gtrid() {
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(CONFIG, &cp), cluster_with_clock(CONFIG, &cq));
    advance([&cp, &cq], 10_000);
    p.add_node(racaffinity::NodeSpec::new("E")).unwrap();
    for i in 0..200 {
        let g = format!("add-{i}");
        if let (Some(a), Some(b)) = (place(&p, &g), place(&q, &g)) {
            assert_eq!(a, b, "gtrid {g} split after p added E");
        }
    }
    q.add_node(racaffinity::NodeSpec::new("E")).unwrap();
    advance([&cp, &cq], 3_000);
    p.remove_node("B").unwrap();
    for i in 0..200 {
        let g = format!("remove-{i}");
        if let (Some(a), Some(b)) = (place(&p, &g), place(&q, &g)) {
            assert_eq!(a, b, "gtrid {g} split after p removed B");
        }
    }
    // Settled, both views alike: every gtrid placed, alike.
    q.remove_node("B").unwrap();
    advance([&cp, &cq], 3_000);
    placed_alike(&p, &q, "settled", 50);
}

#[test]
fn a_node_only_this_process_found_failing_never_moves_a_strict_gtrid() {
    // Passive ejection and missed heartbeats are this process's own evidence:
    // no other process ever gets it (soak seed 742558: Java ejected RAC1 during
    // connection resets and, 5 s later, placed the driver's gtrids around it).
    // Strict mode refuses the gtrids such a node owns for as long as only
    // this process sees it failing, however long that is.
    let config = "nodes = A, B, C, D\ntransaction.strict = true\ntransaction.settle = 3s\n\
                  health.eject_after_failures = 2\nheartbeat.misses = 2";
    let (cp, cq) = (ManualClock::new(0), ManualClock::new(0));
    let (p, q) = (cluster_with_clock(config, &cp), cluster_with_clock(config, &cq));
    let (a, b) = (p.node_by_name("A").unwrap().id(), p.node_by_name("B").unwrap().id());
    for _ in 0..2 {
        p.report_outcome(a, false).unwrap();
        p.report_probe(b, false).unwrap();
    }
    assert_eq!(p.node_by_name("A").unwrap().state(), NodeState::Down);
    assert_eq!(p.node_by_name("B").unwrap().state(), NodeState::Down);
    advance([&cp, &cq], 60_000);
    let refused = refused_by_p_alone(&p, &q, "local", &["A", "B"]);
    assert!(refused > 0, "some gtrids are owned by A or B");
    // Shared evidence moves them: once every process got the FAN down events
    // and the settle time passed, both place around A and B, alike.
    for c in [&p, &q] {
        c.apply_event(&fan("A", "down")).unwrap();
        c.apply_event(&fan("B", "down")).unwrap();
    }
    advance([&cp, &cq], 3_000);
    let placed = placed_alike(&p, &q, "confirmed", 200);
    assert!(!placed.iter().any(|n| n == "A" || n == "B"), "{placed:?}");
}

#[test]
fn with_no_settle_time_one_process_places_around_a_node_it_alone_found_failing() {
    // transaction.settle = 0 says this process places its gtrids alone (the
    // transaction manager and every branch in one JVM): its own evidence is
    // all there is, and availability is kept.
    let c = common::cluster(
        "nodes = A, B\ntransaction.strict = true\ntransaction.settle = 0s\n\
                             health.eject_after_failures = 1",
    );
    c.report_outcome(c.node_by_name("A").unwrap().id(), false).unwrap();
    for i in 0..50 {
        assert_eq!(place(&c, &format!("alone-{i}")).as_deref(), Some("B"));
    }
}
