#![allow(dead_code)]
//! Helpers shared by the integration tests.

use racaffinity::{Cluster, ClusterBuilder, Config, ManualClock, NodeId, NodeState, Result, Route};

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
