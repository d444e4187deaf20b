//! `Cluster::close` and the pins that outlive it (issue 26 [core-review-3],
//! "a thread-pinned pick() after close()"; decided in docs/c.md).

use racaffinity::{Cluster, RouteKind};

/// A thread pin is the thread's own state, not one of the registries
/// `close` empties: until its scope ends, a pinned `pick()` after `close`
/// still answers the pinned node (as a native call racing with
/// `racaffinity_cluster_free` may). Context pins, which the cluster holds,
/// are gone; once the thread unpins, picks balance over the nodes again.
#[test]
fn a_thread_pinned_pick_after_close_answers_the_pinned_node_until_the_pin_ends() {
    let c = Cluster::from_config_text("nodes = A, B, C\npolicy = round_robin").unwrap();
    let key = c.new_context_key();
    c.pin_context(key).unwrap();
    let pin = c.pin_thread().unwrap();
    let pinned = pin.node();
    let epoch = c.routing_epoch();
    c.close();
    assert!(c.is_closed());
    assert!(c.routing_epoch() > epoch, "close moves the epoch: host caches miss");
    for _ in 0..3 {
        let r = c.pick().unwrap();
        assert_eq!((r.node, r.kind), (pinned, RouteKind::Affinity));
    }
    assert_eq!(c.context_pinned_node(key), None, "close released the context pin");
    drop(pin);
    let nodes: std::collections::HashSet<_> = (0..6).map(|_| c.pick().unwrap().node).collect();
    assert!(nodes.len() > 1, "unpinned: balanced again ({nodes:?})");
}
