//! Transaction (XA gtrid) affinity: every branch of a global transaction, and
//! its two-phase commit, goes to the node that holds it (seed 000).

use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};

use crate::agreement::{self, Agreed, Standing};
use crate::cluster::Cluster;
use crate::config::{Placement, RecoveryScope};
use crate::error::{Error, Result, Scope};
use crate::hash;
use crate::node::{Node, NodeId, NodeState};
use crate::rendezvous::{self, Weights};
use crate::route::{Route, RouteKind};
use crate::sharded::Sharded;
use crate::topology::Topology;

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
/// A second node has reported the gtrid in recovery: its span is counted.
const SPAN_SEEN: u32 = 1 << 30;
const BRANCHES: u32 = SPAN_SEEN - 1;

impl TxEntry {
    fn new(node: NodeId, branches: u32, prepared: bool) -> Self {
        TxEntry { node, state: branches | if prepared { PREPARED } else { 0 } }
    }
    fn branches(&self) -> u32 {
        self.state & BRANCHES
    }
    /// Marks the span seen; true the first time.
    fn see_span(&mut self) -> bool {
        let first = self.state & SPAN_SEEN == 0;
        self.state |= SPAN_SEEN;
        first
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
        if self.branches() < BRANCHES {
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
    pub fn clear(&self) {
        self.map.drain();
    }
}

pub(crate) fn check_gtrid(gtrid: &[u8]) -> Result<()> {
    if gtrid.is_empty() || gtrid.len() > MAX_GTRID_BYTES {
        return Err(Error::InvalidArgument(format!("gtrid must be 1..={MAX_GTRID_BYTES} bytes, got {}", gtrid.len())));
    }
    Ok(())
}

/// Bytes of the longest key [`xa_transaction_key`] makes of a gtrid the
/// `tx_*` calls accept (1..=[`MAX_GTRID_BYTES`]).
pub const MAX_XA_TRANSACTION_KEY_BYTES: usize = MAX_GTRID_BYTES;

/// The key an XA global transaction (`format_id`, `gtrid`) is registered
/// under: what every binding passes as the `gtrid` of the `tx_*` calls for an
/// Xid. XA names a global transaction by format id and gtrid together, so two
/// transaction managers' equal gtrids of different formats must stay two
/// transactions; the key is the format id (4 bytes, big-endian) then the
/// gtrid, or the gtrid's SHA-256 digest when it is over 60 bytes, so the key
/// fits the registry's 64. Built here once so every process, whatever its
/// language, places a transaction alike. A gtrid no conforming TM makes
/// (empty, or over 64 bytes) comes back as it is, so the `tx_*` call given it
/// refuses it with its usual error. Changing these bytes moves live
/// transactions between processes of two versions (docs/semantics.md).
pub fn xa_transaction_key(format_id: i32, gtrid: &[u8]) -> Vec<u8> {
    if gtrid.is_empty() || gtrid.len() > MAX_GTRID_BYTES {
        return gtrid.to_vec();
    }
    let mut key = Vec::with_capacity(MAX_XA_TRANSACTION_KEY_BYTES);
    key.extend_from_slice(&format_id.to_be_bytes());
    if gtrid.len() <= MAX_XA_TRANSACTION_KEY_BYTES - 4 {
        key.extend_from_slice(gtrid);
    } else {
        key.extend_from_slice(&Sha256::digest(gtrid));
    }
    key
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
    /// accepts new work (hosts pass the current thread pin, or the node where
    /// the transaction manager placed the gtrid). If it does not, strict mode
    /// refuses ([`Error::StrictAffinity`]: a branch elsewhere would split the
    /// transaction) and soft mode places the gtrid as `tx_begin` does.
    pub fn tx_begin_on(&self, gtrid: &[u8], preferred: Option<NodeId>) -> Result<Route> {
        self.tx_begin_with(gtrid, preferred.map(Preferred::Required))
    }

    /// [`Cluster::tx_begin_on`] with where the preferred node came from.
    pub(crate) fn tx_begin_with(&self, gtrid: &[u8], preferred: Option<Preferred>) -> Result<Route> {
        check_gtrid(gtrid)?;
        let mut m = self.inner.tx.map.lock(gtrid);
        // Loaded under the lock (see `registry_topo`).
        let topo = self.registry_topo();
        if let Some(p) = preferred.map(Preferred::node).filter(|p| topo.node(*p).is_none()) {
            return Err(Error::UnknownNode(format!("#{}", p.0)));
        }
        let route = if let Some(e) = m.get_mut(gtrid) {
            let route = self.tx_follow(&topo, gtrid, e)?;
            e.add_branch();
            route
        } else {
            let (id, kind) = self.tx_place(&topo, gtrid, preferred)?;
            m.insert(gtrid.into(), TxEntry::new(id, 1, false));
            Route::new(id, kind)
        };
        drop(m);
        self.count(&topo, Some(Scope::Transaction), route);
        Ok(route)
    }

    /// Where new work of an existing transaction goes: its node while that
    /// node keeps its work; else a prepared transaction is stuck, strict mode
    /// refuses, and soft mode moves it (UCP's soft affinity), so the
    /// transaction now spans two nodes: counted on the node it left, and the
    /// host's XA layer keeps each branch's 2PC on its own node.
    fn tx_follow(&self, topo: &Topology, gtrid: &[u8], e: &mut TxEntry) -> Result<Route> {
        let node = topo.node(e.node).expect("ids are never dropped");
        if node.accepts_existing(self.clock()) {
            return Ok(Route::new(e.node, RouteKind::Affinity));
        }
        if e.prepared() {
            return Err(prepared_unavailable(node));
        }
        if self.is_strict(Scope::Transaction) {
            return Err(self.refuse(Scope::Transaction, node));
        }
        let (id, _) = self.tx_place(topo, gtrid, None)?;
        if id != e.node {
            node.counters.tx_spans.fetch_add(1, Ordering::Relaxed);
        }
        e.node = id;
        Ok(Route::new(id, RouteKind::Repinned))
    }

    fn tx_place(&self, topo: &Topology, gtrid: &[u8], preferred: Option<Preferred>) -> Result<(NodeId, RouteKind)> {
        let strict = self.is_strict(Scope::Transaction);
        match preferred.and_then(|p| topo.node(p.node()).map(|n| (p, n))) {
            // Whoever placed the gtrid first (a transaction manager passing
            // it on, as WebLogic propagates its affinity context) uses this
            // node: in strict mode a branch anywhere else would split it.
            Some((Preferred::Required(_), n)) if n.accepts_new() => return Ok((n.id(), RouteKind::Placed)),
            Some((Preferred::Required(_), n)) if strict => return Err(self.refuse(Scope::Transaction, n)),
            Some((Preferred::Agreed(_), n)) if n.accepts_new() => return Ok((n.id(), RouteKind::Placed)),
            Some((Preferred::Agreed(_), n)) => return Err(self.unconfirmed(n)),
            // A node this process derived from its own view (a data key's
            // owner, a session's or a pin's node): in strict mode it is acted
            // on only once its last change has settled, like a placement.
            Some((Preferred::Derived(_), n)) if strict && !n.new_work_settled(self.settle_ms()) => {
                return Err(self.settling(n));
            }
            Some((_, n)) if n.accepts_new() => return Ok((n.id(), RouteKind::Placed)),
            _ => {}
        }
        let placement = self.inner.config.transaction.placement;
        if strict && placement == Placement::Rendezvous {
            return self.place_settled(topo, gtrid);
        }
        self.place(topo, Scope::Transaction, placement, hash::hash_bytes(gtrid), |_| true)
    }

    /// Strict rendezvous placement that processes agree on while shared
    /// inputs (FAN events, versioned operator calls, weights, nodes added or
    /// removed) have reached some of them and not others: the gtrid is
    /// placed only when every view a process may hold within
    /// `transaction.settle` puts it on the same node ([`agreement`]), else
    /// it is refused (a process that has not seen the change yet would place
    /// it elsewhere).
    ///
    /// Only shared inputs move a gtrid: a node that fails in this process's
    /// own view alone (missed heartbeats, passive ejection, an operator's
    /// plain call) keeps its gtrids, refused here, since the other processes
    /// still place them there. With no settle time the process places alone
    /// and its own view is all there is.
    pub(crate) fn place_settled(&self, topo: &Topology, gtrid: &[u8]) -> Result<(NodeId, RouteKind)> {
        let settle = self.settle_ms();
        let h = hash::hash_bytes(gtrid);
        if settle == 0 {
            return self.place_rendezvous(topo, Scope::Transaction, h, |_| true);
        }
        // Over every node ever added (`by_id`): one removed within the
        // settle time still counts, as other processes may still have it.
        match agreement::agreed_owner(&topo.by_id, h, settle, |n| shared_standing(n, settle)) {
            Agreed::Owner(n) => {
                // The same rule on this process's settled view, as a check
                // against rounding in the bounds: any doubt refuses.
                let current = rendezvous::owner(&topo.by_id, h, Weights::Static, |n| n.accepts_new_shared());
                if current.is_none_or(|c| c.id() != n.id()) {
                    Err(self.settling(n))
                } else if n.accepts_new() {
                    Ok((n.id(), RouteKind::Placed))
                } else {
                    Err(self.unconfirmed(n))
                }
            }
            Agreed::Unsettled(n) => Err(self.settling(n)),
            // Every node has refused new work for long enough: the panic
            // policy, over every member, with the same guard (weights and
            // membership still change).
            Agreed::Nobody => self.place_panic_agreed(topo, h, settle),
        }
    }

    /// The panic policy's placement of a new strict gtrid when no node
    /// takes new work in any process: rendezvous over every member, guarded
    /// like [`Cluster::place_settled`].
    fn place_panic_agreed(&self, topo: &Topology, h: u64, settle: u64) -> Result<(NodeId, RouteKind)> {
        if self.inner.balancer.panic == crate::balance::PanicPolicy::Fail {
            return Err(Error::NoNodeAvailable { scope: Some(Scope::Transaction) });
        }
        match agreement::agreed_owner(&topo.by_id, h, settle, |n| member_standing(n, settle)) {
            Agreed::Owner(n) => {
                let current = rendezvous::owner(&topo.live, h, Weights::Static, |_| true);
                if current.is_some_and(|c| c.id() == n.id()) {
                    Ok((n.id(), RouteKind::Panic))
                } else {
                    Err(self.settling(n))
                }
            }
            Agreed::Unsettled(n) => Err(self.settling(n)),
            Agreed::Nobody => Err(Error::NoNodeAvailable { scope: Some(Scope::Transaction) }),
        }
    }

    fn settle_ms(&self) -> u64 {
        self.inner.config.transaction.settle_ms
    }

    /// Counts and builds the refusal of a gtrid whose node changed within
    /// `transaction.settle`.
    pub(crate) fn settling(&self, n: &Node) -> Error {
        self.refuse(Scope::Transaction, n);
        Error::StrictSettling {
            node: n.name().to_string(),
            state: n.state(),
            since_ms: n.new_work_changed_ago_ms(),
            settle_ms: self.settle_ms(),
        }
    }

    /// Counts and builds the refusal of a gtrid whose node fails in this
    /// process's own view only.
    fn unconfirmed(&self, n: &Node) -> Error {
        self.refuse(Scope::Transaction, n);
        Error::StrictUnconfirmed { node: n.name().to_string(), state: n.state(), cause: n.down_cause() }
    }

    /// Where new work of an existing transaction goes when the host asks
    /// without beginning a branch ([`Cluster::route`] with a transaction):
    /// like a branch begin, a lost node moves it in soft mode.
    pub(crate) fn tx_work_route(&self, gtrid: &[u8]) -> Result<Route> {
        check_gtrid(gtrid)?;
        let mut m = self.inner.tx.map.lock(gtrid);
        let topo = self.registry_topo();
        let e = m.get_mut(gtrid).ok_or_else(|| Error::UnknownTransaction(hex(gtrid)))?;
        let route = self.tx_follow(&topo, gtrid, e)?;
        drop(m);
        self.count(&topo, Some(Scope::Transaction), route);
        Ok(route)
    }

    /// Where 2PC commands (prepare, commit, rollback, forget) for `gtrid` go.
    ///
    /// Never refused for routing reasons, whatever the node's state or the
    /// strict switch: with `recovery.scope = node` a branch exists only on
    /// its node, so that is where the command goes, and an unreachable node
    /// shows up as the host's connection error (XA's `XAER_RMFAIL`: retry
    /// later), never as a refusal the transaction manager could read as
    /// "nothing to do". With `recovery.scope = database` (RAC: every instance
    /// sees every branch) a command for a node that cannot take it goes to
    /// another instance, the same one in every process.
    pub fn tx_route(&self, gtrid: &[u8]) -> Result<Route> {
        check_gtrid(gtrid)?;
        let e = *self.inner.tx.map.lock(gtrid).get(gtrid).ok_or_else(|| Error::UnknownTransaction(hex(gtrid)))?;
        let topo = self.registry_topo();
        let node = topo.node(e.node).expect("ids are never dropped");
        let mut r = Route::new(e.node, RouteKind::Affinity);
        if self.recovery_scope() == RecoveryScope::Database && !node.accepts_existing(self.clock()) {
            if let Some(other) = rendezvous::owner(&topo.live, hash::hash_bytes(gtrid), Weights::Static, |n| {
                n.accepts_existing(self.clock())
            }) {
                r = Route::new(other.id(), RouteKind::Repinned);
            }
        }
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
    /// commit or rollback goes there.
    ///
    /// With `recovery.scope = node`, a gtrid already owned by another node is
    /// an error: it would mean a split transaction. Two exceptions are not
    /// splits: the owner was removed and re-added under the same name, and,
    /// with `recovery.scope = database`, every instance of the one database
    /// reports every in-doubt id (the first one to report keeps it).
    pub fn tx_recovered(&self, gtrid: &[u8], node: NodeId) -> Result<()> {
        check_gtrid(gtrid)?;
        let mut m = self.inner.tx.map.lock(gtrid);
        let topo = self.registry_topo();
        let n = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
        match m.get_mut(gtrid) {
            Some(e) if e.node != node => {
                let owner = topo.node(e.node).expect("ids are never dropped");
                if owner.is_removed() && owner.name().eq_ignore_ascii_case(n.name()) {
                    e.node = node;
                } else if self.recovery_scope() != RecoveryScope::Database {
                    // Branches of one gtrid on two independent databases: a
                    // span made by processes whose views differed (or without
                    // affinity), seen here where recovery meets both. Counted
                    // once per gtrid, however many scans report it.
                    if e.see_span() {
                        owner.counters.tx_spans.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(Error::InvalidArgument(format!(
                        "gtrid {} was returned by `{}` but is owned by `{}`: split transaction",
                        hex(gtrid),
                        n.name(),
                        owner.name()
                    )));
                }
                e.set_prepared();
                Ok(())
            }
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

    /// Whether the nodes are independent databases or instances of one.
    pub fn recovery_scope(&self) -> RecoveryScope {
        self.inner.config.recovery_scope
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

/// Where a new gtrid's preferred node came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Preferred {
    /// Given by the caller: the node a transaction manager placed it on.
    Required(NodeId),
    /// Derived from this process's own view: a data key's owner, a
    /// session's or a pin's node.
    Derived(NodeId),
    /// Derived from shared inputs every process agrees on (a data key's
    /// owner after `transaction.settle`): taken if this process's own view
    /// lets it take new work, else refused in strict mode.
    Agreed(NodeId),
}

impl Preferred {
    pub(crate) fn node(self) -> NodeId {
        match self {
            Preferred::Required(n) | Preferred::Derived(n) | Preferred::Agreed(n) => n,
        }
    }
}

/// A node's standing as a member (added, not removed), as every process
/// may see it within `settle_ms`.
pub(crate) fn member_standing(n: &Node, settle_ms: u64) -> Standing {
    match (n.is_removed(), n.member_settled(settle_ms)) {
        (_, false) => Standing::Changing,
        (true, true) => Standing::Ineligible,
        (false, true) => Standing::Eligible,
    }
}

/// A node's standing for new work by the shared inputs, as every process
/// may see it within `settle_ms`.
pub(crate) fn shared_standing(n: &Node, settle_ms: u64) -> Standing {
    match (n.accepts_new_shared(), n.new_work_settled(settle_ms)) {
        (_, false) => Standing::Changing,
        (true, true) => Standing::Eligible,
        (false, true) => Standing::Ineligible,
    }
}
