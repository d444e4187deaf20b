//! Immutable topology snapshots.
//!
//! Picks load the current snapshot without taking a lock; adding or removing a
//! node builds a new snapshot with a new epoch and swaps it in.

use std::collections::HashMap;
use std::sync::Arc;

use crate::node::{Node, NodeId};

/// How many bytes of node names an unknown-node message lists.
pub(crate) const KNOWN_NAMES_BYTES: usize = 200;

/// One version of the node set.
#[derive(Debug)]
pub(crate) struct Topology {
    pub epoch: u64,
    /// Nodes currently in the cluster, in id order.
    pub live: Vec<Arc<Node>>,
    /// Every node ever added, indexed by id; removed ones stay so late lease
    /// releases and registry entries still resolve.
    pub by_id: Vec<Arc<Node>>,
    /// Upper-cased name → id of live nodes (Oracle instance names are case-insensitive).
    pub by_name: HashMap<String, NodeId>,
}

impl Topology {
    pub fn empty() -> Topology {
        Topology { epoch: 0, live: Vec::new(), by_id: Vec::new(), by_name: HashMap::new() }
    }

    pub fn with_added(&self, node: Arc<Node>) -> Topology {
        let mut by_id = self.by_id.clone();
        debug_assert_eq!(by_id.len(), node.id().0 as usize);
        by_id.push(node.clone());
        let mut live = self.live.clone();
        live.push(node.clone());
        let mut by_name = self.by_name.clone();
        by_name.insert(node.name().to_ascii_uppercase(), node.id());
        Topology { epoch: self.epoch + 1, live, by_id, by_name }
    }

    pub fn with_removed(&self, id: NodeId) -> Topology {
        let live: Vec<_> = self.live.iter().filter(|n| n.id() != id).cloned().collect();
        let by_name = self.by_name.iter().filter(|(_, v)| **v != id).map(|(k, v)| (k.clone(), *v)).collect();
        Topology { epoch: self.epoch + 1, live, by_id: self.by_id.clone(), by_name }
    }

    #[inline]
    pub fn node(&self, id: NodeId) -> Option<&Arc<Node>> {
        self.by_id.get(id.0 as usize)
    }

    /// [`Topology::find`], or an error that lists the live nodes (at most
    /// about [`KNOWN_NAMES_BYTES`] of names, then how many more).
    pub fn find_or_unknown(&self, name: &str) -> crate::error::Result<&Arc<Node>> {
        self.find(name).ok_or_else(|| {
            let mut known = String::new();
            for (i, n) in self.live.iter().enumerate() {
                if known.len() + n.name().len() > KNOWN_NAMES_BYTES {
                    known.push_str(&format!(", … and {} more", self.live.len() - i));
                    break;
                }
                if i > 0 {
                    known.push_str(", ");
                }
                known.push_str(n.name());
            }
            crate::error::Error::UnknownNodeName { name: name.to_string(), known }
        })
    }

    pub fn find(&self, name: &str) -> Option<&Arc<Node>> {
        let id = if name.bytes().any(|b| b.is_ascii_lowercase()) {
            self.by_name.get(&name.to_ascii_uppercase())
        } else {
            self.by_name.get(name)
        }?;
        self.node(*id)
    }
}
