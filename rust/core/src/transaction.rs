//! Transaction (XA gtrid) affinity: every branch of a global transaction, and
//! its two-phase commit, goes to the node that holds it (seed 000).

use crate::cluster::Cluster;
use crate::error::{Error, Result, Scope};
use crate::hash;
use crate::node::{Node, NodeId, NodeState};
use crate::route::{Route, RouteKind};
use crate::sharded::Sharded;

/// XA's MAXGTRIDSIZE: longer ids cannot come from a conforming TM.
pub const MAX_GTRID_BYTES: usize = 64;

/// 8 bytes, so a million live transactions stay well inside the memory
/// budget even with 64-byte gtrids: the prepared flag is the top bit of the
/// branch count.
#[derive(Debug, Clone, Copy)]
struct TxEntry {
    node: NodeId,
    state: u32,
}

const PREPARED: u32 = 1 << 31;

impl TxEntry {
    fn new(node: NodeId, branches: u32, prepared: bool) -> Self {
        TxEntry { node, state: branches | if prepared { PREPARED } else { 0 } }
    }
    fn branches(&self) -> u32 {
        self.state & !PREPARED
    }
    fn prepared(&self) -> bool {
        self.state & PREPARED != 0
    }
    fn set_prepared(&mut self) {
        self.state |= PREPARED;
    }
    fn add_branch(&mut self) {
        // Saturates far beyond any real branch count rather than spilling
        // into the prepared bit.
        if self.branches() < PREPARED - 1 {
            self.state += 1;
        }
    }
    fn end_branch(&mut self) -> u32 {
        if self.branches() > 0 {
            self.state -= 1;
        }
        self.branches()
    }
}

/// Registry of live global transactions.
pub(crate) struct TxRegistry {
    map: Sharded<Box<[u8]>, TxEntry>,
}

impl TxRegistry {
    pub fn new() -> Self {
        TxRegistry { map: Sharded::new() }
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

fn check_gtrid(gtrid: &[u8]) -> Result<()> {
    if gtrid.is_empty() || gtrid.len() > MAX_GTRID_BYTES {
        return Err(Error::InvalidArgument(format!("gtrid must be 1..={MAX_GTRID_BYTES} bytes, got {}", gtrid.len())));
    }
    Ok(())
}

/// Hex form of a gtrid for messages.
pub(crate) fn hex(gtrid: &[u8]) -> String {
    gtrid.iter().map(|b| format!("{b:02x}")).collect()
}

/// A transaction's registry entry, as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxInfo {
    /// Owning node.
    pub node: NodeId,
    /// Open branches (begin/join minus end).
    pub branches: u32,
    /// Whether a branch was prepared (or the id came from recovery).
    pub prepared: bool,
}

impl Cluster {
    /// Begins or joins a branch of `gtrid`: the first branch places the
    /// transaction, every later one (from any thread) gets the same node.
    pub fn tx_begin(&self, gtrid: &[u8]) -> Result<Route> {
        self.tx_begin_on(gtrid, None)
    }

    /// Like [`Cluster::tx_begin`], but a *new* gtrid goes to `preferred` if it
    /// accepts new work (hosts pass the current thread pin here).
    pub fn tx_begin_on(&self, gtrid: &[u8], preferred: Option<NodeId>) -> Result<Route> {
        check_gtrid(gtrid)?;
        let topo = self.topo();
        let mut m = self.inner.tx.map.lock(gtrid);
        let route = if let Some(e) = m.get_mut(gtrid) {
            let node = topo.node(e.node).expect("ids are never dropped");
            if node.accepts_existing() {
                e.add_branch();
                Route::new(e.node, RouteKind::Affinity)
            } else if e.prepared() {
                return Err(prepared_unavailable(node));
            } else if self.is_strict(Scope::Transaction) {
                return Err(self.refuse(Scope::Transaction, node));
            } else {
                let (id, _) = self.tx_place(&topo, gtrid, None)?;
                e.node = id;
                e.add_branch();
                Route::new(id, RouteKind::Repinned)
            }
        } else {
            let (id, kind) = self.tx_place(&topo, gtrid, preferred)?;
            m.insert(gtrid.into(), TxEntry::new(id, 1, false));
            Route::new(id, kind)
        };
        drop(m);
        self.count(&topo, Some(Scope::Transaction), route);
        Ok(route)
    }

    fn tx_place(
        &self,
        topo: &crate::topology::Topology,
        gtrid: &[u8],
        preferred: Option<NodeId>,
    ) -> Result<(NodeId, RouteKind)> {
        if let Some(p) = preferred.and_then(|p| topo.node(p)) {
            if p.accepts_new(self.clock(), self.health(), false) {
                return Ok((p.id(), RouteKind::Placed));
            }
        }
        let placement = self.inner.config.transaction.placement;
        self.place(topo, Scope::Transaction, placement, hash::hash_bytes(gtrid), |_| true)
    }

    /// Where 2PC commands (prepare, commit, rollback, forget) for `gtrid` go.
    ///
    /// Never moves the transaction: a branch exists only on its node, so an
    /// unavailable owner is an error even in soft mode.
    pub fn tx_route(&self, gtrid: &[u8]) -> Result<Route> {
        check_gtrid(gtrid)?;
        let topo = self.topo();
        let e = *self.inner.tx.map.lock(gtrid).get(gtrid).ok_or_else(|| Error::UnknownTransaction(hex(gtrid)))?;
        let node = topo.node(e.node).expect("ids are never dropped");
        if !node.accepts_existing() {
            return Err(if e.prepared() {
                prepared_unavailable(node)
            } else if self.is_strict(Scope::Transaction) {
                self.refuse(Scope::Transaction, node)
            } else {
                // Soft mode would re-pin a *new* branch (`tx_begin`), but a 2PC
                // command is for work that exists only on the lost node; it is
                // refused without counting as a strict refusal.
                Error::StrictAffinity {
                    scope: Scope::Transaction,
                    node: node.name().to_string(),
                    state: if node.is_removed() { NodeState::Down } else { node.state() },
                }
            });
        }
        let r = Route::new(e.node, RouteKind::Affinity);
        self.count(&topo, Some(Scope::Transaction), r);
        Ok(r)
    }

    /// Marks a branch of `gtrid` prepared: from now on the transaction never moves.
    pub fn tx_prepared(&self, gtrid: &[u8]) -> Result<NodeId> {
        check_gtrid(gtrid)?;
        let mut m = self.inner.tx.map.lock(gtrid);
        let e = m.get_mut(gtrid).ok_or_else(|| Error::UnknownTransaction(hex(gtrid)))?;
        e.set_prepared();
        Ok(e.node)
    }

    /// Ends one branch (at its commit, rollback or forget); the entry goes
    /// when the last branch ends. Returns the owner.
    pub fn tx_end(&self, gtrid: &[u8]) -> Result<NodeId> {
        check_gtrid(gtrid)?;
        let mut m = self.inner.tx.map.lock(gtrid);
        let e = m.get_mut(gtrid).ok_or_else(|| Error::UnknownTransaction(hex(gtrid)))?;
        let node = e.node;
        if e.end_branch() == 0 {
            m.remove(gtrid);
        }
        Ok(node)
    }

    /// Forgets `gtrid` entirely, whatever its branch count (the whole
    /// transaction completed). Returns the owner.
    pub fn tx_complete(&self, gtrid: &[u8]) -> Result<NodeId> {
        check_gtrid(gtrid)?;
        let e = self.inner.tx.map.lock(gtrid).remove(gtrid).ok_or_else(|| Error::UnknownTransaction(hex(gtrid)))?;
        Ok(e.node)
    }

    /// Records that `node` returned `gtrid` from a recovery scan, so its
    /// commit or rollback goes there. A gtrid already owned by another node is
    /// an error: it would mean a split transaction.
    pub fn tx_recovered(&self, gtrid: &[u8], node: NodeId) -> Result<()> {
        check_gtrid(gtrid)?;
        let topo = self.topo();
        let n = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
        let mut m = self.inner.tx.map.lock(gtrid);
        match m.get_mut(gtrid) {
            Some(e) if e.node != node => Err(Error::InvalidArgument(format!(
                "gtrid {} was returned by `{}` but is owned by `{}`: split transaction",
                hex(gtrid),
                n.name(),
                topo.node(e.node).map(|o| o.name()).unwrap_or("?")
            ))),
            Some(e) => {
                e.set_prepared();
                Ok(())
            }
            None => {
                m.insert(gtrid.into(), TxEntry::new(node, 1, true));
                Ok(())
            }
        }
    }

    /// The registry entry of `gtrid`, if any.
    pub fn tx_info(&self, gtrid: &[u8]) -> Option<TxInfo> {
        self.inner.tx.map.lock(gtrid).get(gtrid).map(|e| TxInfo {
            node: e.node,
            branches: e.branches(),
            prepared: e.prepared(),
        })
    }

    /// Live transaction entries.
    pub fn tx_count(&self) -> usize {
        self.inner.tx.len()
    }
}

fn prepared_unavailable(node: &Node) -> Error {
    Error::PreparedNodeUnavailable {
        node: node.name().to_string(),
        state: if node.is_removed() { NodeState::Down } else { node.state() },
    }
}
