//! A pinned thread's `acquire()` + `release()` is a host lease on the
//! routing epoch page (no topology snapshot, no shared counter): held to
//! what the counters' lease gave. Every topology change is seen by the next
//! acquire (soft re-pins, strict refuses), a lease begun before a change
//! reports its outcome to the core, and balancing, health and metrics count
//! these leases exactly.

mod common;

use std::sync::atomic::Ordering;

use common::{cluster, cluster_with_clock, name};
use racaffinity::{
    Cluster, ErrorKind, ManualClock, NodeId, NodeState, Outcome, RouteKind, HOST_LEASE_IN_FLIGHT_BITS,
    HOST_LEASE_STRIPES,
};

/// Host leases in flight on `node`, read from the page's words.
fn in_page(c: &Cluster, node: NodeId) -> u64 {
    let page = c.routing_epoch_page();
    (0..HOST_LEASE_STRIPES)
        .map(|s| {
            page.host_lease_word(s, node.0).unwrap().load(Ordering::Relaxed) & ((1 << HOST_LEASE_IN_FLIGHT_BITS) - 1)
        })
        .sum()
}

#[test]
fn a_pinned_acquire_is_a_host_lease_that_balancing_and_metrics_count() {
    let c = cluster("nodes = A, B\npolicy = least_outstanding");
    let pin = c.pin_thread().unwrap();
    let a = pin.node();
    let held: Vec<_> = (0..5).map(|_| c.acquire().unwrap()).collect();
    assert!(held.iter().all(|l| l.node() == a && l.route().kind == RouteKind::Affinity));
    assert_eq!(in_page(&c, a), 5, "the leases are in the page, not in the core's counters");
    assert_eq!(c.node(a).unwrap().in_flight(), 5);
    let others: Vec<NodeId> =
        std::thread::scope(|s| s.spawn(|| (0..50).map(|_| c.acquire().unwrap().node()).collect()).join().unwrap());
    assert!(others.iter().all(|&n| n != a), "least_outstanding avoids the node holding 5 leases");
    for l in held {
        l.release(Outcome::Ok);
    }
    c.acquire().unwrap().release(Outcome::Neutral);
    drop(c.acquire().unwrap()); // released Neutral
    let m = &c.metrics().nodes[a.0 as usize];
    assert_eq!((m.in_flight, m.successes), (0, 5));
    assert_eq!(c.node(a).unwrap().in_flight(), 0);
    assert_eq!(in_page(&c, a), 0);
    let thread = &c.metrics().scopes[0];
    assert_eq!(thread.hits, 7, "each pinned acquire is a hit: {thread:?}");
}

#[test]
fn failures_of_pinned_acquires_reach_the_breaker() {
    let c = cluster("nodes = A, B\nhealth.eject_after_failures = 2");
    let pin = c.pin_thread().unwrap();
    let a = pin.node();
    c.acquire().unwrap().release(Outcome::Failed);
    c.acquire().unwrap().release(Outcome::Ok); // breaks the run
    c.acquire().unwrap().release(Outcome::Failed);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up, "an Ok in the page broke the run of failures");
    c.acquire().unwrap().release(Outcome::Failed);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down, "two failures in a row eject");
    let m = &c.metrics().nodes[a.0 as usize];
    assert_eq!((m.in_flight, m.successes, m.failures), (0, 1, 3));
}

#[test]
fn a_topology_change_is_seen_by_the_next_pinned_acquire() {
    // Soft: a Down, a removal and an ejection each re-pin the next acquire.
    let c = cluster(
        "nodes = A, B, C, D\nhealth.eject_after_failures = 1\nhealth.eject_backoff = 1h\nhealth.eject_backoff_max = 1h",
    );
    let _pin = c.pin_thread().unwrap();
    let first = c.acquire().unwrap();
    let mut pinned = first.node();
    first.release(Outcome::Ok);
    c.acquire().unwrap().release(Outcome::Ok); // served by the fast path from here on
    let changes: [&dyn Fn(NodeId); 3] = [
        &|n| {
            c.set_node_state(&name(&c, n), NodeState::Down).unwrap();
        },
        &|n| {
            c.remove_node(&name(&c, n)).unwrap();
        },
        &|n| {
            c.report_outcome(n, false).unwrap();
        },
    ];
    for change in changes {
        for _ in 0..3 {
            c.acquire().unwrap().release(Outcome::Ok);
        }
        change(pinned);
        let l = c.acquire().unwrap();
        assert_ne!(l.node(), pinned, "the pinned acquire served a node the topology no longer allows");
        assert_eq!(l.route().kind, RouteKind::Repinned);
        pinned = l.node();
        l.release(Outcome::Ok);
        let again = c.acquire().unwrap();
        assert_eq!((again.node(), again.route().kind), (pinned, RouteKind::Affinity));
    }

    // Strict: the next acquire refuses.
    let c = cluster("nodes = A, B\nthread.strict = true");
    let pin = c.pin_thread().unwrap();
    c.acquire().unwrap().release(Outcome::Ok);
    c.acquire().unwrap().release(Outcome::Ok);
    c.set_node_state(&name(&c, pin.node()), NodeState::Down).unwrap();
    assert_eq!(c.acquire().unwrap_err().kind(), ErrorKind::StrictAffinity);
}

#[test]
fn a_pinned_lease_begun_before_an_ejection_reports_its_ok_to_the_core() {
    // As host_leases.rs: the Ok of a lease in flight at the ejection is
    // discounted as stale by the breaker, never taken for the trial's.
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B\nhealth.eject_after_failures = 1\nhealth.eject_backoff = 1s", &clock);
    let pin = c.pin_thread().unwrap();
    let a = pin.node();
    c.acquire().unwrap().release(Outcome::Ok);
    let stale = c.acquire().unwrap();
    c.report_outcome(a, false).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down);
    clock.advance_ms(1000);
    std::thread::scope(|s| {
        s.spawn(|| while c.pick_balanced().unwrap().node != a {});
    });
    stale.release(Outcome::Ok);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down, "a lease begun before the ejection is no trial");
    c.report_outcome(a, true).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up, "the trial's own success lifts it");
    let m = &c.metrics().nodes[a.0 as usize];
    assert_eq!((m.in_flight, m.successes), (0, 3), "every lease ended; both Oks and the trial's count");
}

#[test]
fn pinned_leases_from_many_threads_leave_exact_totals() {
    let c = cluster("nodes = A, B, C");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let _pin = c.pin_thread().unwrap();
                for i in 0..20_000u32 {
                    let l = c.acquire().unwrap();
                    l.release(if i % 10 == 0 { Outcome::Neutral } else { Outcome::Ok });
                }
            });
        }
    });
    let m = c.metrics();
    assert_eq!(m.nodes.iter().map(|n| n.in_flight).sum::<i64>(), 0);
    assert_eq!(m.nodes.iter().map(|n| n.successes).sum::<u64>(), 4 * 18_000);
}

#[test]
fn a_pinned_lease_ended_neutral_after_an_ejection_is_discounted_before_the_trial() {
    // Ended in the page, the Neutral end would leave the breaker counting
    // the lease as in flight at the ejection: the trial's own Ok would then
    // be taken for it, and the node would stay down.
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B\nhealth.eject_after_failures = 1\nhealth.eject_backoff = 1s", &clock);
    let pin = c.pin_thread().unwrap();
    let a = pin.node();
    c.acquire().unwrap().release(Outcome::Ok);
    let stale = c.acquire().unwrap();
    c.report_outcome(a, false).unwrap();
    stale.release(Outcome::Neutral);
    clock.advance_ms(1000);
    let trial = std::thread::scope(|s| {
        s.spawn(|| loop {
            let r = c.pick_balanced().unwrap();
            if r.node == a {
                break r;
            }
        })
        .join()
        .unwrap()
    });
    c.lease(trial).release(Outcome::Ok);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up, "the trial's lease lifts the node");
}

/// Leases a thread leaks (`mem::forget`) never end: past 2^20 of them on its
/// word, a pinned acquire leases through the counters and leaves the word
/// as it was, so the in-flight bits never carry into the success bits.
#[test]
fn past_the_cap_of_leaked_host_leases_an_acquire_leases_through_the_counters() {
    const CAP: u64 = 1 << 20; // lease.rs: HOST_LEASE_CAP
    let c = cluster("nodes = A, B");
    let pin = c.pin_thread().unwrap();
    let node = pin.node();
    for _ in 0..CAP {
        std::mem::forget(c.acquire().unwrap());
    }
    assert_eq!(in_page(&c, node), CAP);
    let over = c.acquire().unwrap();
    assert_eq!(over.node(), node);
    assert_eq!(in_page(&c, node), CAP, "the word is left as it was past the cap");
    assert_eq!(c.node(node).unwrap().in_flight(), CAP as i64 + 1, "the counters hold the one past the cap");
    over.release(Outcome::Ok);
    assert_eq!(in_page(&c, node), CAP);
    assert_eq!(c.node(node).unwrap().in_flight(), CAP as i64);
    assert_eq!(c.metrics().nodes[node.0 as usize].successes, 1);
}
