//! Data affinity (seed 002's RAC data affinity): key → partition → node.
//!
//! Partition owners come from, in order: an explicit map entry, a registry
//! entry (balanced placement), or rendezvous hashing over the cluster's nodes
//! (the default, stateless and identical in every process). The owner is
//! computed over all configured nodes, not just healthy ones, so a node that
//! goes down keeps its partitions and they come back with it; meanwhile soft
//! mode falls back to load balancing and strict mode refuses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;

use crate::agreement::{self, Agreed, Standing};
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
    /// Explicit entries, swapped as a whole so a route never sees half of
    /// a replacement.
    explicit: ArcSwap<PartitionMap>,
    placed: Sharded<u32, NodeId>,
    /// Loads of the map that failed (the last good map stayed).
    load_failures: AtomicU64,
    /// The last failed load: `<source>: <error>` (empty: none yet).
    last_load_error: Mutex<String>,
    /// Rendezvous owners already computed, valid for one routing epoch.
    owners: ArcSwap<OwnerCache>,
    /// Maps replaced recently, with when: other processes may still route
    /// by them until `transaction.settle` has passed.
    replaced: Mutex<Vec<(u64, Arc<PartitionMap>)>>,
}

/// Rendezvous owners per partition, filled on first use. Hashing a partition
/// over every node is linear in nodes (600 ns at 256 nodes); the owner only
/// changes with the node set or a weight, and each advances the routing
/// epoch, so one table per epoch turns a route into a lookup.
struct OwnerCache {
    epoch: u64,
    /// `NO_OWNER`: not computed yet (or no node).
    slots: Box<[std::sync::atomic::AtomicU32]>,
}

const NO_OWNER: u32 = u32::MAX;

/// Above this many partitions the table (4 bytes each, rebuilt per epoch)
/// is not kept and every route hashes.
const MAX_CACHED_PARTITIONS: u32 = 1 << 16;

impl OwnerCache {
    fn new(epoch: u64, partitions: u32) -> OwnerCache {
        let n = if partitions <= MAX_CACHED_PARTITIONS { partitions as usize } else { 0 };
        OwnerCache { epoch, slots: (0..n).map(|_| std::sync::atomic::AtomicU32::new(NO_OWNER)).collect() }
    }
}

/// The explicit partition → node map. Entries name the node, not its id: a
/// node removed and added again gets a new id but is the same instance.
#[derive(Debug, Clone, Default)]
struct PartitionMap {
    entries: HashMap<u32, Box<str>>,
    /// Bumped by every change, so hosts and metrics can tell maps apart.
    epoch: u64,
    /// Who set it: `config`, `set_partition`, or the loader's name.
    source: Box<str>,
    /// The versioned replacement it came from: (version, content hash).
    key: Option<(u64, u64)>,
}

impl PartitionMap {
    /// The entry of `partition`, upper-cased as placement compares names.
    fn entry(&self, partition: u32) -> Option<String> {
        self.entries.get(&partition).map(|n| n.to_ascii_uppercase())
    }

    /// A digest of the entries alone (names upper-cased), the same in every
    /// process that holds the same map.
    fn content_hash(entries: &HashMap<u32, Box<str>>) -> u64 {
        let mut sorted: Vec<(u32, String)> = entries.iter().map(|(p, n)| (*p, n.to_ascii_uppercase())).collect();
        sorted.sort_unstable();
        let mut text = String::with_capacity(sorted.len() * 12);
        for (p, n) in sorted {
            text.push_str(&p.to_string());
            text.push('=');
            text.push_str(&n);
            text.push(';');
        }
        hash::hash_bytes(text.as_bytes())
    }
}

/// The owner of a partition as every process sees it within the settle time.
pub(crate) enum KeyOwner {
    /// Every process routes the partition to this node.
    Node(Arc<crate::node::Node>),
    /// A recent change (map, node set, weight) leaves it open.
    Unsettled(Arc<crate::node::Node>),
    /// No agreed owner (balanced placement, or no node).
    None,
}

/// Longest accepted partition-map source name.
pub const MAX_SOURCE_BYTES: usize = 64;

/// Longest load error kept for the metrics (longer ones are cut).
const MAX_LOAD_ERROR_BYTES: usize = 512;

impl DataMap {
    pub fn new(cfg: &DataConfig, topo: &Topology) -> Result<Self> {
        let mut explicit = HashMap::new();
        for (p, name) in &cfg.map {
            let n = topo.find_or_unknown(name)?;
            explicit.insert(*p, n.name().into());
        }
        Ok(DataMap {
            partitions: cfg.partitions,
            has_explicit: AtomicBool::new(!explicit.is_empty()),
            explicit: ArcSwap::from_pointee(PartitionMap {
                entries: explicit,
                epoch: 0,
                source: "config".into(),
                key: None,
            }),
            placed: Sharded::new(),
            load_failures: AtomicU64::new(0),
            last_load_error: Mutex::new(String::new()),
            owners: ArcSwap::from_pointee(OwnerCache::new(0, cfg.partitions)),
            replaced: Mutex::new(Vec::new()),
        })
    }

    pub fn placed_len(&self) -> usize {
        self.placed.len()
    }

    pub fn clear_placed(&self) {
        self.placed.drain();
    }

    /// Locks the shard of placements holding `partition`.
    fn lock_placed(&self, partition: u32) -> MutexGuard<'_, HashMap<u32, NodeId>> {
        #[cfg(test)]
        tests::before_placement_lock();
        self.placed.lock(&partition)
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
        self.current_owner(partition)?.ok_or(Error::NoNodeAvailable { scope: Some(Scope::Data) })
    }

    /// [`Cluster::owner_of`] in a snapshot loaded under the partition's
    /// placement lock when placement is balanced (see
    /// [`Cluster::registry_topo`]): a snapshot loaded before it may predate
    /// a node that another thread added and placed the partition on.
    fn current_owner(&self, partition: u32) -> Result<Option<NodeId>> {
        let placed = self.balanced_placement().then(|| self.inner.data.lock_placed(partition));
        let topo = self.registry_topo();
        self.owner_of(&topo, partition, placed.as_deref())
    }

    fn balanced_placement(&self) -> bool {
        self.inner.config.data.placement == Placement::Balanced
    }

    /// The partition's owner: its explicit entry while that node is in the
    /// cluster, else its remembered placement (balanced) while that node is
    /// in the cluster, else rendezvous over every live node. `None` means a
    /// balanced partition not placed yet. `placed`: the partition's shard of
    /// placements, locked before `topo` was loaded (balanced placement).
    fn owner_of(
        &self,
        topo: &Topology,
        partition: u32,
        placed: Option<&HashMap<u32, NodeId>>,
    ) -> Result<Option<NodeId>> {
        let d = &self.inner.data;
        if partition >= d.partitions {
            return Err(Error::InvalidArgument(format!("partition {partition} out of range 0..{}", d.partitions)));
        }
        if d.has_explicit.load(Ordering::Acquire) {
            if let Some(n) = d.explicit.load().entries.get(&partition).and_then(|name| topo.find(name)) {
                return Ok(Some(n.id()));
            }
        }
        if self.balanced_placement() {
            let id = match placed {
                Some(m) => m.get(&partition).copied(),
                None => d.lock_placed(partition).get(&partition).copied(),
            };
            return Ok(id.filter(|id| !is_removed(topo, *id)));
        }
        let epoch = self.routing_epoch();
        let mut cache = d.owners.load();
        if cache.epoch != epoch {
            // A route that read the old epoch may still fill the old table:
            // its answer is the one it would have had without the table.
            d.owners.store(Arc::new(OwnerCache::new(epoch, d.partitions)));
            cache = d.owners.load();
        }
        let slot = cache.slots.get(partition as usize);
        // The table may be newer than `topo` (the epoch was read after it):
        // an owner added since is not in `topo`, whose answer is then its own.
        if let Some(id) =
            slot.map(|s| s.load(Ordering::Relaxed)).filter(|&id| id != NO_OWNER && topo.node(NodeId(id)).is_some())
        {
            return Ok(Some(NodeId(id)));
        }
        let owner = rendezvous::owner(&topo.live, hash::hash_i64(i64::from(partition)), Weights::Static, |_| true)
            .map(|n| n.id());
        // `topo` was loaded before `epoch` was read: the answer goes into
        // the table only if no node was added or removed since (weights are
        // read after the epoch, so they are at least as new as it).
        if let (Some(slot), Some(id)) = (slot, owner) {
            if self.topo().epoch == topo.epoch {
                slot.store(id.0, Ordering::Relaxed);
            }
        }
        Ok(owner)
    }

    /// The owner of `key`'s partition, whatever its state.
    pub(crate) fn data_owner(&self, key: DataKey<'_>) -> Result<Option<NodeId>> {
        self.current_owner(self.partition_of(key)?)
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
        // Balanced: the partition's lock is held from before the snapshot
        // to the placement, so an entry on a node added meanwhile is in the
        // snapshot rather than looking removed and being placed again.
        let mut placed = self.balanced_placement().then(|| self.inner.data.lock_placed(p));
        let topo = self.registry_topo();
        let route = match self.owner_of(&topo, p, placed.as_deref())? {
            Some(id) => {
                let node = topo.node(id).expect("ids are never dropped");
                // Soft mode moves work off a draining owner, as a drain intends;
                // strict mode keeps it there, since the data still lives there.
                let strict = self.is_strict(Scope::Data);
                if node.accepts_new() || (strict && node.accepts_existing(self.clock())) {
                    Route::new(id, RouteKind::Affinity)
                } else if strict {
                    return Err(self.refuse(Scope::Data, node));
                } else {
                    let (id, panic) = self.balanced_in(&topo, Some(Scope::Data), |_| true)?;
                    Route::new(id, if panic { RouteKind::Panic } else { RouteKind::Fallback })
                }
            }
            None => {
                // Not placed yet (balanced), or no live node to hash over
                // (then no node can be placed on either).
                let (id, kind) = self.place(&topo, Scope::Data, Placement::Balanced, 0, |_| true)?;
                if let Some(m) = placed.as_mut() {
                    m.insert(p, id);
                }
                Route::new(id, kind)
            }
        };
        drop(placed);
        self.count(&topo, Some(Scope::Data), route);
        Ok(route)
    }

    /// Maps `partition` to `node` explicitly (overrides placement).
    pub fn set_partition(&self, partition: u32, node: &str) -> Result<()> {
        let topo = self.topo();
        self.check_partition(partition)?;
        let name: Box<str> = topo.find_or_unknown(node)?.name().into();
        self.update_map(|m| {
            m.entries.insert(partition, name.clone());
            "set_partition".into()
        });
        Ok(())
    }

    /// Removes an explicit mapping; returns whether there was one. Without
    /// one nothing changes (the map's epoch and source stay).
    pub fn clear_partition(&self, partition: u32) -> bool {
        let mut had = false;
        self.update_map_if(|m| {
            had = m.entries.remove(&partition).is_some();
            had.then(|| "set_partition".into())
        });
        had
    }

    /// Replaces the whole explicit partition → node map in one step (seed
    /// 002's partition topology, loaded at start and re-synced after events):
    /// routes see either the old map or the new one, never a mix. Partitions
    /// the new map leaves out fall back to placement. Every entry is checked
    /// first (partition in range, no partition twice, known node); any error
    /// changes nothing. `source` names who produced the map (metrics).
    /// Returns the map's new epoch.
    pub fn replace_partition_map(&self, map: &[(u32, &str)], source: &str) -> Result<u64> {
        check_partition_map_source(source)?;
        let mut entries = self.check_map(map)?;
        let mut epoch = 0;
        self.update_map(|m| {
            m.entries = std::mem::take(&mut entries);
            epoch = m.epoch + 1;
            source.into()
        });
        Ok(epoch)
    }

    /// [`Cluster::replace_partition_map`] as a versioned shared input: the
    /// map with the highest version wins (at equal versions, the one whose
    /// entries hash higher), whatever order the maps arrive in; an older one
    /// changes nothing. Returns whether it applied.
    ///
    /// # Errors
    /// As [`Cluster::replace_partition_map`]; a map refused changes nothing.
    pub fn replace_partition_map_at(&self, map: &[(u32, &str)], source: &str, version: u64) -> Result<bool> {
        check_partition_map_source(source)?;
        let entries = self.check_map(map)?;
        let key = (version, PartitionMap::content_hash(&entries));
        let mut applied = false;
        let mut entries = Some(entries);
        self.update_map_if(|m| {
            if m.key.is_some_and(|k| k >= key) {
                return None;
            }
            applied = true;
            m.entries = entries.take().unwrap_or_default();
            m.key = Some(key);
            Some(source.into())
        });
        if let (false, Some(entries), true) = (applied, entries, self.inner.config.transaction.settle_ms > 0) {
            // Older than the map in force, but another process may route by
            // it now, having got the maps in another order: strict
            // placement weighs it for the settle time like a replaced map.
            let stale = PartitionMap { entries, epoch: 0, source: source.into(), key: Some(key) };
            let now = self.clock().now_ms();
            let mut replaced = crate::fork::lock(&self.inner.data.replaced);
            self.remember_replaced(&mut replaced, now, Arc::new(stale));
        }
        Ok(applied)
    }

    fn check_map(&self, map: &[(u32, &str)]) -> Result<HashMap<u32, Box<str>>> {
        let topo = self.topo();
        let mut entries = HashMap::with_capacity(map.len());
        for &(p, node) in map {
            self.check_partition(p)?;
            let name: Box<str> = topo.find_or_unknown(node)?.name().into();
            if entries.insert(p, name).is_some() {
                return Err(Error::InvalidArgument(format!("partition {p} is mapped twice")));
            }
        }
        Ok(entries)
    }

    /// The owner of `partition` as every process that may not have seen the
    /// latest shared inputs yet (map replacements, nodes added or removed,
    /// weights) sees it: what strict placement of a keyed transaction acts
    /// on. Balanced data placement is this process's own and has no agreed
    /// owner.
    pub(crate) fn agreed_partition_owner(&self, topo: &Topology, partition: u32) -> Result<KeyOwner> {
        self.check_partition(partition)?;
        let settle = self.inner.config.transaction.settle_ms;
        let now = self.clock().now_ms();
        let d = &self.inner.data;
        let current = d.explicit.load_full();
        let entry = current.entry(partition);
        let by_name = |name: &str| topo.find(name).cloned();
        {
            let mut replaced = crate::fork::lock(&d.replaced);
            replaced.retain(|(at, _)| now.saturating_sub(*at) < settle);
            if replaced.iter().any(|(_, m)| m.entry(partition) != entry) {
                let named = entry
                    .as_deref()
                    .and_then(by_name)
                    .or_else(|| replaced.iter().find_map(|(_, m)| m.entry(partition).as_deref().and_then(by_name)));
                let fallback =
                    rendezvous::owner(&topo.live, hash::hash_i64(i64::from(partition)), Weights::Static, |_| true)
                        .cloned();
                return Ok(match named.or(fallback) {
                    Some(n) => KeyOwner::Unsettled(n),
                    None => KeyOwner::None,
                });
            }
        }
        if let Some(name) = entry {
            // A node of that name added or removed within the settle time
            // may be in one process's cluster and not in another's.
            if let Some(n) = topo.by_id.iter().rev().find(|n| n.canonical_name() == name && !n.member_settled(settle)) {
                return Ok(KeyOwner::Unsettled(n.clone()));
            }
            if let Some(n) = by_name(&name) {
                return Ok(KeyOwner::Node(n));
            }
        }
        if self.inner.config.data.placement == Placement::Balanced {
            return Ok(KeyOwner::None);
        }
        let h = hash::hash_i64(i64::from(partition));
        let standing = |n: &crate::node::Node| match (n.is_removed(), n.member_settled(settle)) {
            (_, false) => Standing::Changing,
            (true, true) => Standing::Ineligible,
            (false, true) => Standing::Eligible,
        };
        Ok(match agreement::agreed_owner(&topo.by_id, h, settle, standing) {
            Agreed::Owner(n) => {
                let current = rendezvous::owner(&topo.live, h, Weights::Static, |_| true);
                if current.is_some_and(|c| c.id() == n.id()) {
                    KeyOwner::Node(n.clone())
                } else {
                    KeyOwner::Unsettled(n.clone())
                }
            }
            Agreed::Unsettled(n) => KeyOwner::Unsettled(n.clone()),
            Agreed::Nobody => KeyOwner::None,
        })
    }

    /// A digest of the explicit map's entries (node names upper-cased),
    /// equal in every process holding the same map whatever its epoch.
    pub(crate) fn partition_map_digest(&self) -> u64 {
        PartitionMap::content_hash(&self.inner.data.explicit.load().entries)
    }

    /// The explicit map's epoch: 0 as configured, +1 per change.
    pub fn partition_map_epoch(&self) -> u64 {
        self.inner.data.explicit.load().epoch
    }

    pub(crate) fn partition_map_source(&self) -> String {
        self.inner.data.explicit.load().source.to_string()
    }

    /// Records that `source` failed to produce a partition map (the host's
    /// loader: a query that failed, a map this cluster refused). The map in
    /// force stays; the failure shows in the metrics (`partition_map`'s
    /// `load_failures` and `last_error`) so a silent loader is seen.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a source name
    /// [`check_partition_map_source`] refuses (nothing is recorded).
    pub fn partition_map_load_failed(&self, source: &str, error: &str) -> Result<()> {
        check_partition_map_source(source)?;
        let d = &self.inner.data;
        d.load_failures.fetch_add(1, Ordering::Relaxed);
        let mut text = format!("{source}: {error}");
        if text.len() > MAX_LOAD_ERROR_BYTES {
            let mut end = MAX_LOAD_ERROR_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        *crate::fork::lock(&d.last_load_error) = text;
        Ok(())
    }

    /// Failed loads so far and the last one's message.
    pub(crate) fn partition_map_load_failures(&self) -> (u64, Option<String>) {
        let d = &self.inner.data;
        let last = crate::fork::lock(&d.last_load_error).clone();
        (d.load_failures.load(Ordering::Relaxed), (!last.is_empty()).then_some(last))
    }

    fn check_partition(&self, partition: u32) -> Result<()> {
        if partition >= self.inner.data.partitions {
            return Err(Error::InvalidArgument(format!(
                "partition {partition} out of range 0..{}",
                self.inner.data.partitions
            )));
        }
        Ok(())
    }

    /// One read-copy-update of the explicit map; `f` edits the copy and
    /// returns the new source. Concurrent updates retry, so none is lost.
    fn update_map(&self, mut f: impl FnMut(&mut PartitionMap) -> Box<str>) {
        self.update_map_if(|m| Some(f(m)));
    }

    /// Keeps `map` in the window of maps other processes may still route
    /// by, dropping those older than the settle time first, so a host that
    /// updates its map often never grows it.
    fn remember_replaced(&self, replaced: &mut Vec<(u64, Arc<PartitionMap>)>, now: u64, map: Arc<PartitionMap>) {
        let settle = self.inner.config.transaction.settle_ms;
        replaced.retain(|(at, _)| now.saturating_sub(*at) < settle);
        replaced.push((now, map));
    }

    /// [`Self::update_map`] where `f` may decline (`None`: no change). The
    /// map replaced is kept for `transaction.settle` (strict placement asks
    /// what other processes may still route by).
    fn update_map_if(&self, mut f: impl FnMut(&mut PartitionMap) -> Option<Box<str>>) {
        let d = &self.inner.data;
        // Serialised by `replaced`'s lock, so the map recorded as replaced is
        // the one the new map was made from.
        let mut replaced = crate::fork::lock(&d.replaced);
        let old = d.explicit.load_full();
        let mut next = PartitionMap::clone(&old);
        let Some(source) = f(&mut next) else {
            return;
        };
        next.source = source;
        next.epoch = old.epoch + 1;
        // From the new map and under the lock: stored after the unlock, an
        // update that emptied the map could store `false` over the `true`
        // of one that added an entry since, and routes would skip the map.
        let has_explicit = !next.entries.is_empty();
        d.explicit.store(Arc::new(next));
        #[cfg(test)]
        tests::before_flag_store();
        d.has_explicit.store(has_explicit, Ordering::Release);
        if self.inner.config.transaction.settle_ms > 0 {
            self.remember_replaced(&mut replaced, self.clock().now_ms(), old);
        }
        drop(replaced);
        self.inner.routing.advance();
    }

    pub(crate) fn data_affinities(&self) -> usize {
        self.inner.data.explicit.load().entries.len() + self.inner.data.placed_len()
    }
}

/// Checks a partition-map source name (metrics label): 1..=64 bytes of
/// letters, digits and `_-.:/`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the rule.
pub fn check_partition_map_source(source: &str) -> Result<()> {
    if source.is_empty()
        || source.len() > MAX_SOURCE_BYTES
        || !source.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
    {
        return Err(Error::InvalidArgument(format!(
            "partition map source must be 1..={MAX_SOURCE_BYTES} bytes of letters, digits and _-.:/, got `{}`",
            source.escape_debug()
        )));
    }
    Ok(())
}

fn is_removed(topo: &Topology, id: NodeId) -> bool {
    topo.node(id).is_none_or(|n| n.is_removed())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use crate::{Cluster, ClusterBuilder, Config, ManualClock};

    thread_local! {
        /// Run once by this thread's next map update, between deciding the
        /// `has_explicit` flag and storing it.
        static BEFORE_FLAG_STORE: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn before_flag_store() {
        if let Some(f) = BEFORE_FLAG_STORE.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    thread_local! {
        /// Run once by this thread's next lock of a partition's placements,
        /// before it takes the lock.
        static BEFORE_PLACEMENT_LOCK: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn before_placement_lock() {
        if let Some(f) = BEFORE_PLACEMENT_LOCK.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// Clearing a partition the map has no entry for is no change: the
    /// map's epoch and source (a loader's, in the metrics) stay, and route
    /// caches keyed by the routing epoch stay valid.
    #[test]
    fn clearing_a_partition_with_no_entry_changes_nothing() {
        let c = Cluster::from_config_text("nodes = A, B\ndata.partitions = 4").unwrap();
        let epoch = c.replace_partition_map(&[(0, "A")], "loader").unwrap();
        let routing = c.routing_epoch();
        assert!(!c.clear_partition(1));
        assert_eq!(
            (c.partition_map_epoch(), c.partition_map_source(), c.routing_epoch()),
            (epoch, "loader".to_string(), routing)
        );
        assert!(c.clear_partition(0));
        assert_eq!((c.partition_map_epoch(), c.partition_map_source()), (epoch + 1, "set_partition".to_string()));
    }

    /// A map update that empties the map and one that adds an entry, the
    /// second landing while the first is storing its `has_explicit` flag:
    /// the first must not store `false` over the second's `true`, or routes
    /// ignore the explicit entry for good.
    #[test]
    fn an_entry_added_while_another_update_empties_the_map_is_routed_by() {
        let c = Cluster::from_config_text("nodes = A, B\ndata.partitions = 4").unwrap();
        let hashed = c.node_name(c.partition_owner(1).unwrap()).unwrap();
        let other = if hashed == "A" { "B" } else { "A" };
        c.set_partition(0, "A").unwrap();
        let adder = c.clone();
        let (adding, add) = std::sync::mpsc::channel();
        BEFORE_FLAG_STORE.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                // The adding update needs the map's lock. Still held here,
                // it can only finish after this update; if not, waiting
                // for it to finish lands it in this window every time,
                // where a timed wait let a late thread land after the store.
                let held = matches!(adder.inner.data.replaced.try_lock(), Err(std::sync::TryLockError::WouldBlock));
                let (added, done) = std::sync::mpsc::channel();
                adding
                    .send(std::thread::spawn(move || {
                        adder.set_partition(1, other).unwrap();
                        let _ = added.send(());
                    }))
                    .unwrap();
                if !held {
                    // An error means the update panicked: the join says so.
                    let _ = done.recv();
                }
            }));
        });
        assert!(c.clear_partition(0));
        add.recv().expect("the hook ran").join().unwrap();
        assert_eq!(c.partition_map_epoch(), 3);
        assert_eq!(c.node_name(c.partition_owner(1).unwrap()).unwrap(), other, "explicit entry 1 -> {other} ignored");
    }

    #[test]
    fn maps_replaced_long_ago_are_not_kept() {
        // Only strict keyed placement reads the window; a host that updates
        // its map often and never places such a gtrid must not grow it.
        let clock = ManualClock::new(1);
        let c: Cluster = ClusterBuilder::from_config(Config::parse("nodes = A, B\ntransaction.settle = 1s").unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
        for i in 0..1_000 {
            c.set_partition(i % 16, if i % 2 == 0 { "A" } else { "B" }).unwrap();
            clock.advance_ms(100);
        }
        let kept = c.inner.data.replaced.lock().unwrap().len();
        assert!(kept <= 11, "{kept} replaced maps kept; the settle time covers 10");
    }

    /// Balanced placement: a route that loaded its snapshot before a node
    /// was added, and reads the partition once another thread has placed it
    /// on that node, must route there. The old snapshot does not have the
    /// node, so it looked removed and the partition was placed again on
    /// another node: one key routed to two nodes.
    #[test]
    fn a_partition_placed_on_a_node_added_during_the_route_stays_there() {
        use crate::{NodeSpec, RouteKind};
        let c = std::sync::Arc::new(
            Cluster::from_config_text("nodes = A\ndata.placement = balanced\ndata.partitions = 1").unwrap(),
        );
        // The route waits at the partition's placement lock (where a route
        // without the fix already has its snapshot) until D is added and
        // the partition placed on it; a sleep instead could let a route
        // that starts late take its snapshot after D, and pass without the fix.
        let (at_lock, reached) = std::sync::mpsc::channel();
        let (release, go) = std::sync::mpsc::channel::<()>();
        let route = {
            let c = c.clone();
            std::thread::spawn(move || {
                BEFORE_PLACEMENT_LOCK.with(|h| {
                    *h.borrow_mut() = Some(Box::new(move || {
                        at_lock.send(()).unwrap();
                        go.recv().unwrap();
                    }));
                });
                c.route_key_i64(7)
            })
        };
        reached.recv().expect("the route reached the placement lock");
        let d = c.add_node(NodeSpec::new("D")).unwrap();
        // What a route that saw D would have written under this lock.
        c.inner.data.placed.lock(&0u32).insert(0, d);
        release.send(()).unwrap();
        let r = route.join().unwrap().unwrap();
        assert_eq!((c.node_name(r.node).unwrap(), r.kind), ("D".to_string(), RouteKind::Affinity));
        assert_eq!(c.partition_owner(0).unwrap(), d);
    }
}
