//! Thread and context pins.

mod common;

use std::sync::{Arc, Barrier};

use common::{assert_strict_refusal, cluster};
use proptest::prelude::*;
use racaffinity::{Cluster, NodeState, RouteKind, Scope, ThreadPin};

#[test]
fn pinned_picks_are_stable_until_the_guard_drops() {
    let c = cluster("nodes = A, B, C\npolicy = round_robin");
    let pin = c.pin_thread().unwrap();
    for _ in 0..100 {
        let r = c.pick().unwrap();
        assert_eq!(r.node, pin.node());
        assert_eq!(r.kind, RouteKind::Affinity);
    }
    drop(pin);
    assert_eq!(c.thread_pinned_node(), None);
    let spread: std::collections::HashSet<_> = (0..6).map(|_| c.pick().unwrap().node).collect();
    assert_eq!(spread.len(), 3, "after release, round robin resumes");
}

#[test]
fn nested_pins_share_one_node_and_release_at_the_outermost() {
    let c = cluster("nodes = A, B, C");
    let outer = c.pin_thread().unwrap();
    let inner = c.pin_thread().unwrap();
    assert_eq!(inner.node(), outer.node());
    drop(inner);
    assert_eq!(c.thread_pinned_node(), Some(outer.node()));
    drop(outer);
    assert_eq!(c.thread_pinned_node(), None);
}

#[test]
fn unpin_thread_releases_every_level() {
    let c = cluster("nodes = A, B");
    let _a = c.pin_thread().unwrap();
    let _b = c.pin_thread().unwrap();
    assert!(c.unpin_thread());
    assert_eq!(c.thread_pinned_node(), None);
    assert!(!c.unpin_thread());
}

#[test]
fn auto_pin_pins_on_first_pick_like_the_seeds_connection_factory() {
    let c = cluster("nodes = A, B, C\nthread.auto_pin = true\npolicy = round_robin");
    let first = c.pick().unwrap();
    assert_eq!(first.kind, RouteKind::Placed);
    for _ in 0..10 {
        assert_eq!(c.pick().unwrap().node, first.node);
    }
    assert!(c.unpin_thread());
}

/// Pins this thread and sets the pinned node to `state`: the pin and the node's name.
fn pinned_node_set_to(c: &Cluster, state: NodeState) -> (ThreadPin<'_>, String) {
    let pin = c.pin_thread().unwrap();
    let node = c.node_name(pin.node()).unwrap();
    c.set_node_state(&node, state).unwrap();
    (pin, node)
}

#[test]
fn soft_pin_repins_when_its_node_goes_down_and_strict_refuses() {
    let c = cluster("nodes = A, B, C");
    let (pin, _) = pinned_node_set_to(&c, NodeState::Down);
    let r = c.pick().unwrap();
    assert_eq!(r.kind, RouteKind::Repinned);
    assert_ne!(r.node, pin.node());
    assert_eq!(c.pick().unwrap().node, r.node, "the new pin sticks");
    drop(pin);

    let c = cluster("nodes = A, B, C\nthread.strict = true");
    let (_pin, old) = pinned_node_set_to(&c, NodeState::Down);
    assert_strict_refusal(c.pick(), "thread", &old);
    assert_eq!(c.metrics().scopes[Scope::Thread as usize].strict_refusals, 1);
}

#[test]
fn draining_keeps_existing_pins_but_takes_no_new_ones() {
    let c = cluster("nodes = A, B");
    let (pin, _) = pinned_node_set_to(&c, NodeState::Draining);
    assert_eq!(c.pick().unwrap().node, pin.node());
    let key = c.new_context_key();
    for _ in 0..50 {
        let r = c.pin_context(key).unwrap();
        assert_ne!(r.node, pin.node(), "a draining node takes no new pins");
        c.release_context(key);
    }
}

#[test]
fn pins_never_leak_between_threads() {
    let c = Arc::new(cluster("nodes = A, B, C, D\npolicy = random"));
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                assert_eq!(c.thread_pinned_node(), None);
                barrier.wait();
                let mut nodes = Vec::new();
                for _ in 0..200 {
                    let pin = c.pin_thread().unwrap();
                    for _ in 0..20 {
                        assert_eq!(c.pick().unwrap().node, pin.node());
                    }
                    nodes.push(pin.node());
                }
                assert_eq!(c.thread_pinned_node(), None);
                nodes
            })
        })
        .collect();
    let mut distinct = std::collections::HashSet::new();
    for h in handles {
        distinct.extend(h.join().unwrap());
    }
    assert!(distinct.len() > 1, "pins were spread over nodes");
    assert_eq!(c.metrics().scopes[Scope::Thread as usize].live, 0);
}

#[test]
fn context_pins_are_independent_of_os_threads() {
    let c = Arc::new(cluster("nodes = A, B, C\npolicy = round_robin"));
    let k1 = c.new_context_key();
    let k2 = c.new_context_key();
    let n1 = c.pin_context(k1).unwrap().node;
    let n2 = c.pin_context(k2).unwrap().node;
    assert_ne!(n1, n2);
    // Another OS thread sees the same context pin: what a virtual thread or an
    // asyncio task that hops threads needs.
    let c2 = c.clone();
    let seen = std::thread::spawn(move || c2.pick_in(k1).unwrap().node).join().unwrap();
    assert_eq!(seen, n1);
    assert!(c.unpin_context(k1));
    assert_eq!(c.context_pinned_node(k1), None);
    assert_eq!(c.pick_in(k1).unwrap().kind, RouteKind::Balanced);
    let k3 = c.new_context_key();
    {
        let g = c.pin_context_guard(k3).unwrap();
        assert_eq!(c.pick_in(k3).unwrap().node, g.node());
    }
    assert_eq!(c.context_pinned_node(k3), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever other state changes happen, a pin's picks stay on one node
    /// while that node is up, and are never on a Down node while any is up.
    #[test]
    fn pinned_picks_stay_put_while_the_node_is_usable(ops in prop::collection::vec((0usize..4, 0u8..3), 0..40)) {
        let c = cluster("nodes = A, B, C, D");
        let names = ["A", "B", "C", "D"];
        let key = c.new_context_key();
        let mut pinned = c.pin_context(key).unwrap().node;
        for (i, s) in ops {
            let st = [NodeState::Up, NodeState::Draining, NodeState::Down][s as usize];
            c.set_node_state(names[i], st).unwrap();
            let pinned_state = c.node(pinned).unwrap().state();
            let any_up = names.iter().any(|n| c.node_by_name(n).unwrap().state() == NodeState::Up);
            let r = c.pick_in(key).unwrap();
            if pinned_state != NodeState::Down {
                prop_assert_eq!(r.node, pinned);
                prop_assert_eq!(r.kind, RouteKind::Affinity);
            } else if any_up {
                prop_assert_eq!(r.kind, RouteKind::Repinned);
                prop_assert_eq!(c.node(r.node).unwrap().state(), NodeState::Up);
                pinned = r.node;
            } else {
                prop_assert_eq!(r.kind, RouteKind::Panic);
                pinned = r.node;
            }
        }
    }
}

#[test]
fn a_thread_that_exits_pinned_does_not_leave_a_live_pin_behind() {
    let c = Arc::new(cluster("nodes = A, B"));
    let c2 = c.clone();
    std::thread::spawn(move || {
        std::mem::forget(c2.pin_thread().unwrap());
        assert_eq!(c2.metrics().scopes[Scope::Thread as usize].live, 1);
    })
    .join()
    .unwrap();
    assert_eq!(c.metrics().scopes[Scope::Thread as usize].live, 0);
}

#[test]
fn a_request_routes_by_transaction_then_key_then_session_then_pin() {
    use racaffinity::{DataKey, RouteRequest};
    let c = cluster("nodes = A, B, C, D, E, F, G, H\npolicy = round_robin");
    let ctx = c.new_context_key();
    let pinned = c.pin_context(ctx).unwrap().node;
    let tx = c.tx_begin(b"g-1").unwrap().node;
    let key = c.route_key(b"customer-9").unwrap().node;
    let session = c.session_route(b"S-1").unwrap().node;
    let full = RouteRequest {
        transaction: Some(b"g-1"),
        key: Some(DataKey::Bytes(b"customer-9")),
        session: Some(b"S-1"),
        token: None,
        context: Some(ctx),
    };
    assert_eq!(c.route(&full).unwrap().node, tx);
    assert_eq!(c.route(&RouteRequest { transaction: None, ..full }).unwrap().node, key);
    assert_eq!(c.route(&RouteRequest { transaction: None, key: None, ..full }).unwrap().node, session);
    let pin_only = RouteRequest { context: Some(ctx), ..Default::default() };
    assert_eq!(c.route(&pin_only).unwrap().node, pinned);
    // Without a context: the calling thread's pin.
    let t = c.pin_thread().unwrap();
    assert_eq!(c.route(&RouteRequest::default()).unwrap().node, t.node());
    drop(t);
    assert_eq!(c.route(&RouteRequest::default()).unwrap().kind, RouteKind::Balanced);
    assert_eq!(
        c.route(&RouteRequest { transaction: Some(b"unknown"), ..Default::default() }).unwrap_err().kind(),
        racaffinity::ErrorKind::UnknownTransaction
    );
}

/// Affinity hits and picks of `node` and the thread scope's hits, as metrics report them.
fn thread_hits(c: &Cluster, node: &str) -> (u64, u64, u64) {
    let m = c.metrics();
    let n = m.nodes.iter().find(|n| n.name == node).expect("a live node");
    let s = m.scopes.iter().find(|s| s.scope == Scope::Thread).expect("the thread scope");
    (n.affinity_hits, n.picks, s.hits)
}

#[test]
fn a_pinned_threads_hits_are_exact_in_metrics_while_it_runs_repins_and_after_it_exits() {
    let c = Arc::new(cluster("nodes = A, B, C\npolicy = round_robin"));
    let (to_main, from_thread) = std::sync::mpsc::channel();
    let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
    let t = {
        let c = c.clone();
        std::thread::spawn(move || {
            let pin = c.pin_thread().unwrap();
            let first = c.node_name(pin.node()).unwrap();
            for _ in 0..1000 {
                assert_eq!(c.pick().unwrap().kind, RouteKind::Affinity);
            }
            to_main.send(first.clone()).unwrap();
            from_main.recv().unwrap();
            // The lead marks the first node down: the next pick re-pins
            // (soft), and later hits belong to the new node.
            let moved = c.pick().unwrap();
            assert_eq!(moved.kind, RouteKind::Repinned);
            for _ in 0..500 {
                assert_eq!(c.pick().unwrap().kind, RouteKind::Affinity);
            }
            to_main.send(c.node_name(moved.node).unwrap()).unwrap();
            from_main.recv().unwrap();
            // Exits pinned, with the guard forgotten: the thread's
            // teardown ends the pin, and its hits must stay counted.
            std::mem::forget(pin);
        })
    };
    let first = from_thread.recv().unwrap();
    // Read while the thread lives and holds its pin.
    assert_eq!(thread_hits(&c, &first), (1000, 1001, 1000));
    c.set_node_state(&first, NodeState::Down).unwrap();
    to_thread.send(()).unwrap();
    let second = from_thread.recv().unwrap();
    assert_ne!(second, first);
    assert_eq!(thread_hits(&c, &first).0, 1000, "hits before the re-pin stay on the first node");
    assert_eq!(thread_hits(&c, &second).0, 500);
    assert_eq!(thread_hits(&c, &second).2, 1500);
    to_thread.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(thread_hits(&c, &first).0, 1000);
    assert_eq!(thread_hits(&c, &second), (500, 501, 1500), "the thread's exit keeps every hit");
}

#[test]
fn thread_scope_hits_never_go_backwards_or_overcount_while_pins_come_and_go() {
    const THREADS: usize = 4;
    const ROUNDS: u64 = 200;
    const PICKS: u64 = 50;
    let c = Arc::new(cluster("nodes = A, B, C"));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (c, done) = (c.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            let mut reads = 0u64;
            while !done.load(std::sync::atomic::Ordering::Acquire) || reads == 0 {
                let m = c.metrics();
                let hits = m.scopes.iter().find(|s| s.scope == Scope::Thread).unwrap().hits;
                assert!(hits >= last, "thread hits went back from {last} to {hits}");
                assert!(hits <= THREADS as u64 * ROUNDS * PICKS, "{hits} hits counted, more than were made");
                last = hits;
                reads += 1;
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let _pin = c.pin_thread().unwrap();
                    for _ in 0..PICKS {
                        c.pick().unwrap();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    reader.join().unwrap();
    let m = c.metrics();
    let hits = m.scopes.iter().find(|s| s.scope == Scope::Thread).unwrap().hits;
    assert_eq!(hits, THREADS as u64 * ROUNDS * PICKS);
    assert_eq!(m.nodes.iter().map(|n| n.affinity_hits).sum::<u64>(), hits, "every thread hit is some node's");
}

#[test]
fn a_repinned_thread_stays_on_its_new_node_when_the_old_one_returns_at_once() {
    let c = cluster("nodes = A, B, C");
    let pin = c.pin_thread().unwrap();
    let old = c.node_name(pin.node()).unwrap();
    c.set_node_state(&old, NodeState::Down).unwrap();
    let moved = c.pick().unwrap();
    assert_eq!(moved.kind, RouteKind::Repinned);
    // The old node is back before the thread's next pick: the pin has
    // moved, and every later pick must say where it is now.
    c.set_node_state(&old, NodeState::Up).unwrap();
    for _ in 0..3 {
        let r = c.pick().unwrap();
        assert_eq!((r.node, r.kind), (moved.node, RouteKind::Affinity), "the pin moved to {:?}", moved.node);
    }
    assert_eq!(c.thread_pinned_node(), Some(moved.node));
}

#[test]
fn a_thread_pin_moved_by_reroute_is_the_one_later_picks_use() {
    let c = cluster("nodes = A, B, C");
    let pin = c.pin_thread().unwrap();
    let failed = pin.node();
    // The first pick makes the pin the thread's last used.
    assert_eq!(c.pick().unwrap().node, failed);
    let moved = c.reroute(&racaffinity::RouteRequest::default(), failed).unwrap().expect("a retry node").node;
    assert_ne!(moved, failed);
    for _ in 0..3 {
        assert_eq!(c.pick().unwrap().node, moved, "picks follow the rerouted pin");
    }
}
