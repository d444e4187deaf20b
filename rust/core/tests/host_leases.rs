//! Host leases: a host serves `pick` + `release` of a cached pinned route
//! with one atomic add each on the routing epoch page, and the core still
//! sees every lease in flight (balancing, ejection, metrics) and every
//! outcome that counts (successes, the consecutive-failure count, a state
//! change's stale leases).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{cluster, cluster_with_clock, name};
use racaffinity::{
    Cluster, ManualClock, NodeId, NodeState, Outcome, RoutingEpoch, HOST_LEASE_BEGIN, HOST_LEASE_END_NEUTRAL,
    HOST_LEASE_END_OK, HOST_LEASE_NODES, HOST_LEASE_OFFSET, HOST_LEASE_STRIPES,
};

/// A host's lease, kept the way the Java and C hosts keep theirs: the word
/// it began on and the epoch read before it began.
struct HostLease<'p> {
    word: &'p AtomicU64,
    node: NodeId,
    epoch: u64,
}

fn begin<'p>(page: &'p RoutingEpoch, stripe: usize, node: NodeId) -> HostLease<'p> {
    let epoch = page.load();
    let word = page.host_lease_word(stripe, node.0).expect("covered node");
    word.fetch_add(HOST_LEASE_BEGIN, Ordering::AcqRel);
    HostLease { word, node, epoch }
}

fn end(c: &Cluster, page: &RoutingEpoch, l: HostLease<'_>, outcome: Outcome) {
    if outcome != Outcome::Failed && page.load() == l.epoch {
        let add = if outcome == Outcome::Ok { HOST_LEASE_END_OK } else { HOST_LEASE_END_NEUTRAL };
        l.word.fetch_add(add, Ordering::AcqRel);
    } else {
        l.word.fetch_add(HOST_LEASE_END_NEUTRAL, Ordering::AcqRel);
        c.end_host_lease(l.node, outcome).unwrap();
    }
}

#[test]
fn the_page_layout_is_the_documented_one() {
    let page = RoutingEpoch::default();
    let base = page.word_ptr() as usize;
    let w = page.host_lease_word(3, 5).unwrap() as *const AtomicU64 as usize;
    assert_eq!(w - base, HOST_LEASE_OFFSET + (3 * HOST_LEASE_NODES + 5) * 8);
    assert_eq!(RoutingEpoch::page_len(), HOST_LEASE_OFFSET + HOST_LEASE_STRIPES * HOST_LEASE_NODES * 8);
    assert!(page.host_lease_word(0, HOST_LEASE_NODES as u32).is_none(), "a node past the table has no word");
}

#[test]
fn host_leases_count_in_flight_for_balancing_and_metrics() {
    let c = cluster("policy = least_outstanding\nnodes = A, B");
    let page = c.routing_epoch_page();
    let a = c.node_by_name("A").unwrap().id();
    let leases: Vec<_> = (0..10).map(|i| begin(&page, i, a)).collect();
    assert_eq!(c.node(a).unwrap().in_flight(), 10);
    assert_eq!(c.metrics().nodes[a.0 as usize].in_flight, 10);
    for _ in 0..1000 {
        assert_eq!(name(&c, c.pick().unwrap().node), "B", "least_outstanding must see the host's leases");
    }
    for l in leases {
        end(&c, &page, l, Outcome::Ok);
    }
    assert_eq!(c.node(a).unwrap().in_flight(), 0);
    let m = c.metrics();
    assert_eq!(m.nodes[a.0 as usize].in_flight, 0);
    assert_eq!(m.nodes[a.0 as usize].successes, 10, "each Ok end is a success");
}

#[test]
fn a_host_ok_between_failures_breaks_the_run_of_consecutive_failures() {
    let c = cluster("nodes = A, B\nhealth.eject_after_failures = 3");
    let page = c.routing_epoch_page();
    let a = c.node_by_name("A").unwrap().id();
    for _ in 0..2 {
        end(&c, &page, begin(&page, 0, a), Outcome::Failed);
    }
    end(&c, &page, begin(&page, 1, a), Outcome::Ok);
    for _ in 0..2 {
        end(&c, &page, begin(&page, 2, a), Outcome::Failed);
    }
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up, "fail, fail, ok, fail, fail is no run of 3");
    end(&c, &page, begin(&page, 2, a), Outcome::Failed);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down, "the third failure in a row ejects");
    let m = c.metrics();
    assert_eq!((m.nodes[a.0 as usize].successes, m.nodes[a.0 as usize].failures), (1, 5));
}

#[test]
fn metrics_collecting_oks_between_failures_also_breaks_the_run() {
    let c = cluster("nodes = A, B\nhealth.eject_after_failures = 2");
    let page = c.routing_epoch_page();
    let a = c.node_by_name("A").unwrap().id();
    end(&c, &page, begin(&page, 0, a), Outcome::Failed);
    end(&c, &page, begin(&page, 0, a), Outcome::Ok);
    // A metrics read collects the Ok first; the failure after it starts a new run.
    assert_eq!(c.metrics().nodes[a.0 as usize].successes, 1);
    end(&c, &page, begin(&page, 0, a), Outcome::Failed);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up);
}

#[test]
fn a_host_lease_in_flight_at_an_ejection_is_discounted_not_taken_for_the_trial() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock("nodes = A, B\nhealth.eject_after_failures = 1\nhealth.eject_backoff = 1s", &clock);
    let page = c.routing_epoch_page();
    let a = c.node_by_name("A").unwrap().id();
    let stale = begin(&page, 4, a);
    c.report_outcome(a, false).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down);
    clock.advance_ms(1000);
    // The trial is out on A; the stale lease's Ok must not close the breaker.
    while c.pick_balanced().unwrap().node != a {}
    end(&c, &page, stale, Outcome::Ok);
    assert_eq!(c.node(a).unwrap().state(), NodeState::Down, "a lease begun before the ejection is no trial");
    c.report_outcome(a, true).unwrap();
    assert_eq!(c.node(a).unwrap().state(), NodeState::Up, "the trial's own success lifts it");
    assert_eq!(c.node(a).unwrap().in_flight(), 0);
}

#[test]
fn host_leases_from_many_threads_leave_exact_totals() {
    let c = Arc::new(cluster("policy = least_outstanding\nnodes = A, B, C\nhealth.eject_after_failures = 0"));
    let threads = 4;
    let per = 20_000u64;
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let page = c.routing_epoch_page();
                for i in 0..per {
                    let node = NodeId(((t as u64 + i) % 3) as u32);
                    let l = begin(&page, t, node);
                    // Balancing reads the words while they move.
                    let _ = c.pick().unwrap();
                    let outcome = match i % 10 {
                        0 => Outcome::Failed,
                        1 => Outcome::Neutral,
                        _ => Outcome::Ok,
                    };
                    end(&c, &page, l, outcome);
                    if i % 1000 == 0 {
                        let _ = c.metrics();
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let m = c.metrics();
    let total = threads as u64 * per;
    assert_eq!(m.nodes.iter().map(|n| n.in_flight).sum::<i64>(), 0);
    assert_eq!(m.nodes.iter().map(|n| n.successes).sum::<u64>(), total * 8 / 10);
    assert_eq!(m.nodes.iter().map(|n| n.failures).sum::<u64>(), total / 10);
}

#[test]
fn a_node_past_the_table_still_leases_through_the_library() {
    let c = cluster("nodes = A");
    for i in 0..HOST_LEASE_NODES {
        c.add_node(racaffinity::NodeSpec::new(format!("N{i}"))).unwrap();
    }
    let last = c.node_by_name(&format!("N{}", HOST_LEASE_NODES - 1)).unwrap().id();
    assert!(last.0 as usize >= HOST_LEASE_NODES);
    assert!(c.routing_epoch_page().host_lease_word(0, last.0).is_none());
    c.begin_lease(last);
    assert_eq!(c.node(last).unwrap().in_flight(), 1);
    c.end_lease(last, Outcome::Ok);
    assert_eq!(c.node(last).unwrap().in_flight(), 0);
}

/// The contract C and Python rely on: the core leases a pinned route only
/// when the host may not, and then with a token that ends exactly once.
#[test]
fn a_cacheable_pin_is_left_to_the_host_and_the_core_leases_nothing() {
    let c = cluster("nodes = A, B");
    let k = c.new_context_key();
    let pinned = c.pin_context(k).unwrap().node;
    for _ in 0..100 {
        let (r, token) = c.pick_in_host_or_open_lease(k).unwrap();
        assert_eq!((r.node, token), (pinned, None));
    }
    assert_eq!(c.node(pinned).unwrap().in_flight(), 0, "the host leases, not the core");
    assert_eq!(c.open_lease_count(), 0);
}

#[test]
fn a_route_the_host_may_not_lease_gets_a_tracked_lease_that_ends_exactly_once() {
    let c = cluster("nodes = A, B");
    let k = c.new_context_key();
    let pinned = c.pin_context(k).unwrap().node;
    // A draining pin is not cacheable: its drain ends by the clock.
    c.set_node_state(&c.node_name(pinned).unwrap(), NodeState::Draining).unwrap();
    let (r, token) = c.pick_in_host_or_open_lease(k).unwrap();
    let token = token.expect("the core leased the draining pin");
    assert_eq!(r.node, pinned);
    assert_eq!(c.node(pinned).unwrap().in_flight(), 1);
    assert_eq!(c.open_lease_count(), 1);
    assert_eq!(c.close_lease(token, Outcome::Ok).unwrap(), pinned);
    assert!(
        matches!(c.close_lease(token, Outcome::Ok), Err(racaffinity::Error::UnknownLease(_))),
        "a second end of the same lease is refused"
    );
    assert_eq!(c.node(pinned).unwrap().in_flight(), 0, "counted out once");
    assert_eq!(c.open_lease_count(), 0);
}

#[test]
fn an_unpinned_route_and_a_node_past_the_table_are_leased_by_the_core() {
    let c = cluster("nodes = A");
    let k = c.new_context_key();
    let (r, token) = c.pick_in_host_or_open_lease(k).unwrap();
    assert!(token.is_some(), "a balanced route is not cacheable");
    c.close_lease(token.unwrap(), Outcome::Ok).unwrap();
    assert_eq!(c.node(r.node).unwrap().in_flight(), 0);

    for i in 0..HOST_LEASE_NODES {
        c.add_node(racaffinity::NodeSpec::new(format!("N{i}"))).unwrap();
    }
    c.set_node_state("A", NodeState::Down).unwrap();
    let past = c.node_by_name(&format!("N{}", HOST_LEASE_NODES - 1)).unwrap().id();
    for i in 0..HOST_LEASE_NODES - 1 {
        c.set_node_state(&format!("N{i}"), NodeState::Down).unwrap();
    }
    let k = c.new_context_key();
    assert_eq!(c.pin_context(k).unwrap().node, past);
    let (r, token) = c.pick_in_host_or_open_lease(k).unwrap();
    assert_eq!(r.node, past);
    let token = token.expect("a node without a host lease word is leased by the core");
    assert_eq!(c.node(past).unwrap().in_flight(), 1);
    c.close_lease(token, Outcome::Ok).unwrap();
    assert_eq!(c.node(past).unwrap().in_flight(), 0);
}

#[test]
fn a_host_lease_ended_ok_across_an_ejection_never_eats_the_next_trials_outcome() {
    // Decided (docs/operations.md, passive ejection): the stale-lease
    // discount covers host leases too. A host read the epoch just before
    // the ejection moved it and ended its lease OK in its word; that end
    // discounts itself like a library lease's, so the trial that follows
    // is judged on its own outcome, not eaten as a stale lease.
    let clock = ManualClock::new(1);
    let c = cluster_with_clock(
        "nodes = A, B\npolicy = round_robin\nhealth.eject_after_failures = 1\nhealth.eject_backoff = 1s",
        &clock,
    );
    let page = c.routing_epoch_page();
    let a = c.node_by_name("A").unwrap();
    let l = begin(&page, 0, a.id());
    c.report_outcome(a.id(), false).unwrap();
    assert_eq!(a.state(), NodeState::Down);
    // The race: the host's end lands in the word, as if the epoch had not moved.
    l.word.fetch_add(HOST_LEASE_END_OK, Ordering::AcqRel);
    clock.advance_ms(1_000);
    let trial = loop {
        let r = c.pick().unwrap();
        if r.node == a.id() {
            break r;
        }
    };
    c.lease(trial).release(Outcome::Ok);
    assert_eq!(a.state(), NodeState::Up, "the trial's success lifts the ejection");
}

/// Java's unpinned borrow: one call picks and begins the host lease on the
/// stripe the host names, only on an `Up` node and under the host's cap;
/// otherwise the library leases the node as `pick_in` + `begin_lease` would.
#[test]
fn pick_in_host_leased_begins_on_the_named_stripe_under_the_cap_and_only_on_an_up_node() {
    use racaffinity::HostLeased;
    let c = cluster("policy = least_outstanding\nnodes = A, B");
    let page = c.routing_epoch_page();
    let key = c.new_context_key();
    let (r, cacheable, by) = c.pick_in_host_leased(key, 3, 2).unwrap();
    assert_eq!((by, cacheable), (HostLeased::Host, false), "an unpinned answer is host-leased, not cacheable");
    let word = page.host_lease_word(3, r.node.0).unwrap();
    assert_eq!(word.load(Ordering::Relaxed), HOST_LEASE_BEGIN, "begun on stripe 3 by the core");
    assert_eq!(c.node(r.node).unwrap().in_flight(), 1);

    // Two in flight on the word (the cap here): the next lease there is the library's.
    word.fetch_add(HOST_LEASE_BEGIN, Ordering::AcqRel);
    c.set_node_state(if r.node == c.node_by_name("A").unwrap().id() { "B" } else { "A" }, NodeState::Down).unwrap();
    let (r2, _, by2) = c.pick_in_host_leased(key, 3, 2).unwrap();
    assert_eq!((r2.node, by2), (r.node, HostLeased::OverCap));
    assert_eq!(word.load(Ordering::Relaxed), 2 * HOST_LEASE_BEGIN, "the word is not touched past the cap");
    assert_eq!(c.node(r.node).unwrap().in_flight(), 3, "two host leases and the library's");

    // A node that is not Up (a panic pick onto a Down node here) is never host-leased.
    c.set_node_state("A", NodeState::Down).unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    let (r3, _, by3) = c.pick_in_host_leased(key, 3, 64).unwrap();
    assert_eq!(by3, HostLeased::No, "node {:?} is Down", r3.node);
}

/// Python's unpinned borrow: one call picks; on an `Up` node inside the
/// table the core leases nothing (the host begins the lease itself with a
/// plain write, which an atomic add of the core's could race); on any other
/// node the core opens a lease the host ends by token.
#[test]
fn pick_balanced_host_begins_leases_nothing_on_an_up_node_and_opens_a_lease_otherwise() {
    let c = cluster("policy = least_outstanding\nnodes = A, B");
    let page = c.routing_epoch_page();
    let (r, token) = c.pick_balanced_host_begins().unwrap();
    assert_eq!(token, None, "an unpinned answer on an Up node: the host's");
    for s in 0..HOST_LEASE_STRIPES {
        assert_eq!(page.host_lease_word(s, r.node.0).unwrap().load(Ordering::Relaxed), 0, "the core wrote no word");
    }
    assert_eq!(c.node(r.node).unwrap().in_flight(), 0, "nothing begun until the host begins it");

    // A node that is not Up (a panic pick onto a Down node here): the core's lease.
    c.set_node_state("A", NodeState::Down).unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    let (r2, token2) = c.pick_balanced_host_begins().unwrap();
    let token2 = token2.unwrap_or_else(|| panic!("node {:?} is Down: the core leases it", r2.node));
    assert_eq!(c.node(r2.node).unwrap().in_flight(), 1);
    c.close_lease(token2, Outcome::Neutral).unwrap();
    assert!(c.close_lease(token2, Outcome::Neutral).is_err(), "closed exactly once");
    assert_eq!(c.node(r2.node).unwrap().in_flight(), 0);
}
