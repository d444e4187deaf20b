//! Load-balancing policies and the panic policy.

mod common;

use std::collections::HashMap;

use common::{cluster, name};
use proptest::prelude::*;
use racaffinity::{ErrorKind, NodeState, Outcome, RouteKind};

fn shares(text: &str, picks: usize) -> HashMap<String, f64> {
    let c = cluster(text);
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..picks {
        let r = c.pick().unwrap();
        *counts.entry(name(&c, r.node)).or_default() += 1;
    }
    counts.into_iter().map(|(k, v)| (k, v as f64 / picks as f64)).collect()
}

#[test]
fn weighted_static_shares_stay_within_one_percent_over_a_million_picks() {
    let s = shares(
        "policy = weighted\nnodes = A, B, C, D\nnode.A.weight = 1\nnode.B.weight = 2\nnode.C.weight = 3\nnode.D.weight = 4",
        1_000_000,
    );
    for (n, w) in [("A", 0.1), ("B", 0.2), ("C", 0.3), ("D", 0.4)] {
        let got = s[n];
        assert!((got - w).abs() < 0.01, "node {n}: share {got:.4}, want {w} ± 0.01");
    }
}

#[test]
fn weighted_follows_rlb_percent_once_advised_and_blocked_gets_nothing() {
    let c = cluster("policy = weighted\nnodes = orcl1, orcl2, orcl3");
    c.apply_event(
        "VERSION=1.0 database=orcl service=svc { {instance=orcl1 percent=70 flag=GOOD aff=TRUE}\
         {instance=orcl2 percent=30 flag=GOOD aff=TRUE}{instance=orcl3 percent=50 flag=BLOCKED aff=TRUE} } timestamp=x",
    )
    .unwrap();
    let mut counts = [0usize; 3];
    let n = 1_000_000;
    for _ in 0..n {
        counts[c.pick().unwrap().node.0 as usize] += 1;
    }
    let share = |i: usize| counts[i] as f64 / n as f64;
    assert!((share(0) - 0.7).abs() < 0.01, "orcl1 {}", share(0));
    assert!((share(1) - 0.3).abs() < 0.01, "orcl2 {}", share(1));
    assert_eq!(counts[2], 0, "BLOCKED instance must get no weighted picks");
}

#[test]
fn random_and_round_robin_spread_evenly() {
    for policy in ["random", "round_robin", "least_outstanding"] {
        let s = shares(&format!("policy = {policy}\nnodes = A, B, C"), 300_000);
        for n in ["A", "B", "C"] {
            assert!((s[n] - 1.0 / 3.0).abs() < 0.01, "{policy}: {n} share {}", s[n]);
        }
    }
}

#[test]
fn round_robin_rotates_strictly() {
    let c = cluster("policy = round_robin\nnodes = A, B, C");
    let seq: Vec<u32> = (0..6).map(|_| c.pick().unwrap().node.0).collect();
    assert_eq!(seq[0..3].iter().collect::<std::collections::HashSet<_>>().len(), 3);
    assert_eq!(seq[0..3], seq[3..6]);
}

#[test]
fn least_outstanding_avoids_the_node_holding_leases() {
    let c = cluster("policy = least_outstanding\nnodes = A, B");
    let busy = c.node_by_name("A").unwrap().id();
    for _ in 0..10 {
        c.begin_lease(busy);
    }
    for _ in 0..1000 {
        assert_eq!(name(&c, c.pick().unwrap().node), "B");
    }
    for _ in 0..10 {
        c.end_lease(busy, Outcome::Ok);
    }
    assert_eq!(c.node_by_name("A").unwrap().in_flight(), 0);
}

#[test]
fn panic_try_all_picks_a_down_node_and_fail_refuses() {
    let c = cluster("nodes = A, B\npanic = try_all");
    c.set_node_state("A", NodeState::Down).unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    assert_eq!(c.pick().unwrap().kind, RouteKind::Panic);

    let c = cluster("nodes = A, B\npanic = fail");
    c.set_node_state("A", NodeState::Down).unwrap();
    c.set_node_state("B", NodeState::Draining).unwrap();
    assert_eq!(c.pick().unwrap_err().kind(), ErrorKind::NoNodeAvailable);
    assert_eq!(c.tx_begin(b"g").unwrap_err().kind(), ErrorKind::NoNodeAvailable);
}

#[test]
fn empty_cluster_is_refused_where_it_is_built() {
    // Every pick of an empty cluster would fail (tests/config.rs has the message).
    let e = racaffinity::Cluster::from_config_text("name = empty").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
}

fn state_strategy() -> impl Strategy<Value = NodeState> {
    prop_oneof![Just(NodeState::Up), Just(NodeState::Draining), Just(NodeState::Down)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No pick ever returns a Down node, unless every node is unavailable and
    /// the panic policy is try_all.
    #[test]
    fn no_pick_returns_a_down_node(
        states in prop::collection::vec(state_strategy(), 1..9),
        policy in prop_oneof![Just("random"), Just("round_robin"), Just("weighted"), Just("least_outstanding")],
        panic in prop_oneof![Just("try_all"), Just("fail")],
        picks in 1usize..50,
    ) {
        let names: Vec<String> = (0..states.len()).map(|i| format!("N{i}")).collect();
        let c = cluster(&format!("policy = {policy}\npanic = {panic}\nnodes = {}", names.join(",")));
        for (n, s) in names.iter().zip(&states) {
            c.set_node_state(n, *s).unwrap();
        }
        let any_up = states.contains(&NodeState::Up);
        for _ in 0..picks {
            match c.pick() {
                Ok(r) => {
                    let st = c.node(r.node).unwrap().state();
                    if any_up {
                        prop_assert_eq!(st, NodeState::Up);
                        prop_assert_eq!(r.kind, RouteKind::Balanced);
                    } else {
                        prop_assert_eq!(panic, "try_all");
                        prop_assert_eq!(r.kind, RouteKind::Panic);
                    }
                }
                Err(e) => {
                    prop_assert!(!any_up && panic == "fail", "unexpected error {e}");
                    prop_assert_eq!(e.kind(), ErrorKind::NoNodeAvailable);
                }
            }
        }
    }
}

/// Balanced picks read the live nodes from a list of 16 slots and fall back
/// to the topology snapshot past 16 live nodes or past the id table (256
/// ids). While membership keeps crossing both bounds (20 nodes down to 3 and
/// back, each new node a new id), no pick fails and none returns a node
/// whose removal had returned before the pick began.
#[test]
fn balanced_picks_never_see_a_removed_node_while_membership_crosses_the_live_list() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;

    const CYCLES: usize = 16;
    const MOST: usize = 20;
    const FEWEST: usize = 3;
    for policy in ["random", "round_robin", "weighted", "least_outstanding"] {
        let names: Vec<String> = (0..MOST).map(|i| format!("N{i}")).collect();
        let c = Arc::new(cluster(&format!("policy = {policy}\nnodes = {}", names.join(", "))));
        let ids = MOST + CYCLES * (MOST - FEWEST);
        // The count of removals done when the node of an id was removed.
        let removed_at: Arc<Vec<AtomicU64>> = Arc::new((0..ids).map(|_| AtomicU64::new(u64::MAX)).collect());
        let done = Arc::new(AtomicU64::new(0));
        let picks = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let pickers: Vec<_> = (0..2)
            .map(|_| {
                let (c, removed_at, done, picks, stop) =
                    (c.clone(), removed_at.clone(), done.clone(), picks.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        let before = done.load(SeqCst);
                        let r = c.pick_balanced().unwrap_or_else(|e| panic!("{policy}: a pick failed: {e}"));
                        let at = removed_at[r.node.0 as usize].load(SeqCst);
                        assert!(
                            at >= before,
                            "{policy}: picked node {} removed at {at}, before the pick began at {before}",
                            r.node.0
                        );
                        picks.fetch_add(1, SeqCst);
                    }
                })
            })
            .collect();
        // Every membership of the run is picked from many times.
        let picked_from = || {
            let from = picks.load(SeqCst);
            while picks.load(SeqCst) < from + 50 {
                assert!(!pickers.iter().any(|p| p.is_finished()), "{policy}: a picker stopped");
                std::thread::yield_now();
            }
        };
        let mut live: Vec<String> = names.clone();
        for cycle in 0..CYCLES {
            while live.len() > FEWEST {
                let id = c.remove_node(&live.remove(0)).unwrap();
                removed_at[id.0 as usize].store(done.load(SeqCst), SeqCst);
                done.fetch_add(1, SeqCst);
                picked_from();
            }
            for i in 0..MOST - FEWEST {
                let name = format!("C{cycle}-{i}");
                c.add_node(racaffinity::NodeSpec::new(name.clone())).unwrap();
                live.push(name);
                picked_from();
            }
        }
        stop.store(true, SeqCst);
        for p in pickers {
            p.join().unwrap();
        }
        let top = c.node_ids().iter().map(|n| n.0).max().unwrap();
        assert!(top as usize >= 256, "{policy}: ids reached {top}, short of the id table's end");
    }
}
