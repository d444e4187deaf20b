//! The cluster: nodes, policy and the affinity registries, behind one handle.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Guard};

use crate::balance::{Balancer, Choice, LiveNodes, PanicPolicy, Policy};
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, DataConfig, Placement, SessionConfig, ThreadConfig, TransactionConfig};
use crate::data::DataMap;
use crate::epoch::RoutingEpoch;
use crate::error::{Error, Result, Scope};
use crate::lease::LeaseRegistry;
use crate::metrics::ScopeCounters;
use crate::node::{drain_deadline, HealthConfig, Node, NodeId, NodeSpec, NodeState};
use crate::pin::ContextPins;
use crate::rendezvous::{self, Weights};
use crate::route::{Route, RouteKind};
use crate::session::SessionRegistry;
use crate::topology::Topology;
use crate::transaction::TxRegistry;

/// The order of versioned membership inputs about one name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct MemberKey {
    version: u64,
    removed: bool,
    /// An addition's weight (0 for a removal): what a deleted weight record
    /// falls back to, the same in every process that has the record.
    weight: u32,
    /// An addition's address, machine and zone as given (a removal's are
    /// `None`): the node's place follows the input in force, and at one
    /// version and weight the greater of these wins, in every process.
    place: [Option<Box<str>>; 3],
}

impl MemberKey {
    fn removal(version: u64) -> MemberKey {
        MemberKey { version, removed: true, weight: 0, place: [None, None, None] }
    }

    fn addition(spec: &NodeSpec, version: u64) -> MemberKey {
        let text = |v: &Option<String>| v.as_deref().map(Box::from);
        MemberKey {
            version,
            removed: false,
            weight: spec.weight,
            place: [text(&spec.address), text(&spec.machine), text(&spec.zone)],
        }
    }
}

/// Refuses a name whose session-token id a live node already has.
fn check_token_free(topo: &Topology, name: &str) -> Result<()> {
    let token_id = crate::token::token_id_of(name);
    match topo.live.iter().find(|n| n.token_id() == token_id) {
        Some(other) => Err(Error::InvalidArgument(crate::token::token_id_clash(name, other.name()))),
        None => Ok(()),
    }
}

static NEXT_CLUSTER_ID: AtomicU64 = AtomicU64::new(1);

/// A database's nodes, its load-balancing policy and its affinity registries.
///
/// Cheap to clone (an `Arc`); every method takes `&self` and is safe to call
/// from many threads at once.
#[derive(Clone)]
pub struct Cluster {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub id: u64,
    pub config: Config,
    pub strict: [AtomicBool; 4],
    pub clock: Arc<dyn Clock>,
    pub topo: ArcSwap<Topology>,
    /// The live nodes of `topo`, for the balanced pick (see [`LiveNodes`]).
    pub live: LiveNodes,
    /// Serialises node set changes; holds the versioned membership inputs
    /// seen so far: upper-cased name → ([`MemberKey`]).
    pub topo_lock: Mutex<std::collections::HashMap<String, MemberKey>>,
    /// Names (upper-cased) whose versioned addition is in force but whose
    /// session-token id another live node holds: they wait for it to go
    /// (`settle_token_id`). Changed only with `topo_lock` held.
    pub token_waiting: Mutex<std::collections::HashMap<String, NodeSpec>>,
    pub balancer: Balancer,
    pub tx: TxRegistry,
    pub sessions: SessionRegistry,
    pub data: DataMap,
    pub contexts: ContextPins,
    /// Hits thread pins counted on their own (crate::thread_hits).
    pub thread_hits: crate::thread_hits::Tallies,
    pub scope: [ScopeCounters; 4],
    pub next_context: AtomicU64,
    pub leases: LeaseRegistry,
    /// Set by [`Cluster::close`]; pins on a closed cluster are pruned.
    pub closed: AtomicBool,
    /// Advanced by every change that could alter a route (crate::epoch).
    pub routing: Arc<RoutingEpoch>,
    /// The topology feed's subscription (`topology.feed`), set once built.
    pub feed: std::sync::OnceLock<crate::feed::Subscription>,
    /// The highest-keyed versioned FAN input about every node at once (a
    /// DATABASE or SERVICE event), which a node added later takes too: the
    /// event and the addition then end alike in either order.
    pub wide_input: Mutex<Option<crate::node::SharedInput>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.inner.topo.load();
        f.debug_struct("Cluster")
            .field("name", &self.inner.config.name)
            .field("epoch", &t.epoch)
            .field("nodes", &t.live.iter().map(|n| (n.name(), n.state())).collect::<Vec<_>>())
            .finish()
    }
}

/// Builds a [`Cluster`] in Rust; [`Cluster::from_config_text`] takes the text form.
#[derive(Debug, Clone, Default)]
pub struct ClusterBuilder {
    config: Config,
    clock: Option<Arc<dyn ClockDebug>>,
}

/// [`Clock`] that can be stored in a `Debug` builder.
pub trait ClockDebug: Clock + std::fmt::Debug {}
impl<T: Clock + std::fmt::Debug> ClockDebug for T {}

impl ClusterBuilder {
    /// Starts from a parsed config.
    pub fn from_config(config: Config) -> Self {
        ClusterBuilder { config, clock: None }
    }
    /// Cluster name (metrics label).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.config.name = name.into();
        self
    }
    /// Adds a node.
    pub fn node(mut self, spec: NodeSpec) -> Self {
        self.config.nodes.push(spec);
        self
    }
    /// Balancing policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.config.policy = policy;
        self
    }
    /// Panic policy.
    pub fn panic_policy(mut self, panic: PanicPolicy) -> Self {
        self.config.panic = panic;
        self
    }
    /// Thread pin settings.
    pub fn thread(mut self, t: ThreadConfig) -> Self {
        self.config.thread = t;
        self
    }
    /// Transaction affinity settings.
    pub fn transaction(mut self, t: TransactionConfig) -> Self {
        self.config.transaction = t;
        self
    }
    /// Session affinity settings.
    pub fn session(mut self, s: SessionConfig) -> Self {
        self.config.session = s;
        self
    }
    /// Data affinity settings.
    pub fn data(mut self, d: DataConfig) -> Self {
        self.config.data = d;
        self
    }
    /// Ejection and heartbeat thresholds.
    pub fn health(mut self, h: HealthConfig) -> Self {
        self.config.health = h;
        self
    }
    /// Sets strictness for one scope.
    pub fn strict(mut self, scope: Scope, strict: bool) -> Self {
        match scope {
            Scope::Thread => self.config.thread.strict = strict,
            Scope::Transaction => self.config.transaction.strict = strict,
            Scope::Session => self.config.session.strict = strict,
            Scope::Data => self.config.data.strict = strict,
        }
        self
    }
    /// Injects a clock (tests use [`crate::ManualClock`]).
    pub fn clock(mut self, clock: impl ClockDebug) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }
    /// Validates and builds.
    pub fn build(self) -> Result<Cluster> {
        let clock: Arc<dyn Clock> = match self.clock {
            Some(c) => Arc::new(DynClock(c)),
            None => Arc::new(SystemClock::new()),
        };
        Cluster::with_clock(self.config, clock)
    }
}

#[derive(Debug)]
struct DynClock(Arc<dyn ClockDebug>);
impl Clock for DynClock {
    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }

    fn unix_ms(&self) -> Option<u64> {
        self.0.unix_ms()
    }
}

impl Cluster {
    /// A builder with default settings and no nodes.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// Builds from the text config format (see the README).
    pub fn from_config_text(text: &str) -> Result<Cluster> {
        Cluster::new(Config::parse(text)?)
    }

    /// Builds from a config with the system clock.
    pub fn new(config: Config) -> Result<Cluster> {
        Cluster::with_clock(config, Arc::new(SystemClock::new()))
    }

    /// Builds from a config with an injected clock.
    pub fn with_clock(config: Config, clock: Arc<dyn Clock>) -> Result<Cluster> {
        config.validate()?;
        let routing = Arc::new(RoutingEpoch::default());
        let mut topo = Topology::empty();
        for (i, spec) in config.nodes.iter().enumerate() {
            topo = topo.with_added(Arc::new(Node::new(
                NodeId(i as u32),
                spec,
                &config.local,
                clock.clone(),
                routing.clone(),
            )));
        }
        let data = DataMap::new(&config.data, &topo)?;
        let strict = [
            AtomicBool::new(config.thread.strict),
            AtomicBool::new(config.transaction.strict),
            AtomicBool::new(config.session.strict),
            AtomicBool::new(config.data.strict),
        ];
        let live = LiveNodes::new(&topo.live);
        let inner = Inner {
            id: NEXT_CLUSTER_ID.fetch_add(1, Ordering::Relaxed),
            balancer: Balancer::new(config.policy, config.panic, &config.local),
            strict,
            clock,
            topo: ArcSwap::from_pointee(topo),
            live,
            topo_lock: Mutex::new(Default::default()),
            token_waiting: Mutex::new(Default::default()),
            tx: TxRegistry::new(),
            sessions: SessionRegistry::new(),
            data,
            contexts: ContextPins::new(),
            thread_hits: Default::default(),
            scope: Default::default(),
            next_context: AtomicU64::new(1),
            leases: LeaseRegistry::new(),
            closed: AtomicBool::new(false),
            routing,
            config,
            feed: std::sync::OnceLock::new(),
            wide_input: Mutex::new(None),
        };
        let cluster = Cluster { inner: Arc::new(inner) };
        if let Some(sub) = crate::feed::Subscription::start(&cluster, &cluster.inner.config.feed) {
            let _ = cluster.inner.feed.set(sub);
        }
        Ok(cluster)
    }

    /// Releases everything the cluster holds for its hosts at once:
    /// transaction, session, context-pin and open-lease registries and
    /// balanced partition placements; thread pins on it are pruned by each
    /// thread's next pin. For hosts whose handle may stay cached after the
    /// host freed it (the native library's per-thread handle cache): the
    /// small remainder goes when the last reference does. Calls made after
    /// `close` work on the emptied registries.
    pub fn close(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::Release);
        if let Some(feed) = inner.feed.get() {
            feed.stop();
        }
        inner.tx.clear();
        inner.sessions.clear();
        for (scope, pins) in inner.contexts.clear().into_iter().enumerate() {
            inner.scope[scope].live.fetch_sub(pins as i64, Ordering::Relaxed);
        }
        let topo = self.topo();
        for node in inner.leases.clear() {
            if let Some(n) = topo.node(node) {
                n.counters.in_flight.add_signed(-1);
            }
        }
        inner.data.clear_placed();
        inner.routing.advance();
    }

    /// Whether [`Cluster::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The config this cluster was built from (node list as at build time).
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Cluster name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Topology epoch: bumped by every node add/remove.
    pub fn epoch(&self) -> u64 {
        self.inner.topo.load().epoch
    }

    /// Swaps in a new snapshot; the caller holds the topology lock.
    fn store_topology(&self, t: Topology) {
        let t = Arc::new(t);
        self.inner.topo.store(t.clone());
        self.inner.live.publish(&t.live);
    }

    pub(crate) fn topo(&self) -> Guard<Arc<Topology>> {
        self.inner.topo.load()
    }

    /// The snapshot for ids read from a registry (transactions, sessions):
    /// load it after taking the entry's lock. Whoever wrote the entry did so
    /// under that lock with a snapshot that had its node, and snapshots only
    /// gain ids, so one loaded afterwards has it too. One loaded before the
    /// lock may predate a node that another thread added and put the entry
    /// on meanwhile (`expect("ids are never dropped")` then panicked).
    pub(crate) fn registry_topo(&self) -> Guard<Arc<Topology>> {
        self.topo()
    }

    pub(crate) fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    pub(crate) fn health(&self) -> &HealthConfig {
        &self.inner.config.health
    }

    /// Whether `scope` refuses instead of moving work.
    #[inline]
    pub fn is_strict(&self, scope: Scope) -> bool {
        self.inner.strict[scope as usize].load(Ordering::Relaxed)
    }

    /// Switches a scope's strictness at runtime (JMX `UseStrictXAAffinity` etc.).
    pub fn set_strict(&self, scope: Scope, strict: bool) {
        self.inner.strict[scope as usize].store(strict, Ordering::Relaxed);
        self.inner.routing.advance();
    }

    // ---- nodes -------------------------------------------------------------

    /// Live node ids, in id order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.topo().live.iter().map(|n| n.id()).collect()
    }

    /// A node by id (also removed ones, which report `is_removed`).
    pub fn node(&self, id: NodeId) -> Option<Arc<Node>> {
        self.topo().node(id).cloned()
    }

    /// A live node by name (case-insensitive).
    pub fn node_by_name(&self, name: &str) -> Result<Arc<Node>> {
        self.topo().find_or_unknown(name).cloned()
    }

    /// Name of a node id; removed nodes keep their name.
    pub fn node_name(&self, id: NodeId) -> Option<String> {
        self.topo().node(id).map(|n| n.name().to_string())
    }

    /// Adds a node at runtime; it gets the next id and starts `Up`. An
    /// input without a version: every process must add it (within
    /// `transaction.settle`, during which strict placement waits for it).
    pub fn add_node(&self, spec: NodeSpec) -> Result<NodeId> {
        spec.validate()?;
        if self.inner.feed.get().is_some() {
            let cur = self.topo();
            if cur.find(&spec.name).is_some() {
                return Err(Error::DuplicateNode(spec.name));
            }
            // Every subscriber would refuse it: never write it.
            check_token_free(&cur, &spec.name)?;
            let mut value = format!("present weight={}", spec.weight);
            if let Some(a) = &spec.address {
                value.push_str(&format!(" address={a}"));
            }
            if let Some(r) = self.publish(&format!("node/{}", spec.name), Some(&value)) {
                r?;
                return Ok(self.node_by_name(&spec.name)?.id());
            }
        }
        let _g = crate::fork::lock(&self.inner.topo_lock);
        self.add_node_locked(spec)
    }

    fn add_node_locked(&self, spec: NodeSpec) -> Result<NodeId> {
        let cur = self.inner.topo.load_full();
        if cur.find(&spec.name).is_some() {
            return Err(Error::DuplicateNode(spec.name));
        }
        check_token_free(&cur, &spec.name)?;
        self.insert_node_locked(&cur, spec)
    }

    /// Adds `spec`'s node as checked by the caller (a stand-in, removed at
    /// once, never live, so never in a token: its token id may collide).
    fn insert_node_locked(&self, cur: &Topology, spec: NodeSpec) -> Result<NodeId> {
        if cur.by_id.len() >= u32::MAX as usize {
            return Err(Error::InvalidArgument("too many nodes".into()));
        }
        let id = NodeId(cur.by_id.len() as u32);
        let node = Node::new(id, &spec, &self.inner.config.local, self.inner.clock.clone(), self.inner.routing.clone());
        // The versioned inputs about this name outlive its removal: the
        // earlier incarnation's state and weight, and what was said of every
        // node, as a process that gets the same inputs in another order (or
        // reads the log after a compaction, where the state record is still
        // there) applies them to this incarnation.
        let canonical = spec.name.to_ascii_uppercase();
        if let Some(old) = cur.by_id.iter().rev().find(|n| n.canonical_name() == canonical) {
            node.inherit_shared(old, self.inner.config.transaction.settle_ms);
        }
        if let Some(wide) = *crate::fork::lock(&self.inner.wide_input) {
            node.apply_shared(wide);
        }
        // Other processes may not have added it yet: strict placement waits
        // out transaction.settle before giving it new gtrids.
        node.stamp_member_change();
        self.store_topology(cur.with_added(Arc::new(node)));
        self.inner.routing.advance();
        Ok(id)
    }

    /// Removes a node at runtime. Affinities to it break like a `Down` node's;
    /// under rendezvous only its keys move. An input without a version, like
    /// [`Cluster::add_node`].
    pub fn remove_node(&self, name: &str) -> Result<NodeId> {
        if self.inner.feed.get().is_some() {
            let node = self.node_by_name(name)?;
            if let Some(r) = self.publish(&format!("node/{}", node.name()), Some(crate::feed::REMOVED)) {
                r?;
                return Ok(node.id());
            }
        }
        let g = crate::fork::lock(&self.inner.topo_lock);
        let id = self.remove_node_locked(name)?;
        self.settle_token_id(&g, crate::token::token_id_of(name))?;
        Ok(id)
    }

    fn remove_node_locked(&self, name: &str) -> Result<NodeId> {
        let cur = self.inner.topo.load_full();
        let node = cur.find_or_unknown(name).cloned()?;
        node.mark_removed();
        self.store_topology(cur.with_removed(node.id()));
        self.inner.routing.advance();
        Ok(node.id())
    }

    /// A versioned membership input: `spec`'s node is in the cluster as of
    /// `version` (a fleet-wide order: the fleet feed's revision, or any
    /// number every process is given alike). Of all membership inputs about
    /// one name, the highest version wins (a removal over an addition at the
    /// same version), whatever the order they arrive in: an addition older
    /// than a removal already seen changes nothing. Returns whether the
    /// cluster changed.
    pub fn add_node_at(&self, spec: NodeSpec, version: u64) -> Result<bool> {
        spec.validate()?;
        let mut g = crate::fork::lock(&self.inner.topo_lock);
        let key = MemberKey::addition(&spec, version);
        let name = spec.name.to_ascii_uppercase();
        // What the input leaves out (an address, a machine, a zone) is the
        // configured one: a process that reads only this input (the log
        // after a compaction) has the node with exactly that.
        let spec = self.with_configured_place(spec);
        let settle = self.inner.config.transaction.settle_ms;
        // The addition's weight is a versioned weight input at its version,
        // whether the node is configured, added now or added before: so a
        // process that has the node in its config and one that gets it
        // from the feed end with the same weight (highest version wins).
        let weigh = |n: &Node| {
            n.set_weight(spec.weight, Some(version), settle);
        };
        if g.get(&name).is_some_and(|k| *k >= key) {
            if let Some(n) = self.inner.topo.load().find(&name) {
                weigh(n);
            }
            self.member_input_seen(&spec.name, Some(spec.weight))?;
            return Ok(false);
        }
        if let Some(n) = self.inner.topo.load_full().find(&name) {
            g.insert(name, key);
            weigh(n);
            // The newest input's address is the node's in every process,
            // whichever came first (FAN `NODE` events name hosts).
            let moved = n.set_place(&spec, &self.inner.config.local);
            self.member_input_seen(&spec.name, Some(spec.weight))?;
            // A newer version may let a name waiting for its token id outrank it.
            let handed = self.settle_token_id(&g, n.token_id())?;
            return Ok(moved || handed);
        }
        let token_id = crate::token::token_id_of(&name);
        if self.inner.topo.load().live.iter().any(|n| n.token_id() == token_id) {
            // Another live name has its session-token id: which of the two
            // holds it follows from the inputs in force, never from their
            // order, so the addition is kept rather than refused.
            g.insert(name.clone(), key);
            crate::fork::lock(&self.inner.token_waiting).insert(name.clone(), spec.clone());
            let moved = self.settle_token_id(&g, token_id)?;
            if self.inner.topo.load().find(&name).is_none() {
                self.member_input_seen(&spec.name, Some(spec.weight))?;
            }
            return Ok(moved);
        }
        crate::fork::lock(&self.inner.token_waiting).remove(&name);
        let id = self.add_node_locked(spec.clone())?;
        if let Some(n) = self.topo().node(id) {
            weigh(n);
        }
        g.insert(name, key);
        Ok(true)
    }

    /// Of the names that share session-token id `token_id`, the live one
    /// is the one whose versioned addition in force has the lowest
    /// version (then the lowest name); a node no versioned input added
    /// (configured, or added by `add_node`) holds its id against every
    /// other. The others wait (`token_waiting`) and take the id when the
    /// holder is removed or a newer input about it outranks them, so every
    /// process that has the same inputs has the same live node for every
    /// token, in any order. Returns whether the live node changed. Called
    /// with the membership lock held (`g`).
    fn settle_token_id(&self, g: &std::collections::HashMap<String, MemberKey>, token_id: u32) -> Result<bool> {
        let mut waiting = crate::fork::lock(&self.inner.token_waiting);
        waiting.retain(|name, _| g.get(name).is_some_and(|k| !k.removed));
        let rank = |name: &str| g.get(name).filter(|k| !k.removed).map(|k| (k.version, name.to_owned()));
        let Some((next, spec)) = waiting
            .iter()
            .filter(|(n, _)| crate::token::token_id_of(n) == token_id)
            .min_by_key(|(n, _)| rank(n))
            .map(|(n, s)| (n.clone(), s.clone()))
        else {
            return Ok(false);
        };
        let cur = self.inner.topo.load_full();
        if let Some(holder) = cur.live.iter().find(|n| n.token_id() == token_id) {
            match rank(holder.canonical_name()) {
                Some(r) if r > rank(&next).unwrap_or_default() => {
                    let kept = NodeSpec {
                        name: holder.name().to_owned(),
                        address: holder.address(),
                        weight: holder.weight(),
                        machine: holder.machine(),
                        zone: holder.zone(),
                    };
                    waiting.insert(holder.canonical_name().to_owned(), kept);
                    self.remove_node_locked(holder.name())?;
                }
                _ => return Ok(false),
            }
        }
        waiting.remove(&next);
        drop(waiting);
        let id = self.add_node_locked(spec)?;
        if let (Some(n), Some(k)) = (self.topo().node(id), g.get(&next)) {
            n.set_weight(k.weight, Some(k.version), self.inner.config.transaction.settle_ms);
        }
        Ok(true)
    }

    /// `spec` with the address, machine and zone it leaves out taken from
    /// the node's configuration (`node.<N>.address`, ...), if it has one.
    fn with_configured_place(&self, mut spec: NodeSpec) -> NodeSpec {
        if let Some(c) = self.inner.config.nodes.iter().find(|c| c.name.eq_ignore_ascii_case(&spec.name)) {
            spec.address = spec.address.or_else(|| c.address.clone());
            spec.machine = spec.machine.or_else(|| c.machine.clone());
            spec.zone = spec.zone.or_else(|| c.zone.clone());
        }
        spec
    }

    /// The version of the membership input that has `name` in this
    /// cluster (a feed record's revision); `None` when no versioned input
    /// has it (configured, never in a record) or the last one removed it.
    pub(crate) fn member_version(&self, name: &str) -> Option<u64> {
        let g = crate::fork::lock(&self.inner.topo_lock);
        g.get(&name.to_ascii_uppercase()).filter(|k| !k.removed).map(|k| k.version)
    }

    /// The version of the last membership input about `name` when it is a
    /// removal (`None`: no versioned input about it, or an addition).
    /// The weight of the membership input that has `name` in this cluster
    /// (`node/<NAME> present weight=…`), if a versioned one does.
    pub(crate) fn member_weight(&self, name: &str) -> Option<u32> {
        let g = crate::fork::lock(&self.inner.topo_lock);
        g.get(&name.to_ascii_uppercase()).filter(|k| !k.removed).map(|k| k.weight)
    }

    pub(crate) fn member_removal_version(&self, name: &str) -> Option<u64> {
        let g = crate::fork::lock(&self.inner.topo_lock);
        g.get(&name.to_ascii_uppercase()).filter(|k| k.removed).map(|k| k.version)
    }

    /// A versioned removal; see [`Cluster::add_node_at`]. A removal of a
    /// node this process has not added (its addition may still be on its
    /// way) is remembered, so that addition changes nothing when it comes.
    pub fn remove_node_at(&self, name: &str, version: u64) -> Result<bool> {
        crate::node::validate_node_name(name)?;
        let mut g = crate::fork::lock(&self.inner.topo_lock);
        let key = MemberKey::removal(version);
        let canonical = name.to_ascii_uppercase();
        if g.get(&canonical).is_some_and(|k| *k >= key) {
            return Ok(false);
        }
        g.insert(canonical, key);
        let removed = match self.remove_node_locked(name) {
            Ok(_) => true,
            Err(e) if e.kind() == crate::error::ErrorKind::UnknownNode => {
                self.member_input_seen(name, None)?;
                false
            }
            Err(e) => return Err(e),
        };
        // A name waiting for this one's session-token id takes it.
        self.settle_token_id(&g, crate::token::token_id_of(name))?;
        Ok(removed)
    }

    /// A versioned membership input about `name` that changed nothing here
    /// (older than what is in force): another process may hold its value
    /// now, having got the inputs in another order, so strict placement
    /// weighs the node as changing for the settle time. A node this process
    /// never had is recorded as removed (a stand-in that placement weighs
    /// at the highest weight while it is recent). An addition's `weight`
    /// widens the node's weight window, as a stale weight does. Called with
    /// the membership lock held.
    fn member_input_seen(&self, name: &str, weight: Option<u32>) -> Result<()> {
        let canonical = name.to_ascii_uppercase();
        let cur = self.inner.topo.load_full();
        if let Some(n) = cur.by_id.iter().rev().find(|n| n.canonical_name() == canonical) {
            n.stamp_member_change();
            if let Some(w) = weight {
                n.weight_input_seen(w, self.inner.config.transaction.settle_ms);
            }
            return Ok(());
        }
        if self.inner.config.transaction.settle_ms == 0 {
            return Ok(());
        }
        self.insert_node_locked(&cur, NodeSpec::new(name).weight(crate::node::MAX_WEIGHT))?;
        self.remove_node_locked(name).map(drop)
    }

    /// Sets a node's state by operator/API (`markDown`, `markUp`, `drain`):
    /// the operator's layer of this process only. It moves this process's
    /// picks, but for strict placement across processes it is this
    /// process's own evidence, like a missed heartbeat: a gtrid whose node
    /// it takes out is refused, never placed elsewhere, since other
    /// processes may not have had the call. [`Cluster::set_node_state_at`]
    /// is the shared, versioned form.
    pub fn set_node_state(&self, name: &str, state: NodeState) -> Result<NodeState> {
        let node = self.node_by_name(name)?;
        let before = node.state();
        // With a feed, the fleet gets the call (feed/publish.rs).
        if let Some(r) = self.publish(&format!("node/{}/state", node.name()), Some(state.as_str())) {
            return r.map(|_| before);
        }
        node.set_admin(state);
        Ok(before)
    }

    /// The operator's state change as a shared input with `version` (a
    /// fleet-wide order, as for [`Cluster::add_node_at`]): it joins the FAN
    /// events' layer, where the input with the highest version wins (at
    /// equal versions the more severe state, then the longer drain), so
    /// every process that gets the same calls ends in the same state in any
    /// order. `drain_timeout_ms` applies to `Draining`. Returns whether the
    /// call was newer than what the node had.
    pub fn set_node_state_at(
        &self,
        name: &str,
        state: NodeState,
        version: u64,
        drain_timeout_ms: Option<u64>,
    ) -> Result<bool> {
        // The caller's version need not be a clock: the timeout counts from
        // now (docs/semantics.md, "A drain's deadline").
        self.set_node_state_dated_at(name, state, version, drain_timeout_ms, None)
    }

    /// [`Cluster::set_node_state_at`] for a drain its writer dated
    /// (`since_s`, seconds since 1970 UTC: a feed record's `since=`), whose
    /// timeout then ends at that instant plus the timeout, as a dated FAN
    /// drain's does, never later than the timeout from now.
    pub(crate) fn set_node_state_dated_at(
        &self,
        name: &str,
        state: NodeState,
        version: u64,
        drain_timeout_ms: Option<u64>,
        since_s: Option<u64>,
    ) -> Result<bool> {
        let node = self.node_by_name(name)?;
        let key_before = node.shared_key();
        match state {
            NodeState::Up => node.event_up(Some(version)),
            NodeState::Draining => {
                node.drain_for(drain_timeout_ms, Some(version), drain_deadline(self.clock(), drain_timeout_ms, since_s))
            }
            NodeState::Down => node.event_down(Some(version)),
        };
        Ok(node.shared_key() != key_before)
    }

    /// Changes a node's static weight (rendezvous placement and `weighted`
    /// balancing). An input without a version: every process must get it;
    /// strict placement waits out `transaction.settle` for the keys it moves.
    pub fn set_node_weight(&self, name: &str, weight: u32) -> Result<()> {
        crate::node::check_weight(weight)?;
        let node = self.node_by_name(name)?;
        if let Some(r) = self.publish(&format!("node/{}/weight", node.name()), Some(&weight.to_string())) {
            return r.map(drop);
        }
        node.set_weight(weight, None, self.inner.config.transaction.settle_ms);
        Ok(())
    }

    /// [`Cluster::set_node_weight`] with a version: the highest version
    /// wins (at equal versions the larger weight), in any order of arrival.
    /// Returns whether it applied.
    pub fn set_node_weight_at(&self, name: &str, weight: u32, version: u64) -> Result<bool> {
        crate::node::check_weight(weight)?;
        Ok(self.node_by_name(name)?.set_weight(weight, Some(version), self.inner.config.transaction.settle_ms))
    }

    // ---- shared routing steps ----------------------------------------------

    /// A load-balanced choice, preferring nodes that pass `prefer`; `true`
    /// in the result means the panic policy chose. No half-open trial: this
    /// serves affinities and per-call fallbacks, never a bare leased pick.
    #[inline]
    pub(crate) fn balanced_in(
        &self,
        topo: &Topology,
        scope: Option<Scope>,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<(NodeId, bool)> {
        self.choose(topo, scope, false, prefer)
    }

    #[inline]
    fn choose(
        &self,
        topo: &Topology,
        scope: Option<Scope>,
        allow_trial: bool,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<(NodeId, bool)> {
        self.choose_node(&topo.live, scope, allow_trial, prefer).map(|(n, panic)| (n.id(), panic))
    }

    /// [`Cluster::choose`] among `nodes` (a snapshot's live nodes), giving
    /// the node itself.
    fn choose_node<'t, N: std::ops::Deref<Target = Node>>(
        &self,
        nodes: &'t [N],
        scope: Option<Scope>,
        allow_trial: bool,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<(&'t N, bool)> {
        match self.inner.balancer.choose(nodes, self.clock(), self.health(), allow_trial, prefer) {
            Ok(Choice::Node(n)) => Ok((n, false)),
            Ok(Choice::Panic(n)) => Ok((n, true)),
            Err(Error::NoNodeAvailable { .. }) => Err(Error::NoNodeAvailable { scope }),
            Err(e) => Err(e),
        }
    }

    /// Chooses the node for a *new* affinity of `scope` among nodes that take
    /// new work, preferring those that pass `prefer`.
    ///
    /// Rendezvous placement ranks by static weight: a placement that several
    /// processes must agree on may depend only on the topology and node
    /// states, never on advisories that reach processes at different times.
    pub(crate) fn place(
        &self,
        topo: &Topology,
        scope: Scope,
        placement: Placement,
        key_hash: u64,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<(NodeId, RouteKind)> {
        match placement {
            Placement::Balanced => {
                let (id, panic) = self.balanced_in(topo, Some(scope), prefer)?;
                Ok((id, if panic { RouteKind::Panic } else { RouteKind::Placed }))
            }
            Placement::Rendezvous => self.place_rendezvous(topo, scope, key_hash, prefer),
        }
    }

    /// Rendezvous over usable nodes (preferred first); the panic policy when
    /// none is usable.
    pub(crate) fn place_rendezvous(
        &self,
        topo: &Topology,
        scope: Scope,
        key_hash: u64,
        prefer: impl Fn(&Node) -> bool,
    ) -> Result<(NodeId, RouteKind)> {
        let owner = rendezvous::owner(&topo.live, key_hash, Weights::Static, |n| n.accepts_new() && prefer(n))
            .or_else(|| rendezvous::owner(&topo.live, key_hash, Weights::Static, |n| n.accepts_new()));
        if let Some(n) = owner {
            return Ok((n.id(), RouteKind::Placed));
        }
        if self.inner.balancer.panic == PanicPolicy::Fail {
            return Err(Error::NoNodeAvailable { scope: Some(scope) });
        }
        rendezvous::owner(&topo.live, key_hash, Weights::Static, |_| true)
            .map(|n| (n.id(), RouteKind::Panic))
            .ok_or(Error::NoNodeAvailable { scope: Some(scope) })
    }

    /// Counts and builds a strict refusal.
    pub(crate) fn refuse(&self, scope: Scope, node: &Node) -> Error {
        node.counters.strict_refusals.fetch_add(1, Ordering::Relaxed);
        self.inner.scope[scope as usize].strict_refusals.fetch_add(1, Ordering::Relaxed);
        Error::StrictAffinity {
            scope,
            node: node.name().to_string(),
            state: if node.is_removed() { NodeState::Down } else { node.state() },
        }
    }

    /// Counts and builds a strict refusal whose owner this cluster does not
    /// know (`who`: the id the caller named): counted on the scope only.
    pub(crate) fn refuse_unknown(&self, scope: Scope, who: &str) -> Error {
        self.inner.scope[scope as usize].strict_refusals.fetch_add(1, Ordering::Relaxed);
        Error::StrictAffinity { scope, node: format!("{who} (not a node of this cluster)"), state: NodeState::Down }
    }

    /// Counts a routing outcome on the node and scope.
    #[inline]
    pub(crate) fn count(&self, topo: &Topology, scope: Option<Scope>, route: Route) {
        if let Some(n) = topo.node(route.node) {
            match route.kind {
                RouteKind::Affinity => n.counters.affinity_hits.incr(),
                RouteKind::Repinned => {
                    n.counters.other_picks.incr();
                    n.counters.repins.fetch_add(1, Ordering::Relaxed);
                }
                _ => n.counters.other_picks.incr(),
            }
        }
        if let Some(s) = scope {
            self.inner.scope[s as usize].count(route.kind);
        }
    }

    /// An unpinned, load-balanced pick that ignores any affinity. This is the
    /// one place an ejected node's half-open trial can be granted: the pick
    /// is one unit of work whose outcome the host reports on its lease.
    pub fn pick_balanced(&self) -> Result<Route> {
        self.pick_balanced_up().map(|(r, _)| r)
    }

    /// [`Cluster::pick_balanced`], and whether the node picked takes new
    /// work (`Up`, not removed) as the pick returns, asked of the node
    /// itself, without a snapshot load.
    #[inline]
    pub(crate) fn pick_balanced_up(&self) -> Result<(Route, bool)> {
        // Only the answer leaves the closure: moving a whole `Result` (its
        // error is large) through the `Option` took stores and loads of
        // different widths, a store-forwarding stall per pick. No answer
        // (no live node usable, or the list unreadable) takes the snapshot's
        // path, which gives the error.
        let picked = self.inner.live.with(|nodes| {
            let (n, panic) = self.choose_node(nodes, None, true, |_| true).ok()?;
            Some(self.count_balanced(n, panic))
        });
        if let Some(Some(r)) = picked {
            return Ok(r);
        }
        let topo = self.topo();
        let (n, panic) = self.choose_node(&topo.live, None, true, |_| true)?;
        Ok(self.count_balanced(n, panic))
    }

    /// Counts a balanced pick of `n` ([`Cluster::count`] without a scope).
    #[inline]
    fn count_balanced(&self, n: &Node, panic: bool) -> (Route, bool) {
        n.counters.other_picks.incr();
        (Route::new(n.id(), if panic { RouteKind::Panic } else { RouteKind::Balanced }), n.accepts_new())
    }
}
