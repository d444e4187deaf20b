//! The routing epoch: every change that could alter a route advances it, and
//! a host that serves pinned routes from a `(context, node, epoch)` cache
//! never returns a node that was already down, removed or ejected when its
//! route began.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{cluster, cluster_with_clock};
use racaffinity::{Cluster, ContextKey, ErrorKind, ManualClock, NodeId, NodeSpec, NodeState, RouteKind, Scope};

fn advances(c: &Cluster, what: &str, f: impl FnOnce(&Cluster)) {
    let before = c.routing_epoch();
    f(c);
    assert!(c.routing_epoch() > before, "{what} did not advance the routing epoch");
}

#[test]
fn every_change_that_can_alter_a_route_advances_the_epoch() {
    let clock = ManualClock::new(0);
    let c = cluster_with_clock(
        "nodes = orcl1, orcl2, orcl3\nhealth.eject_after_failures = 2\nhealth.eject_backoff = 1s\n\
         data.partitions = 16",
        &clock,
    );
    let b = c.node_by_name("orcl2").unwrap().id();
    advances(&c, "mark down", |c| {
        c.set_node_state("orcl2", NodeState::Down).unwrap();
    });
    advances(&c, "mark up", |c| {
        c.set_node_state("orcl2", NodeState::Up).unwrap();
    });
    advances(&c, "drain", |c| {
        c.set_node_state("orcl2", NodeState::Draining).unwrap();
    });
    advances(&c, "undrain", |c| {
        c.set_node_state("orcl2", NodeState::Up).unwrap();
    });
    advances(&c, "ejection", |c| {
        c.report_outcome(b, false).unwrap();
        c.report_outcome(b, false).unwrap();
    });
    assert_eq!(c.node(b).unwrap().state(), NodeState::Down);
    clock.advance_ms(1000);
    advances(&c, "half-open trial", |c| {
        // Balanced picks grant the trial once the back-off elapsed.
        while c.pick_balanced().unwrap().node != b {}
    });
    advances(&c, "trial success", |c| {
        c.report_outcome(b, true).unwrap();
    });
    advances(&c, "weight", |c| c.set_node_weight("orcl3", 7).unwrap());
    advances(&c, "FAN down", |c| {
        c.apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl3 status=down reason=FAILURE")
            .unwrap();
    });
    advances(&c, "RLB advisory", |c| {
        c.apply_event(
            "VERSION=1.0 database=orcl service=svc { {instance=orcl1 percent=60 flag=GOOD aff=TRUE}\
             {instance=orcl2 percent=40 flag=GOOD aff=FALSE} } timestamp=x",
        )
        .unwrap();
    });
    advances(&c, "strict switch", |c| c.set_strict(Scope::Thread, true));
    advances(&c, "partition map", |c| c.set_partition(3, "orcl1").unwrap());
    advances(&c, "node added", |c| {
        c.add_node(NodeSpec::new("orcl4")).unwrap();
    });
    advances(&c, "node removed", |c| {
        c.remove_node("orcl4").unwrap();
    });
    advances(&c, "close", Cluster::close);
}

#[test]
fn routes_alone_never_advance_the_epoch() {
    let c = cluster("nodes = orcl1, orcl2, orcl3");
    let k = c.new_context_key();
    c.pin_context(k).unwrap();
    let e = c.routing_epoch();
    for _ in 0..1000 {
        assert!(c.pick_in_cacheable(k).unwrap().1);
        c.pick().unwrap();
    }
    assert_eq!(c.routing_epoch(), e);
}

#[test]
fn only_a_pin_on_an_up_node_is_cacheable() {
    let c = cluster("nodes = orcl1, orcl2");
    let k = c.new_context_key();
    assert!(!c.pick_in_cacheable(k).unwrap().1, "an unpinned, balanced route is not cacheable");
    let pinned = c.pin_context(k).unwrap().node;
    let (r, cacheable) = c.pick_in_cacheable(k).unwrap();
    assert_eq!((r.node, r.kind, cacheable), (pinned, RouteKind::Affinity, true));
    // A drain's timeout ends the pin by the clock, which moves no epoch.
    c.set_node_state(&c.node_name(pinned).unwrap(), NodeState::Draining).unwrap();
    let (r, cacheable) = c.pick_in_cacheable(k).unwrap();
    assert_eq!((r.node, cacheable), (pinned, false));
}

/// One host thread's cache, as the Java and Python bindings keep it.
struct HostCache {
    key: ContextKey,
    node: NodeId,
    epoch: u64,
    hits: HashMap<u32, u64>,
}

impl HostCache {
    fn route(&mut self, c: &Cluster) -> racaffinity::Result<(NodeId, bool)> {
        if self.epoch != 0 && c.routing_epoch() == self.epoch {
            *self.hits.entry(self.node.0).or_default() += 1;
            return Ok((self.node, true));
        }
        let e = c.routing_epoch();
        let (r, cacheable) = c.pick_in_cacheable(self.key)?;
        self.epoch = if cacheable { e } else { 0 };
        self.node = r.node;
        Ok((r.node, false))
    }
}

/// What the flipper did to a node: `began` and `done` are the shared clock's
/// values its `fetch_add` returned before and after the change, so the change
/// started once the clock passed `began` and was complete once it passed
/// `done`.
#[derive(Clone, Copy, Debug)]
struct Transition {
    began: u64,
    done: u64,
    unavailable: bool,
    /// The flipper's operation (0..=9), for the failure message.
    #[allow(dead_code)]
    op: u64,
}

/// Whether `node` was unavailable for the whole of a route that read the
/// clock as `begin` before and `end` after: its last transition complete by
/// `begin` made it unavailable, and the next had not started by `end`.
fn down_throughout(log: &[Transition], begin: u64, end: u64) -> bool {
    let i = log.partition_point(|t| t.done < begin);
    i > 0 && log[i - 1].unavailable && log.get(i).is_none_or(|next| next.began >= end)
}

#[test]
fn cached_pins_never_outlive_a_down_removal_or_ejection_under_stress() {
    stress(Router::HostCache);
}

/// The same for the core's own cache of a thread pin (Rust and C hosts).
#[test]
fn thread_pins_never_outlive_a_down_removal_or_ejection_under_stress() {
    stress(Router::ThreadPin);
}

#[derive(Clone, Copy)]
enum Router {
    /// A context pin served from a host cache, as Java and Python do.
    HostCache,
    /// An OS thread pin, `Cluster::pick`.
    ThreadPin,
}

fn stress(router: Router) {
    const ROUTERS: usize = 4;
    const ROUTES: usize = 150_000;
    // Routers go on until the flipper made this many changes too: a cached
    // route can be fast enough to finish ROUTES before the flipper starts.
    const MIN_FLIPS: u64 = 200;
    let flips = Arc::new(AtomicU64::new(0));
    let c = Arc::new(cluster(
        "nodes = n0, n1, n2, n3, n4, n5\nhealth.eject_after_failures = 3\nhealth.eject_backoff = 1h\nhealth.eject_backoff_max = 1h",
    ));
    let clock = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let log: Arc<Mutex<HashMap<u32, Vec<Transition>>>> = Arc::default();

    let flipper = {
        let (c, clock, stop, log, flips) = (c.clone(), clock.clone(), stop.clone(), log.clone(), flips.clone());
        std::thread::spawn(move || {
            // n0 never changes, so a soft re-pin always has somewhere to go.
            let mut rng = 0x2545_f491_4f6c_dd1du64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut added = 0;
            let mut ops = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let live: Vec<NodeId> = c.node_ids().into_iter().filter(|id| id.0 != 0).collect();
                let node = live[next() as usize % live.len()];
                let name = c.node_name(node).unwrap();
                let began = clock.fetch_add(1, Ordering::SeqCst);
                let op = next() % 10;
                let unavailable = match op {
                    0..=2 => {
                        c.set_node_state(&name, NodeState::Down).unwrap();
                        Some(true)
                    }
                    3..=5 => {
                        c.set_node_state(&name, NodeState::Up).unwrap();
                        Some(false)
                    }
                    6 => {
                        for _ in 0..3 {
                            c.report_outcome(node, false).unwrap();
                        }
                        // An operator's mark-down already holds it Down.
                        (c.node(node).unwrap().state() == NodeState::Down).then_some(true)
                    }
                    7 => {
                        let aff = if next() % 2 == 0 { "TRUE" } else { "FALSE" };
                        c.apply_event(&format!(
                            "VERSION=1.0 database=orcl service=svc {{ {{instance={name} percent=30 flag=GOOD \
                             aff={aff}}} }} timestamp=x"
                        ))
                        .unwrap();
                        None
                    }
                    8 if live.len() > 3 => {
                        c.remove_node(&name).unwrap();
                        Some(true)
                    }
                    _ => {
                        added += 1;
                        c.add_node(NodeSpec::new(format!("m{added}"))).unwrap();
                        None
                    }
                };
                let done = clock.fetch_add(1, Ordering::SeqCst);
                if let Some(unavailable) = unavailable {
                    log.lock().unwrap().entry(node.0).or_default().push(Transition { began, done, unavailable, op });
                }
                ops += 1;
                flips.store(ops, Ordering::Relaxed);
                std::thread::yield_now();
            }
            ops
        })
    };

    let routers: Vec<_> = (0..ROUTERS)
        .map(|_| {
            let (c, clock, flips) = (c.clone(), clock.clone(), flips.clone());
            std::thread::spawn(move || {
                let key = c.new_context_key();
                let first = match router {
                    Router::HostCache => c.pin_context(key).unwrap().node,
                    Router::ThreadPin => c.enter_thread_pin().unwrap().node,
                };
                let mut cache = HostCache { key, node: first, epoch: 0, hits: HashMap::new() };
                let mut seen = Vec::with_capacity(ROUTES);
                let mut served_by_host = 0u64;
                while seen.len() < ROUTES || flips.load(Ordering::Relaxed) < MIN_FLIPS {
                    let begin = clock.load(Ordering::SeqCst);
                    let (node, hit) = match router {
                        Router::HostCache => cache.route(&c).unwrap(),
                        Router::ThreadPin => {
                            let r = c.pick().unwrap();
                            (r.node, r.kind == RouteKind::Affinity)
                        }
                    };
                    let end = clock.load(Ordering::SeqCst);
                    served_by_host += u64::from(hit);
                    seen.push((begin, end, node.0, hit));
                }
                if let Router::ThreadPin = router {
                    assert!(c.leave_thread_pin(), "the thread's pin ends with its only level");
                }
                (seen, cache.hits, served_by_host)
            })
        })
        .collect();

    let mut results = Vec::new();
    for r in routers {
        results.push(r.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let ops = flipper.join().unwrap();
    assert!(ops >= MIN_FLIPS, "the flipper made only {ops} changes: the test proves nothing");

    let log = log.lock().unwrap();
    let (mut hits_total, mut violations) = (0u64, Vec::new());
    for (seen, hits, served) in &results {
        assert!(*served > 0, "no route was served from the host cache");
        hits_total += served;
        for &(begin, end, node, hit) in seen {
            if log.get(&node).is_some_and(|l| down_throughout(l, begin, end)) {
                violations.push((begin, end, node, hit));
            }
        }
        for (&node, &n) in hits {
            c.count_host_hits(NodeId(node), n).unwrap();
        }
    }
    if let Some(&(_, _, node, _)) = violations.first() {
        panic!(
            "{} routes returned an unavailable node, e.g. {:?}; transitions of node {node}: {:?}",
            violations.len(),
            &violations[..violations.len().min(5)],
            log[&node]
        );
    }

    // Every route was a pinned-context route: each counted exactly once,
    // whether the core or the host cache answered.
    let m = c.metrics();
    let t = m.scopes.iter().find(|s| s.scope == Scope::Thread).unwrap();
    let counted = t.hits + t.placements + t.repins + t.panics;
    let made: u64 = results.iter().map(|(seen, _, _)| seen.len() as u64 + 1).sum();
    assert_eq!(counted, made, "thread-scope routes counted (host hits merged: {hits_total})");
}

#[test]
fn strict_refuses_and_soft_repins_at_once_after_down() {
    for strict in [false, true] {
        let c = cluster("nodes = orcl1, orcl2, orcl3");
        c.set_strict(Scope::Thread, strict);
        let k = c.new_context_key();
        let pinned = c.pin_context(k).unwrap().node;
        let mut cache = HostCache { key: k, node: pinned, epoch: 0, hits: HashMap::new() };
        cache.route(&c).unwrap();
        assert_eq!(cache.route(&c).unwrap(), (pinned, true), "the second route is a host hit");
        c.set_node_state(&c.node_name(pinned).unwrap(), NodeState::Down).unwrap();
        match cache.route(&c) {
            Err(e) => {
                assert!(strict, "soft scope refused: {e}");
                assert_eq!(e.kind(), ErrorKind::StrictAffinity);
            }
            Ok((node, hit)) => {
                assert!(!strict, "strict scope routed to {node:?} after Down");
                assert!(!hit && node != pinned, "soft scope must re-pin at once");
            }
        }
    }
}

#[test]
fn the_epoch_page_outlives_the_cluster() {
    let c = cluster("nodes = orcl1, orcl2");
    let page = c.routing_epoch_page();
    let before = page.load();
    // Closing advances the word (cached routes stop being served) and the
    // page stays readable after the cluster is gone.
    c.close();
    let closed = page.load();
    assert!(closed > before, "close must advance the epoch: {before} -> {closed}");
    drop(c);
    assert_eq!(page.load(), closed);
}

/// The partition-owner table is valid for one epoch: after a weight change,
/// an added or a removed node, every key routes as on a cluster built fresh
/// with the new topology.
#[test]
fn partition_owner_table_follows_weights_and_node_changes() {
    let c = cluster("nodes = a, b, c, d");
    let owners = |c: &Cluster| -> Vec<u32> { (0..2000i64).map(|k| c.route_key_i64(k).unwrap().node.0).collect() };
    let names = |c: &Cluster| -> Vec<String> {
        owners(c).into_iter().map(|id| c.node_name(NodeId(id)).unwrap()).collect::<Vec<_>>()
    };
    let before = owners(&c);
    assert_eq!(before, owners(&c), "stable while nothing changes");
    c.set_node_weight("b", 5).unwrap();
    assert_eq!(names(&c), names(&cluster("nodes = a, b, c, d\nnode.b.weight = 5")));
    c.add_node(NodeSpec::new("e")).unwrap();
    assert_eq!(names(&c), names(&cluster("nodes = a, b, c, d, e\nnode.b.weight = 5")));
    c.remove_node("a").unwrap();
    assert_eq!(names(&c), names(&cluster("nodes = b, c, d, e\nnode.b.weight = 5")));
}

/// Host hits are counters like any other: a count near 2^64 (a host's
/// counter that wrapped, or garbage from C) wraps the node's picks the way
/// every other counter wraps, instead of overflowing when the metrics are read.
#[test]
fn host_hits_of_any_size_leave_the_metrics_readable() {
    let c = cluster("nodes = orcl1, orcl2");
    c.pick().unwrap();
    c.count_host_hits(NodeId(0), u64::MAX).unwrap();
    c.count_host_hits(NodeId(1), u64::MAX).unwrap();
    let m = c.metrics();
    assert!(m.to_json().contains("\"affinity_hits\":18446744073709551615"));
    assert_eq!(m.total_picks(), u64::MAX, "1 pick + 2 * (2^64 - 1) hits, wrapped");
    assert!(m.to_prometheus().contains("racaffinity_node_affinity_hits_total"));
}
