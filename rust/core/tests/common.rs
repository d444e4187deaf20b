#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::fmt::Debug;

use racaffinity::{
    Cluster, ClusterBuilder, Config, ErrorKind, ManualClock, NodeId, NodeState, Result, Route, RouteKind,
};

pub fn cluster(text: &str) -> Cluster {
    Cluster::from_config_text(text).expect("valid config")
}

pub fn cluster_with_clock(text: &str, clock: &ManualClock) -> Cluster {
    ClusterBuilder::from_config(Config::parse(text).expect("valid config"))
        .clock(clock.clone())
        .build()
        .expect("valid cluster")
}

pub fn name(c: &Cluster, id: NodeId) -> String {
    c.node_name(id).expect("known node")
}

/// Routes with `route`, marks the node it chose down and returns that node: how the
/// failover tests take an owner away from a key, session or transaction.
pub fn owner_marked_down(c: &Cluster, route: impl FnOnce() -> Result<Route>) -> NodeId {
    let owner = route().expect("routed").node;
    c.set_node_state(&name(c, owner), NodeState::Down).unwrap();
    owner
}

/// Asserts that `result` is a strict-affinity refusal whose message names the scope and the
/// node the caller is held to, so that an operator can tell why.
pub fn assert_strict_refusal<T: Debug>(result: Result<T>, scope: &str, node: &str) {
    let e = result.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StrictAffinity, "{e}");
    let text = e.to_string();
    assert!(text.contains(scope) && text.contains(node), "{e}");
}

/// In a cluster of `config` (strict for `scope`), with the node `route` chose marked down,
/// the next `route` is refused, and the refusal names the scope and that node.
pub fn assert_refused_with_owner_down(config: &str, scope: &str, route: impl Fn(&Cluster) -> Result<Route>) {
    let c = cluster(config);
    let owner = owner_marked_down(&c, || route(&c));
    assert_strict_refusal(route(&c), scope, &name(&c, owner));
}

/// Marks the node `route` chose down and routes again: the work is moved off that node, as
/// `kind`. Returns the old owner and the new route.
pub fn moved_with_owner_down(c: &Cluster, kind: RouteKind, route: impl Fn() -> Result<Route>) -> (NodeId, Route) {
    let owner = owner_marked_down(c, &route);
    let r = route().expect("routed again");
    assert_eq!(r.kind, kind);
    assert_ne!(r.node, owner);
    (owner, r)
}

/// Where `c` puts a new gtrid: the node's name, or None for a strict
/// refusal (any other error fails the test). The gtrid is completed at once,
/// so the same name can be placed again.
pub fn place(c: &Cluster, gtrid: &str) -> Option<String> {
    let r = c.tx_begin(gtrid.as_bytes());
    let _ = c.tx_complete(gtrid.as_bytes());
    match r {
        Ok(r) => Some(c.node_name(r.node).unwrap()),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::StrictAffinity, "{e}");
            None
        }
    }
}

/// Runs `threads` threads calling `call` on `c` while nodes `D0`, `D1`, …
/// are added and the one before removed, with `between` run after each
/// addition, for `secs` seconds; panics naming `what` if a call panicked.
/// More threads than cores, so some are preempted between a topology
/// snapshot and what they read after it.
pub fn calls_while_nodes_come_and_go(
    c: &std::sync::Arc<Cluster>,
    threads: usize,
    secs: u64,
    what: &str,
    call: impl Fn(&Cluster, u64) + Send + Sync + Clone + 'static,
    mut between: impl FnMut(&Cluster),
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..threads)
        .map(|_| {
            let (c, stop, call) = (c.clone(), stop.clone(), call.clone());
            std::thread::spawn(move || {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    call(&c, k);
                    k += 1;
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut i = 0;
    while std::time::Instant::now() < deadline && callers.iter().all(|t| !t.is_finished()) {
        c.add_node(racaffinity::NodeSpec::new(format!("D{i}"))).unwrap();
        between(c);
        if i > 0 {
            c.remove_node(&format!("D{}", i - 1)).unwrap();
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in callers {
        if let Err(p) = t.join() {
            let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            panic!("{what} panicked after {i} nodes: {msg:?}");
        }
    }
}
