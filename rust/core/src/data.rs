//! Data affinity (seed 002's RAC data affinity): key → partition → node.
//!
//! Partition owners come from, in order: an explicit map entry, a registry
//! entry (balanced placement), or rendezvous hashing over the cluster's nodes
//! (the default, stateless and identical in every process). The owner is
//! computed over all configured nodes, not just healthy ones, so a node that
//! goes down keeps its partitions and they come back with it; meanwhile soft
//! mode falls back to load balancing and strict mode refuses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::cluster::Cluster;
use crate::config::{DataConfig, Placement};
use crate::error::{Error, Result, Scope};
use crate::hash;
use crate::node::NodeId;
use crate::rendezvous::{self, Weights};
use crate::route::{Route, RouteKind};
use crate::session::check_key;
use crate::sharded::Sharded;
use crate::topology::Topology;

pub(crate) struct DataMap {
    partitions: u32,
    /// Set once any explicit entry exists, so the common no-map case skips
    /// loading the map on every route.
    has_explicit: AtomicBool,
    /// Explicit entries name the node, not its id: a node removed and added
    /// again gets a new id but is the same instance.
    explicit: ArcSwap<HashMap<u32, Box<str>>>,
    placed: Sharded<u32, NodeId>,
}

impl DataMap {
    pub fn new(cfg: &DataConfig, topo: &Topology) -> Result<Self> {
        let mut explicit = HashMap::new();
        for (p, name) in &cfg.map {
            let n = topo.find(name).ok_or_else(|| Error::UnknownNode(name.clone()))?;
            explicit.insert(*p, n.name().into());
        }
        Ok(DataMap {
            partitions: cfg.partitions,
            has_explicit: AtomicBool::new(!explicit.is_empty()),
            explicit: ArcSwap::from_pointee(explicit),
            placed: Sharded::new(),
        })
    }

    pub fn placed_len(&self) -> usize {
        self.placed.len()
    }

    pub fn clear_placed(&self) {
        self.placed.drain();
    }
}

/// A key for data affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataKey<'a> {
    /// Raw bytes (strings are their UTF-8 bytes).
    Bytes(&'a [u8]),
    /// An integer key, hashed as its 8 little-endian bytes.
    Int(i64),
}

impl Cluster {
    /// Number of data partitions.
    pub fn partitions(&self) -> u32 {
        self.inner.data.partitions
    }

    /// The partition a key falls in.
    pub fn partition_of(&self, key: DataKey<'_>) -> Result<u32> {
        let h = match key {
            DataKey::Bytes(b) => {
                check_key("data key", b)?;
                hash::hash_bytes(b)
            }
            DataKey::Int(i) => hash::hash_i64(i),
        };
        Ok((h % u64::from(self.inner.data.partitions)) as u32)
    }

    /// The node that owns `partition`, ignoring node state.
    pub fn partition_owner(&self, partition: u32) -> Result<NodeId> {
        let topo = self.topo();
        self.owner_of(&topo, partition)?.ok_or(Error::NoNodeAvailable { scope: Some(Scope::Data) })
    }

    /// The partition's owner: its explicit entry while that node is in the
    /// cluster, else its remembered placement (balanced) while that node is
    /// in the cluster, else rendezvous over every live node. `None` means a
    /// balanced partition not placed yet.
    fn owner_of(&self, topo: &Topology, partition: u32) -> Result<Option<NodeId>> {
        let d = &self.inner.data;
        if partition >= d.partitions {
            return Err(Error::InvalidArgument(format!("partition {partition} out of range 0..{}", d.partitions)));
        }
        if d.has_explicit.load(Ordering::Acquire) {
            if let Some(n) = d.explicit.load().get(&partition).and_then(|name| topo.find(name)) {
                return Ok(Some(n.id()));
            }
        }
        if self.inner.config.data.placement == Placement::Balanced {
            return Ok(d.placed.lock(&partition).get(&partition).copied().filter(|id| !is_removed(topo, *id)));
        }
        Ok(rendezvous::owner(&topo.live, hash::hash_i64(i64::from(partition)), Weights::Static, |_| true)
            .map(|n| n.id()))
    }

    /// The owner of `key`'s partition, whatever its state.
    pub(crate) fn data_owner(&self, key: DataKey<'_>) -> Result<Option<NodeId>> {
        let p = self.partition_of(key)?;
        self.owner_of(&self.topo(), p)
    }

    /// Routes a byte key (a sharding key).
    pub fn route_key(&self, key: &[u8]) -> Result<Route> {
        self.route_data(DataKey::Bytes(key))
    }

    /// Routes an integer key.
    pub fn route_key_i64(&self, key: i64) -> Result<Route> {
        self.route_data(DataKey::Int(key))
    }

    /// Routes a data key to its partition's owner, falling back to load
    /// balancing (soft) or refusing (strict) when the owner cannot take it.
    pub fn route_data(&self, key: DataKey<'_>) -> Result<Route> {
        let p = self.partition_of(key)?;
        let topo = self.topo();
        let route = match self.owner_of(&topo, p)? {
            Some(id) => {
                let node = topo.node(id).expect("ids are never dropped");
                // Soft mode moves work off a draining owner, as a drain intends;
                // strict mode keeps it there, since the data still lives there.
                let strict = self.is_strict(Scope::Data);
                if node.accepts_new() || (strict && node.accepts_existing()) {
                    Route::new(id, RouteKind::Affinity)
                } else if strict {
                    return Err(self.refuse(Scope::Data, node));
                } else {
                    let (id, panic) = self.balanced_in(&topo, Some(Scope::Data), |_| true)?;
                    Route::new(id, if panic { RouteKind::Panic } else { RouteKind::Fallback })
                }
            }
            None => {
                let mut m = self.inner.data.placed.lock(&p);
                match m.get(&p) {
                    // Placed by another thread since `owner_of` looked.
                    Some(id) if !is_removed(&topo, *id) => Route::new(*id, RouteKind::Affinity),
                    _ => {
                        let (id, kind) = self.place(&topo, Scope::Data, Placement::Balanced, 0, |_| true)?;
                        m.insert(p, id);
                        Route::new(id, kind)
                    }
                }
            }
        };
        self.count(&topo, Some(Scope::Data), route);
        Ok(route)
    }

    /// Maps `partition` to `node` explicitly (overrides placement).
    pub fn set_partition(&self, partition: u32, node: &str) -> Result<()> {
        let topo = self.topo();
        if partition >= self.inner.data.partitions {
            return Err(Error::InvalidArgument(format!(
                "partition {partition} out of range 0..{}",
                self.inner.data.partitions
            )));
        }
        let name: Box<str> = topo.find(node).ok_or_else(|| Error::UnknownNode(node.to_string()))?.name().into();
        self.inner.data.explicit.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.insert(partition, name.clone());
            Arc::new(m)
        });
        self.inner.data.has_explicit.store(true, Ordering::Release);
        Ok(())
    }

    /// Removes an explicit mapping; returns whether there was one.
    pub fn clear_partition(&self, partition: u32) -> bool {
        let mut had = false;
        self.inner.data.explicit.rcu(|m| {
            let mut m = HashMap::clone(m);
            had = m.remove(&partition).is_some();
            Arc::new(m)
        });
        had
    }

    pub(crate) fn data_affinities(&self) -> usize {
        self.inner.data.explicit.load().len() + self.inner.data.placed_len()
    }
}

fn is_removed(topo: &Topology, id: NodeId) -> bool {
    topo.node(id).is_none_or(|n| n.is_removed())
}
