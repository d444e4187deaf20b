//! Web-session affinity.

mod common;

use common::{assert_refused_with_owner_down, cluster, cluster_with_clock, moved_with_owner_down};
use racaffinity::{ErrorKind, ManualClock, NodeState, RouteKind, MAX_KEY_BYTES};

#[test]
fn a_session_sticks_to_its_node() {
    let c = cluster("nodes = A, B, C\npolicy = round_robin");
    let first = c.session_route(b"JSESSIONID=abc").unwrap();
    assert_eq!(first.kind, RouteKind::Placed);
    for _ in 0..20 {
        let r = c.session_route(b"JSESSIONID=abc").unwrap();
        assert_eq!((r.node, r.kind), (first.node, RouteKind::Affinity));
    }
    assert!(c.session_end(b"JSESSIONID=abc").unwrap());
    assert!(!c.session_end(b"JSESSIONID=abc").unwrap());
    assert_eq!(c.session_count(), 0);
}

#[test]
fn idle_sessions_expire_after_the_ttl() {
    let clock = ManualClock::new(1_000);
    let c = cluster_with_clock("nodes = A, B, C\nsession.idle_ttl = 30s", &clock);
    c.session_route(b"s1").unwrap();
    clock.advance_ms(29_000);
    assert_eq!(c.session_route(b"s1").unwrap().kind, RouteKind::Affinity, "use refreshes the TTL");
    clock.advance_ms(29_000);
    assert_eq!(c.session_route(b"s1").unwrap().kind, RouteKind::Affinity);
    clock.advance_ms(30_001);
    assert_eq!(c.session_route(b"s1").unwrap().kind, RouteKind::Placed, "idle past TTL: a new session");
    assert_eq!(c.metrics().sessions_expired, 1);
}

#[test]
fn sweeping_removes_idle_sessions_without_traffic_on_them() {
    let clock = ManualClock::new(1);
    let c = cluster_with_clock("nodes = A, B\nsession.idle_ttl = 1m", &clock);
    for i in 0..1000 {
        c.session_route(format!("s{i}").as_bytes()).unwrap();
    }
    assert_eq!(c.session_count(), 1000);
    clock.advance_ms(60_001);
    assert_eq!(c.session_sweep(), 1000);
    assert_eq!(c.session_count(), 0);
}

#[test]
fn aff_false_advisory_revokes_that_instances_sessions_only() {
    let c = cluster("nodes = orcl1, orcl2\npolicy = round_robin");
    let mut on = std::collections::HashMap::new();
    for i in 0..40 {
        let k = format!("s{i}");
        on.insert(k.clone(), c.session_route(k.as_bytes()).unwrap().node);
    }
    c.apply_event(
        "VERSION=1.0 database=orcl service=svc { {instance=orcl2 percent=50 flag=GOOD aff=TRUE}\
         {instance=orcl1 percent=50 flag=UNKNOWN aff=FALSE} } timestamp=2026-11-29 08:00:00",
    )
    .unwrap();
    let orcl1 = c.node_by_name("orcl1").unwrap().id();
    for (k, was) in &on {
        let r = c.session_route(k.as_bytes()).unwrap();
        if *was == orcl1 {
            assert_eq!(r.kind, RouteKind::Placed, "{k} revoked");
            assert_ne!(r.node, orcl1, "new sessions avoid an instance without affinity");
        } else {
            assert_eq!((r.node, r.kind), (*was, RouteKind::Affinity));
        }
    }
    assert_eq!(c.metrics().sessions_revoked, 20);
}

#[test]
fn strict_session_affinity_refuses_and_soft_repins() {
    assert_refused_with_owner_down("nodes = A, B\nsession.strict = true", "session", |c| c.session_route(b"s"));

    let c = cluster("nodes = A, B");
    moved_with_owner_down(&c, RouteKind::Repinned, || c.session_route(b"s"));
}

#[test]
fn stateless_mode_agrees_across_clusters_and_moves_only_the_lost_nodes_sessions() {
    let text = "nodes = A, B, C, D\nsession.mode = stateless";
    let (a, b) = (cluster(text), cluster(text));
    let keys: Vec<String> = (0..2000).map(|i| format!("sess-{i}")).collect();
    let before: Vec<_> = keys.iter().map(|k| a.session_route(k.as_bytes()).unwrap().node).collect();
    for (k, n) in keys.iter().zip(&before) {
        assert_eq!(b.session_route(k.as_bytes()).unwrap().node, *n);
    }
    assert_eq!(a.session_count(), 0, "stateless keeps no registry");
    a.set_node_state("C", NodeState::Down).unwrap();
    let c_id = a.node_by_name("C").unwrap().id();
    for (k, n) in keys.iter().zip(&before) {
        let r = a.session_route(k.as_bytes()).unwrap();
        if *n == c_id {
            assert_ne!(r.node, c_id);
            assert_eq!(r.kind, RouteKind::Repinned);
        } else {
            assert_eq!(r.node, *n, "{k} must not move");
        }
    }
}

#[test]
fn oversized_and_empty_session_keys_are_rejected() {
    let c = cluster("nodes = A");
    assert_eq!(c.session_route(&[1u8; MAX_KEY_BYTES + 1]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(c.session_route(b"").unwrap_err().kind(), ErrorKind::InvalidArgument);
}

/// A clock that stops the thread named `held` at its first reading until
/// the test lets it go: the gap between a call's topology snapshot and its
/// registry lock, made as long as a preemption there can make it.
#[derive(Debug)]
struct HoldingClock {
    held: &'static str,
    armed: std::sync::atomic::AtomicBool,
    reached: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    go: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl racaffinity::Clock for HoldingClock {
    fn now_ms(&self) -> u64 {
        if std::thread::current().name() == Some(self.held)
            && self.armed.swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            if let Some(tx) = self.reached.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            if let Some(rx) = self.go.lock().unwrap().take() {
                rx.recv().unwrap();
            }
        }
        1_000
    }
}

/// A session placed, by another thread, on a node added after this call
/// took its topology snapshot: the entry names an id the snapshot does not
/// have. The call must route (to that node), not panic ("ids are never
/// dropped"), which the C ABI turned into RACAFFINITY_RESULT_PANIC.
#[test]
fn a_session_placed_on_a_node_added_during_the_call_routes_there() {
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let clock = std::sync::Arc::new(HoldingClock {
        held: "held-session-route",
        armed: std::sync::atomic::AtomicBool::new(true),
        reached: std::sync::Mutex::new(Some(reached_tx)),
        go: std::sync::Mutex::new(Some(go_rx)),
    });
    let c = std::sync::Arc::new(
        racaffinity::Cluster::with_clock(racaffinity::Config::parse("nodes = A, B").unwrap(), clock).unwrap(),
    );
    let held = {
        let c = c.clone();
        std::thread::Builder::new()
            .name("held-session-route".into())
            .spawn(move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.session_route(b"s1"))))
            .unwrap()
    };
    reached.recv().unwrap();
    // Meanwhile: a node is added and takes the session, the others being down.
    let d = c.add_node(racaffinity::NodeSpec::new("D")).unwrap();
    c.set_node_state("A", NodeState::Down).unwrap();
    c.set_node_state("B", NodeState::Down).unwrap();
    assert_eq!(c.session_route(b"s1").unwrap().node, d);
    go.send(()).unwrap();
    let r = held.join().unwrap();
    let r = r.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    });
    assert_eq!(r.map(|r| r.map(|r| r.node).ok()), Ok(Some(d)), "the held call's answer");
}
