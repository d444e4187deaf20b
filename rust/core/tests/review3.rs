//! [core-review-3] items 4, 5, 8 and 10: session tokens whose nodes are lost,
//! a reroute seen by host caches, a strict refusal that names the right
//! node, and contexts counted in their own scope.

mod common;

use racaffinity::{NodeState, RouteRequest, Scope};

#[test]
fn a_token_whose_primary_is_down_goes_to_its_draining_backup_when_no_node_is_up() {
    let c = common::cluster("nodes = A, B, C");
    let mut on_down_primary = 0;
    for i in 0..50 {
        for n in ["A", "B", "C"] {
            c.set_node_state(n, NodeState::Up).unwrap();
        }
        let token = c.session_token(&format!("sid{i}")).unwrap();
        let parts = c.decode_token(&token).unwrap();
        let (primary, backup) = (parts.primary.unwrap(), parts.backup.unwrap());
        for id in c.node_ids() {
            let name = c.node_name(id).unwrap();
            let state = if id == primary { NodeState::Down } else { NodeState::Draining };
            c.set_node_state(&name, state).unwrap();
        }
        let r = c.route_token(&token).unwrap();
        if r.route.node == primary {
            on_down_primary += 1;
        }
        assert_eq!(r.route.node, backup, "a Draining backup keeps the existing session");
    }
    assert_eq!(on_down_primary, 0);
}

#[test]
fn a_strict_refusal_of_a_token_from_another_cluster_blames_no_node_of_this_one() {
    let other = common::cluster("nodes = X, Y");
    let token = other.session_token("sid-1").unwrap();
    let c = common::cluster("nodes = A, B\nsession.strict = true");
    let e = c.route_token(&token).unwrap_err();
    let text = e.to_string();
    assert!(!text.contains("`A`") && !text.contains("`B`"), "{text}");
    let refusals: u64 = c.metrics().nodes.iter().map(|n| n.strict_refusals).sum();
    assert_eq!(refusals, 0, "no node of this cluster refused anything");
    let session = c.metrics().scopes.iter().find(|s| s.scope == Scope::Session).unwrap().strict_refusals;
    assert_eq!(session, 1);
}

#[test]
fn a_reroute_that_moves_a_context_pin_moves_the_routing_epoch() {
    let c = common::cluster("nodes = A, B, C");
    let ctx = c.new_context_key();
    let pinned = c.pin_context(ctx).unwrap().node;
    let before = c.routing_epoch();
    let req = RouteRequest { context: Some(ctx), ..Default::default() };
    let moved = c.reroute(&req, pinned).unwrap().expect("moved");
    assert_ne!(moved.node, pinned);
    assert_eq!(c.context_pinned_node(ctx), Some(moved.node));
    assert_ne!(c.routing_epoch(), before, "host caches must drop the old route");
}

#[test]
fn contexts_are_live_in_their_own_scope() {
    let c = common::cluster("nodes = A, B, C");
    let sessions: Vec<_> = (0..5).map(|_| c.new_context_key()).collect();
    for k in &sessions {
        c.pin_context_for(*k, Scope::Session).unwrap();
    }
    let tx = c.new_context_key();
    c.pin_context_for(tx, Scope::Transaction).unwrap();
    let live = |s: Scope| c.metrics().scopes.iter().find(|m| m.scope == s).unwrap().live;
    assert_eq!(live(Scope::Session), 5);
    assert_eq!(live(Scope::Transaction), 1);
    assert_eq!(live(Scope::Thread), 0);
    c.unpin_context(sessions[0]);
    c.release_context(sessions[1]);
    assert_eq!(live(Scope::Session), 3);
    c.close();
    assert_eq!((live(Scope::Session), live(Scope::Transaction), live(Scope::Thread)), (0, 0, 0));
}

/// [core-review-3] "Decide and test": a host that caches a transaction- or
/// session-scoped context's route says which scope its hits are for, and
/// the core credits that scope (the context counted them there when it
/// answered). The scope-less call stays the thread scope's.
#[test]
fn host_hits_are_counted_in_the_scope_the_host_names() {
    let c = common::cluster("nodes = A, B, C");
    let ctx = c.new_context_key();
    let node = c.pin_context_for(ctx, Scope::Transaction).unwrap().node;
    let hits = |s: Scope| c.metrics().scopes.iter().find(|m| m.scope == s).unwrap().hits;
    let node_hits = || c.metrics().nodes[node.0 as usize].affinity_hits;
    let before = [Scope::Thread, Scope::Transaction, Scope::Session].map(hits);
    let on_node = node_hits();

    c.count_host_hits_for(node, Scope::Transaction, 5).unwrap();
    c.count_host_hits_for(node, Scope::Session, 3).unwrap();
    c.count_host_hits(node, 2).unwrap();
    assert_eq!(
        [Scope::Thread, Scope::Transaction, Scope::Session].map(hits),
        [before[0] + 2, before[1] + 5, before[2] + 3]
    );
    assert_eq!(node_hits(), on_node + 10);

    // No context pin follows the data scope's rules: refused, nothing counted.
    let e = c.count_host_hits_for(node, Scope::Data, 4).unwrap_err();
    assert_eq!(e.kind(), racaffinity::ErrorKind::InvalidArgument, "{e}");
    assert_eq!(hits(Scope::Data), 0);
    assert_eq!(node_hits(), on_node + 10);
}
