#![allow(dead_code)]
//! Helpers shared by the integration tests.

use racaffinity::{Cluster, ClusterBuilder, Config, ManualClock, NodeId};

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
