//! Nodes: identity, state and health.
//!
//! A node's mutable state lives in atomics so that picks read it without a
//! lock; transitions take a per-node mutex so state-change counts are exact.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::counter::StripedCounter;
use crate::epoch::RoutingEpoch;
use crate::error::{Error, Result};
use crate::hash;

/// Stable index of a node within its cluster. Never reused after removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

/// Longest accepted node name.
pub const MAX_NODE_NAME: usize = 64;

/// Largest static weight (`node.<N>.weight`); the smallest is 1.
pub const MAX_WEIGHT: u32 = 1_000_000;

/// Checks a static weight.
pub fn check_weight(weight: u32) -> Result<()> {
    if weight == 0 || weight > MAX_WEIGHT {
        return Err(Error::InvalidArgument(format!("weight must be 1..={MAX_WEIGHT}, got {weight}")));
    }
    Ok(())
}

/// Administrative / observed state of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Takes new work and new affinities.
    Up,
    /// Planned maintenance: no new affinities; existing ones run to completion.
    Draining,
    /// Takes no picks; affinities to it are broken.
    Down,
}

impl NodeState {
    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Draining => "draining",
            NodeState::Down => "down",
        }
    }

    fn from_u8(v: u8) -> NodeState {
        match v {
            0 => NodeState::Up,
            1 => NodeState::Draining,
            _ => NodeState::Down,
        }
    }

    const fn to_u8(self) -> u8 {
        match self {
            NodeState::Up => 0,
            NodeState::Draining => 1,
            NodeState::Down => 2,
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for NodeState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "up" => Ok(NodeState::Up),
            "draining" | "drain" => Ok(NodeState::Draining),
            "down" => Ok(NodeState::Down),
            _ => Err(Error::InvalidArgument(format!("unknown node state `{s}` (expected up, draining or down)"))),
        }
    }
}

/// Why a node is down; decides what may bring it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DownCause {
    /// Not down.
    None,
    /// Set by the API / an operator.
    Admin,
    /// A FAN event said so.
    Event,
    /// Missed heartbeats.
    Heartbeat,
    /// Passive ejection after consecutive failures.
    Ejected,
    /// A planned drain's deadline passed (its shared input became a Down):
    /// the drain's end, not a failure, so work in flight was let finish.
    Drained,
}

impl DownCause {
    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            DownCause::None => "none",
            DownCause::Admin => "admin",
            DownCause::Event => "event",
            DownCause::Heartbeat => "heartbeat",
            DownCause::Ejected => "ejected",
            DownCause::Drained => "drained",
        }
    }

    fn from_u8(v: u8) -> DownCause {
        match v {
            1 => DownCause::Admin,
            2 => DownCause::Event,
            3 => DownCause::Heartbeat,
            4 => DownCause::Ejected,
            5 => DownCause::Drained,
            _ => DownCause::None,
        }
    }

    const fn to_u8(self) -> u8 {
        match self {
            DownCause::None => 0,
            DownCause::Admin => 1,
            DownCause::Event => 2,
            DownCause::Heartbeat => 3,
            DownCause::Ejected => 4,
            DownCause::Drained => 5,
        }
    }
}

/// What a node is, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Instance name, e.g. `MYDB1`.
    pub name: String,
    /// Optional `host:port` of the instance's listener.
    pub address: Option<String>,
    /// Static weight (≥ 1) for `weighted` balancing and rendezvous placement.
    pub weight: u32,
    /// The machine it runs on (a session's backup goes to another one);
    /// `None`: the host of `address`.
    pub machine: Option<String>,
    /// Its zone (rack, data centre) for locality-aware picks.
    pub zone: Option<String>,
}

impl NodeSpec {
    /// A node with weight 1 and no address.
    pub fn new(name: impl Into<String>) -> Self {
        NodeSpec { name: name.into(), address: None, weight: 1, machine: None, zone: None }
    }

    /// Sets the listener address.
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = Some(address.into());
        self
    }

    /// Sets the static weight.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the machine (default: the host of the address).
    pub fn machine(mut self, machine: impl Into<String>) -> Self {
        self.machine = Some(machine.into());
        self
    }

    /// Sets the zone.
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// The machine: as set, else the host of the address.
    pub fn machine_or_host(&self) -> Option<String> {
        self.machine.clone().or_else(|| {
            self.address
                .as_deref()
                .and_then(|a| crate::connect::split_host_port(a, 1521).ok())
                .map(|(h, _)| h.to_string())
        })
    }

    pub(crate) fn validate(&self) -> Result<()> {
        validate_node_name(&self.name)?;
        check_weight(self.weight)
            .map_err(|e| Error::InvalidArgument(format!("node `{}`: {}", self.name, e.detail())))?;
        if let Some(a) = &self.address {
            crate::connect::split_host_port(a, 1521).map_err(|e| {
                Error::InvalidArgument(format!("node `{}`: bad address `{a}`: {}", self.name, e.detail()))
            })?;
        }
        for (what, v) in [("machine", &self.machine), ("zone", &self.zone)] {
            if let Some(v) = v {
                validate_node_name(v).map_err(|e| {
                    Error::InvalidArgument(
                        format!("node `{}`: {what}: {}", self.name, e.detail()).replace("node name", what),
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// Node names are RAC instance names: they travel into metrics labels, JSON and
/// connect descriptors unescaped, so only a safe alphabet is accepted.
pub fn validate_node_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NODE_NAME {
        return Err(Error::InvalidArgument(format!("node name must be 1..={MAX_NODE_NAME} bytes, got {}", name.len())));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$' | '#'))) {
        return Err(Error::InvalidArgument(format!(
            "node name `{}` contains `{}`; allowed: letters, digits, _ - . $ #",
            name.escape_debug(),
            c.escape_debug()
        )));
    }
    Ok(())
}

/// When a planned drain of `timeout_ms` received now ends, on `clock`'s
/// monotonic time (0: no timeout). A drain dated by a clock (`dated_s`: a
/// FAN event's `timestamp=`, seconds since 1970 UTC) ends at that instant
/// plus the timeout in every process whose clock knows the wall time, so a
/// process that gets it late (a slow relay, a feed read after a restart)
/// drains no longer than the others: at once a Down when that instant has
/// passed. Never later than the timeout from now, so a wall clock behind
/// the server's never lengthens a drain. Processes then end it apart by
/// their clocks' skew, not by the delivery's delay.
pub(crate) fn drain_deadline(clock: &dyn Clock, timeout_ms: Option<u64>, dated_s: Option<u64>) -> u64 {
    let Some(timeout) = timeout_ms else { return 0 };
    let mut left = timeout;
    if let (Some(s), Some(wall)) = (dated_s, clock.unix_ms()) {
        left = left.min(s.saturating_mul(1000).saturating_add(timeout).saturating_sub(wall));
    }
    clock.now_ms().saturating_add(left).max(1)
}

/// Where a node listens and runs, from its [`NodeSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    address: Option<String>,
    host: Option<String>,
    machine: Option<String>,
    zone: Option<String>,
}

impl Place {
    fn of(spec: &NodeSpec, local: &LocalConfig) -> (Place, Locality) {
        let machine = spec.machine_or_host();
        let locality = local.classify(machine.as_deref(), spec.zone.as_deref());
        let host = spec
            .address
            .as_deref()
            .and_then(|a| crate::connect::split_host_port(a, 1521).ok())
            .map(|(h, _)| h.to_string());
        (Place { address: spec.address.clone(), host, machine, zone: spec.zone.clone() }, locality)
    }
}

/// Where a node sits relative to the calling process (`local.machine`,
/// `local.zone`): WebLogic's colocation and Envoy's zone-aware routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Locality {
    /// On this process's machine.
    Machine,
    /// In this process's zone.
    Zone,
    /// Elsewhere.
    Remote,
    /// No locality is configured.
    Unknown,
}

impl Locality {
    const ALL: [Locality; 4] = [Locality::Machine, Locality::Zone, Locality::Remote, Locality::Unknown];

    fn from_u8(v: u8) -> Locality {
        Locality::ALL.get(v as usize).copied().unwrap_or(Locality::Unknown)
    }

    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Locality::Machine => "machine",
            Locality::Zone => "zone",
            Locality::Remote => "remote",
            Locality::Unknown => "unknown",
        }
    }
}

/// Where this process runs (`local.machine`, `local.zone`) and how far a
/// local preference goes (`locality.spill_percent`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalConfig {
    /// This process's machine.
    pub machine: Option<String>,
    /// This process's zone.
    pub zone: Option<String>,
    /// Prefer the nearest tier only while its share of in-flight leases is at
    /// most this percent of its share of capacity (static weight); 0: always.
    pub spill_percent: u32,
}

impl LocalConfig {
    /// Whether any locality preference applies.
    pub fn is_set(&self) -> bool {
        self.machine.is_some() || self.zone.is_some()
    }

    pub(crate) fn classify(&self, machine: Option<&str>, zone: Option<&str>) -> Locality {
        if !self.is_set() {
            return Locality::Unknown;
        }
        let same =
            |a: &Option<String>, b: Option<&str>| matches!((a, b), (Some(a), Some(b)) if a.eq_ignore_ascii_case(b));
        if same(&self.machine, machine) {
            Locality::Machine
        } else if same(&self.zone, zone) {
            Locality::Zone
        } else {
            Locality::Remote
        }
    }
}

/// Passive-ejection and heartbeat thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Consecutive failed leases before a node is ejected (0 disables ejection).
    pub eject_after_failures: u32,
    /// First ejection lasts this long; each re-ejection doubles it.
    pub eject_base_ms: u64,
    /// Upper bound of the growing back-off.
    pub eject_max_ms: u64,
    /// How often the host should probe (informational for hosts' schedulers).
    pub heartbeat_interval_ms: u64,
    /// Consecutive missed probes before the node is Down.
    pub heartbeat_misses: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            eject_after_failures: 5,
            eject_base_ms: 1_000,
            eject_max_ms: 60_000,
            heartbeat_interval_ms: 10_000,
            heartbeat_misses: 3,
        }
    }
}

/// RLB flag, as in Oracle's advisories.
pub use crate::event::RlbFlag;

const NO_PERCENT: u8 = u8::MAX;

/// Per-node counters (see [`crate::metrics`]).
#[derive(Debug, Default)]
pub(crate) struct NodeCounters {
    /// Picks that were not affinity hits; total picks = this + `affinity_hits`,
    /// so a hit (the hot path) bumps one counter instead of two.
    pub other_picks: StripedCounter,
    pub affinity_hits: StripedCounter,
    pub in_flight: StripedCounter,
    pub repins: AtomicU64,
    pub strict_refusals: AtomicU64,
    pub successes: StripedCounter,
    pub failures: AtomicU64,
    pub state_changes: AtomicU64,
    pub ejections: AtomicU64,
    pub probe_misses: AtomicU64,
    /// Transactions that had branches here and then a branch placed elsewhere.
    pub tx_spans: AtomicU64,
}

/// The layers a node's state is made of; the most severe one is what picks
/// see. Each layer has its own inputs, so no input can lift what another
/// kind of input imposed, and the result does not depend on the order in
/// which inputs of different kinds arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layers {
    /// The operator's plain calls (`set_node_state`): `Up` when the operator
    /// imposes nothing. This process's own input: other processes may not
    /// have had the same call.
    admin: NodeState,
    /// This process's own evidence: `Down` after missed heartbeats or a
    /// passive ejection (its cause in `local_cause`), else `Up`.
    local: NodeState,
    local_cause: DownCause,
    /// What the shared inputs (FAN events, versioned operator calls) say:
    /// the input with the highest [`ShareKey`] wins, whatever the order of
    /// arrival.
    event: NodeState,
    /// The key of the input `event` came from (`None`: only unversioned
    /// inputs so far).
    event_key: Option<ShareKey>,
    /// `event` is the Down a planned drain's deadline turned its input into.
    event_drained: bool,
}

/// A versioned shared input about a node's state, as [`Node::set_shared`]
/// takes it: kept to apply to a node that did not exist when it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SharedInput {
    pub to: NodeState,
    pub version: u64,
    pub drain_ms: Option<u64>,
    pub drain_until: u64,
}

impl SharedInput {
    fn key(&self) -> ShareKey {
        ShareKey::new(self.version, self.to, self.drain_ms)
    }

    /// The input of the two that the join keeps.
    pub(crate) fn max(a: Option<SharedInput>, b: SharedInput) -> SharedInput {
        match a {
            Some(a) if a.key() >= b.key() => a,
            _ => b,
        }
    }
}

/// How versioned inputs about one node's state are ordered: the version
/// first, then, for two inputs with the same version (FAN timestamps have a
/// resolution of one second), the more severe state, then the longer drain.
/// A total order on the inputs' content, so every process keeps the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ShareKey {
    version: u64,
    severity: u8,
    drain_ms: u64,
}

impl ShareKey {
    fn new(version: u64, state: NodeState, drain_ms: Option<u64>) -> ShareKey {
        ShareKey { version, severity: state.to_u8(), drain_ms: drain_ms.map_or(0, |d| d.saturating_add(1)) }
    }
}

impl Layers {
    const UP: Layers = Layers {
        admin: NodeState::Up,
        local: NodeState::Up,
        local_cause: DownCause::None,
        event: NodeState::Up,
        event_key: None,
        event_drained: false,
    };

    /// The state picks see: the most severe layer wins, Down over Draining;
    /// between two downs the operator's, then the shared one, names the cause.
    fn effective(self) -> (NodeState, DownCause) {
        match (self.admin, self.event, self.local) {
            (NodeState::Down, _, _) => (NodeState::Down, DownCause::Admin),
            (_, NodeState::Down, _) if self.event_drained => (NodeState::Down, DownCause::Drained),
            (_, NodeState::Down, _) => (NodeState::Down, DownCause::Event),
            (_, _, NodeState::Down) => (NodeState::Down, self.local_cause),
            (NodeState::Draining, _, _) => (NodeState::Draining, DownCause::Admin),
            (_, NodeState::Draining, _) => (NodeState::Draining, DownCause::Event),
            _ => (NodeState::Up, DownCause::None),
        }
    }

    /// Whether the shared inputs let the node take new work: what strict
    /// placement across processes acts on.
    fn shared_up(self) -> bool {
        self.event == NodeState::Up
    }
}

/// A weight's versioned key and the weights it spanned while changing.
#[derive(Debug, Default, Clone, Copy)]
struct WeightWindow {
    key: Option<(u64, u32)>,
    /// When the weight last changed (0: never).
    changed_ms: u64,
    lo: u32,
    hi: u32,
}

/// Passive-health bookkeeping, changed under the node's transition lock.
#[derive(Debug, Default)]
struct Breaker {
    ejections_in_row: u32,
    /// Leases that were in flight when the node was ejected: their outcomes
    /// say nothing about a node that may have come back since.
    stale_leases: i64,
    /// A half-open trial was granted and its outcome is not in yet.
    trial_out: bool,
}

/// A node's runtime record, shared by every snapshot that contains it.
#[derive(Debug)]
pub struct Node {
    id: NodeId,
    name: Box<str>,
    /// The name as placement hashes and orders it (ASCII upper case): names
    /// match case-insensitively, so `rac1` and `RAC1` must place alike.
    canonical: Box<str>,
    seed: u64,
    /// The node's id inside session routing tokens (`token.rs`), computed once.
    token_id: u32,
    /// Where it listens and runs: as added, replaced by a newer versioned
    /// membership input (`Cluster::add_node_at`), so every process that
    /// got the same inputs names the same host (FAN `NODE` events).
    place: Mutex<Arc<Place>>,
    /// Where the node sits relative to this process (see [`Locality`]),
    /// derived from `place`; read by picks without a lock.
    locality: AtomicU8,
    weight: AtomicU32,
    /// The weight's versioned key and the range it took while changing.
    weight_window: Mutex<WeightWindow>,
    /// When the node was last added or removed (0: configured at start).
    member_since: AtomicU64,
    /// Effective state and cause, mirrored from `layers` for lock-free picks.
    state: AtomicU8,
    cause: AtomicU8,
    /// The Down in `state` ended a planned drain (`down_is_planned`).
    planned_down: AtomicBool,
    removed: AtomicBool,
    ejected_until: AtomicU64,
    /// End of a planned drain's `drain_timeout` (0: none); read only while
    /// the node is Draining, so picks on Up nodes never look at the clock.
    drain_until: AtomicU64,
    consecutive_failures: AtomicU32,
    misses: AtomicU32,
    rlb_percent: AtomicU8,
    rlb_flag: AtomicU8,
    aff: AtomicBool,
    session_epoch: AtomicU32,
    /// The cluster's routing epoch, advanced after every change below.
    routing: Arc<RoutingEpoch>,
    /// Whether the node takes new work by the inputs every process gets
    /// (`Layers::shared_up`), mirrored for lock-free placement.
    shared_up: AtomicBool,
    /// When the node last started or stopped taking new work by those inputs
    /// (0: never since it was added). Strict placement waits for every
    /// process to have seen such a change before placing around it.
    new_work_since: AtomicU64,
    clock: NodeClock,
    pub(crate) counters: NodeCounters,
    health: Mutex<(Layers, Breaker)>,
}

/// The cluster's clock, shared by its nodes (so state changes carry a time).
struct NodeClock(Arc<dyn Clock>);

impl fmt::Debug for NodeClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NodeClock")
    }
}

/// What happened to a node's state in one transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transition {
    pub from: NodeState,
    pub to: NodeState,
}

/// Where an outcome report comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutcomeSource {
    /// The end of a lease counted in `in_flight`.
    Lease,
    /// A report outside any lease (`report_outcome`).
    Report,
}

impl Node {
    pub(crate) fn new(
        id: NodeId,
        spec: &NodeSpec,
        local: &LocalConfig,
        clock: Arc<dyn Clock>,
        routing: Arc<RoutingEpoch>,
    ) -> Node {
        let (place, locality) = Place::of(spec, local);
        Node {
            id,
            name: spec.name.clone().into_boxed_str(),
            canonical: spec.name.to_ascii_uppercase().into_boxed_str(),
            seed: hash::node_seed(&spec.name),
            token_id: crate::token::token_id_of(&spec.name),
            place: Mutex::new(Arc::new(place)),
            locality: AtomicU8::new(locality as u8),
            weight: AtomicU32::new(spec.weight),
            weight_window: Mutex::new(WeightWindow::default()),
            member_since: AtomicU64::new(0),
            state: AtomicU8::new(NodeState::Up.to_u8()),
            cause: AtomicU8::new(DownCause::None.to_u8()),
            planned_down: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            ejected_until: AtomicU64::new(0),
            drain_until: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            misses: AtomicU32::new(0),
            rlb_percent: AtomicU8::new(NO_PERCENT),
            rlb_flag: AtomicU8::new(0),
            aff: AtomicBool::new(true),
            session_epoch: AtomicU32::new(0),
            routing,
            shared_up: AtomicBool::new(true),
            new_work_since: AtomicU64::new(0),
            clock: NodeClock(clock),
            counters: NodeCounters::default(),
            health: Mutex::new((Layers::UP, Breaker::default())),
        }
    }

    /// Stable id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Instance name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as placement hashes and orders it: ASCII upper case.
    #[inline]
    pub(crate) fn canonical_name(&self) -> &str {
        &self.canonical
    }

    fn place(&self) -> Arc<Place> {
        crate::fork::lock(&self.place).clone()
    }

    /// Its `host:port`, if any: as configured or added, or as the newest
    /// versioned membership input put it.
    pub fn address(&self) -> Option<String> {
        self.place().address.clone()
    }

    /// Host part of the address (FAN `NODE` events name hosts).
    pub fn host(&self) -> Option<String> {
        self.place().host.clone()
    }

    /// The machine it runs on (`node.<N>.machine`, else the address's host).
    pub fn machine(&self) -> Option<String> {
        self.place().machine.clone()
    }

    /// Whether a FAN `NODE` event naming `host` is about this node: its
    /// address's host or its machine, ignoring ASCII case. Clusterware names
    /// a node by its short host name while addresses are usually VIPs or
    /// full DNS names, so a name without a dot also matches the first label
    /// of a DNS name (`rac1` matches `rac1.example.com`, never `rac1-vip`).
    pub(crate) fn is_on_host(&self, host: &str) -> bool {
        let place = self.place();
        let short = !host.contains('.');
        let names = [place.host.as_deref(), place.machine.as_deref()];
        let on = names.into_iter().flatten().any(|name| {
            name.eq_ignore_ascii_case(host)
                || (short
                    && name.parse::<std::net::IpAddr>().is_err()
                    && name.split('.').next().is_some_and(|label| label.eq_ignore_ascii_case(host)))
        });
        on
    }

    /// Its zone (`node.<N>.zone`).
    pub fn zone(&self) -> Option<String> {
        self.place().zone.clone()
    }

    /// Where it sits relative to this process.
    #[inline]
    pub fn locality(&self) -> Locality {
        Locality::from_u8(self.locality.load(Ordering::Relaxed))
    }

    /// Takes `spec`'s address, machine and zone (a newer membership input
    /// than the one it was added by). Returns whether any changed.
    pub(crate) fn set_place(&self, spec: &NodeSpec, local: &LocalConfig) -> bool {
        let (place, locality) = Place::of(spec, local);
        let mut g = crate::fork::lock(&self.place);
        if **g == place {
            return false;
        }
        *g = Arc::new(place);
        self.locality.store(locality as u8, Ordering::Relaxed);
        drop(g);
        self.routing.advance();
        true
    }

    #[inline]
    pub(crate) fn token_id(&self) -> u32 {
        self.token_id
    }

    /// Rendezvous seed: `h(name)`.
    #[inline]
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Current state: the more severe of the operator's and the automatic layer.
    #[inline]
    pub fn state(&self) -> NodeState {
        self.apply_expired_drain();
        NodeState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// A planned drain whose timeout has ended is a Down, whoever looks
    /// first: a route, or an operator's, a metric's or a health check's read.
    #[inline]
    fn apply_expired_drain(&self) {
        if self.state.load(Ordering::Acquire) == NodeState::Draining.to_u8()
            && self.drain_until.load(Ordering::Acquire) != 0
        {
            self.drain_expired(&*self.clock.0);
        }
    }

    /// Why it is down or draining ([`DownCause::None`] when up); `Admin`
    /// whenever the operator's layer decides the state.
    pub fn down_cause(&self) -> DownCause {
        self.apply_expired_drain();
        DownCause::from_u8(self.cause.load(Ordering::Acquire))
    }

    /// Whether the node is Down at the end of a planned drain (the drain's
    /// deadline passed, or the operator's Down came while it drained), or
    /// was removed while it drained or after: the pools let connections in
    /// use finish their requests. `false` while Up or Draining and for a
    /// Down by a failure (a FAN failure however delivered, missed
    /// heartbeats, an ejection, the operator's Down of a node taking work),
    /// after which the pools abort them. Its own answer, not the bindings':
    /// one that polls states may never see the node Draining.
    pub fn down_is_planned(&self) -> bool {
        self.apply_expired_drain();
        let state = self.state.load(Ordering::Acquire);
        if self.is_removed() && state == NodeState::Draining.to_u8() {
            return true;
        }
        state == NodeState::Down.to_u8() && self.planned_down.load(Ordering::Acquire)
    }

    /// The version key of the shared input the node's shared state came
    /// from (`None`: only unversioned inputs so far); changes when a
    /// versioned input applies.
    pub(crate) fn shared_key(&self) -> Option<(u64, u8, u64)> {
        self.lock().0.event_key.map(|k| (k.version, k.severity, k.drain_ms))
    }

    /// The state shared inputs alone give (FAN events, versioned calls).
    pub fn shared_state(&self) -> NodeState {
        self.apply_expired_drain();
        self.lock().0.event
    }

    /// What the operator imposes (`Up` when nothing).
    pub fn admin_state(&self) -> NodeState {
        self.lock().0.admin
    }

    /// True once removed from the cluster; existing affinities then break.
    #[inline]
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Static weight.
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// A weight change: with a version it applies only above the key in
    /// force (version, then the larger weight), so any order of arrival ends
    /// alike; without one it applies as the latest word. While changes keep
    /// coming within `settle_ms` of each other, the range of weights they
    /// spanned is kept: other processes may still rank by any of them.
    /// Returns whether it applied.
    pub(crate) fn set_weight(&self, w: u32, version: Option<u64>, settle_ms: u64) -> bool {
        let mut win = crate::fork::lock(&self.weight_window);
        let old = self.widen_weight_window(&mut win, w, settle_ms);
        if let Some(v) = version {
            if win.key.is_some_and(|k| k >= (v, w)) {
                return false;
            }
            win.key = Some((v, w));
        }
        if old != w {
            self.weight.store(w, Ordering::Relaxed);
            self.routing.advance();
        }
        true
    }

    /// A shared input that carries weight `w` and changes nothing here (a
    /// stale addition of this node): it still widens the weight window.
    pub(crate) fn weight_input_seen(&self, w: u32, settle_ms: u64) {
        let mut win = crate::fork::lock(&self.weight_window);
        self.widen_weight_window(&mut win, w, settle_ms);
    }

    /// Every weight received widens the window, applied or not: another
    /// process may rank by it now, having got the inputs in another order.
    /// Returns the weight in force.
    fn widen_weight_window(&self, win: &mut WeightWindow, w: u32, settle_ms: u64) -> u32 {
        let old = self.weight.load(Ordering::Relaxed);
        let now = self.clock.0.now_ms().max(1);
        if win.changed_ms == 0 || now.saturating_sub(win.changed_ms) >= settle_ms {
            (win.lo, win.hi) = (old, old);
        }
        (win.lo, win.hi) = (win.lo.min(w), win.hi.max(w));
        win.changed_ms = now;
        old
    }

    /// The weights other processes may rank this node by now: the current
    /// one once it has held for `settle_ms`, else every weight since the
    /// node's weight last held that long.
    pub(crate) fn weight_range(&self, settle_ms: u64) -> (u32, u32) {
        let win = *crate::fork::lock(&self.weight_window);
        let w = self.weight();
        if win.changed_ms == 0 || self.clock.0.now_ms().saturating_sub(win.changed_ms) >= settle_ms {
            (w, w)
        } else {
            (win.lo.min(w), win.hi.max(w))
        }
    }

    /// Whether the node's membership (added, removed) has held for `settle_ms`.
    pub(crate) fn member_settled(&self, settle_ms: u64) -> bool {
        let since = self.member_since.load(Ordering::Acquire);
        since == 0 || self.clock.0.now_ms().saturating_sub(since) >= settle_ms
    }

    pub(crate) fn stamp_member_change(&self) {
        self.member_since.store(self.clock.0.now_ms().max(1), Ordering::Release);
        self.stamp_new_work_change();
    }

    /// RLB percent from the last advisory, if any.
    pub fn rlb_percent(&self) -> Option<u8> {
        match self.rlb_percent.load(Ordering::Relaxed) {
            NO_PERCENT => None,
            p => Some(p),
        }
    }

    /// RLB flag from the last advisory, if any.
    pub fn rlb_flag(&self) -> Option<RlbFlag> {
        match self.rlb_flag.load(Ordering::Relaxed) {
            1 => Some(RlbFlag::Good),
            2 => Some(RlbFlag::Violating),
            3 => Some(RlbFlag::NoData),
            4 => Some(RlbFlag::Unknown),
            5 => Some(RlbFlag::Blocked),
            _ => None,
        }
    }

    /// Session affinity advised by the instance (`aff=`); true until told otherwise.
    #[inline]
    pub fn affinity_advised(&self) -> bool {
        self.aff.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn session_epoch(&self) -> u32 {
        self.session_epoch.load(Ordering::Acquire)
    }

    /// Weight used by `weighted` balancing: the RLB percent once advisories
    /// arrive (0 when BLOCKED), else the static weight.
    #[inline]
    pub fn effective_weight(&self) -> u32 {
        match self.rlb_percent.load(Ordering::Relaxed) {
            NO_PERCENT => self.weight(),
            _ if self.rlb_flag.load(Ordering::Relaxed) == 5 => 0,
            p => u32::from(p),
        }
    }

    /// In-flight leases, the library's and the hosts' (see [`RoutingEpoch`]).
    #[inline]
    pub fn in_flight(&self) -> i64 {
        self.counters.in_flight.sum_signed().wrapping_add(self.routing.host_in_flight(self.id.0))
    }

    /// Moves the `Ok` ends hosts counted in their lease words into the
    /// node's successes. Any such end came after the failures counted so
    /// far, which are then no longer consecutive.
    pub(crate) fn collect_host_oks(&self) {
        let oks = self.routing.collect_host_oks(self.id.0);
        if oks > 0 {
            self.counters.successes.add(oks);
            self.consecutive_failures.store(0, Ordering::Relaxed);
            if self.state.load(Ordering::Acquire) == NodeState::Down.to_u8() {
                discount_stale(&mut self.lock().1, oks);
            }
        }
    }

    /// [`Node::collect_host_oks`] under the node's transition lock.
    fn collect_host_oks_locked(&self, breaker: &mut Breaker) {
        let oks = self.routing.collect_host_oks(self.id.0);
        if oks > 0 {
            self.counters.successes.add(oks);
            self.consecutive_failures.store(0, Ordering::Relaxed);
            discount_stale(breaker, oks);
        }
    }

    /// Whether the node can take *new* work or affinities now (Up and not
    /// removed): what hosts ask before keeping a connection to it pooled.
    #[inline]
    pub fn accepts_new(&self) -> bool {
        self.state.load(Ordering::Acquire) == NodeState::Up.to_u8() && !self.is_removed()
    }

    /// [`Node::accepts_new`] by the inputs every process gets: this
    /// process's missed heartbeats and passive ejection left out.
    #[inline]
    pub(crate) fn accepts_new_shared(&self) -> bool {
        self.shared_up.load(Ordering::Acquire) && !self.is_removed()
    }

    pub(crate) fn stamp_new_work_change(&self) {
        self.new_work_since.store(self.clock.0.now_ms().max(1), Ordering::Release);
    }

    /// Whether the node's taking or refusing new work has held for at least
    /// `settle_ms`, so every process fed the same events sees it too.
    #[inline]
    pub(crate) fn new_work_settled(&self, settle_ms: u64) -> bool {
        let since = self.new_work_since.load(Ordering::Acquire);
        since == 0 || settle_ms == 0 || self.clock.0.now_ms().saturating_sub(since) >= settle_ms
    }

    /// Milliseconds since the node's last shared change that can move a
    /// placement: taking or refusing new work, membership, weight.
    pub(crate) fn new_work_changed_ago_ms(&self) -> u64 {
        let weight_at = crate::fork::lock(&self.weight_window).changed_ms;
        let since = self.new_work_since.load(Ordering::Acquire).max(weight_at);
        if since == 0 {
            u64::MAX
        } else {
            self.clock.0.now_ms().saturating_sub(since)
        }
    }

    /// Whether work already bound to this node may continue here: not Down,
    /// not removed, and not past a planned drain's timeout (which turns the
    /// drain into a Down, so pins and sessions move or refuse at once).
    #[inline]
    pub(crate) fn accepts_existing(&self, clock: &dyn Clock) -> bool {
        match self.state.load(Ordering::Acquire) {
            0 => !self.is_removed(),
            1 => !self.is_removed() && !self.drain_expired(clock),
            _ => false,
        }
    }

    #[cold]
    fn drain_expired(&self, clock: &dyn Clock) -> bool {
        let until = self.drain_until.load(Ordering::Acquire);
        if until == 0 || clock.now_ms() < until {
            return false;
        }
        let mut g = self.lock();
        if g.0.event == NodeState::Draining && self.drain_until.load(Ordering::Acquire) == until {
            // The drain's own input turns into a Down: it keeps the drain's
            // key, so an older input arriving later changes nothing.
            let before = g.0.effective();
            g.0.event = NodeState::Down;
            g.0.event_drained = true;
            self.drain_until.store(0, Ordering::Release);
            self.publish(before, g.0);
        }
        self.state.load(Ordering::Acquire) == NodeState::Down.to_u8()
    }

    /// A planned drain (FAN `down`, `reason=USER`): with a timeout, existing
    /// work may continue until `until` ([`drain_deadline`]), then the node
    /// counts as Down. Only the shared layer changes: a node this process
    /// saw die stays Down until a FAN `up` or an answering probe, and the
    /// drain's deadline survives whatever this process's own evidence does
    /// meanwhile.
    pub(crate) fn drain_for(&self, timeout_ms: Option<u64>, version: Option<u64>, until: u64) -> Option<Transition> {
        self.set_shared(NodeState::Draining, version, timeout_ms, if timeout_ms.is_some() { until } else { 0 })
    }

    /// When a planned drain's timeout ends (None: no drain with a timeout).
    pub fn drain_deadline_ms(&self) -> Option<u64> {
        match self.drain_until.load(Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }

    /// Grants the half-open trial of an ejected node whose back-off elapsed:
    /// one per back-off period, for one leased unit of work whose outcome the
    /// host reports. Never for a long-lived affinity: a trial that fails
    /// would strand it on a dead node.
    #[inline]
    pub(crate) fn try_trial(&self, clock: &dyn Clock, health: &HealthConfig) -> bool {
        if self.state.load(Ordering::Acquire) != NodeState::Down.to_u8()
            || self.cause.load(Ordering::Relaxed) != DownCause::Ejected.to_u8()
            || self.is_removed()
        {
            return false;
        }
        let until = self.ejected_until.load(Ordering::Acquire);
        let now = clock.now_ms();
        if now < until {
            return false;
        }
        let mut g = self.lock();
        let (layers, breaker) = &mut *g;
        // An operator's drain or mark-down admits no new work, trials included.
        if layers.admin != NodeState::Up
            || layers.event == NodeState::Down
            || layers.local != NodeState::Down
            || layers.local_cause != DownCause::Ejected
        {
            return false;
        }
        // One trial per back-off period; a lost trial re-arms after another period.
        let next = now + backoff_ms(health, breaker.ejections_in_row);
        if self.ejected_until.compare_exchange(until, next, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        breaker.trial_out = true;
        self.routing.advance();
        true
    }

    /// Milliseconds until an ejected node admits its next trial (0 if not ejected).
    pub fn ejected_for_ms(&self, clock: &dyn Clock) -> u64 {
        let g = self.lock();
        if g.0.local != NodeState::Down || g.0.local_cause != DownCause::Ejected {
            return 0;
        }
        self.ejected_until.load(Ordering::Acquire).saturating_sub(clock.now_ms())
    }

    /// Consecutive missed heartbeats so far.
    pub fn heartbeat_misses(&self) -> u32 {
        self.misses.load(Ordering::Relaxed)
    }

    fn lock(&self) -> crate::fork::Gated<'_, (Layers, Breaker)> {
        crate::fork::lock(&self.health)
    }

    /// Publishes the effective state of `layers`; counts a change of state.
    fn publish(&self, before: (NodeState, DownCause), layers: Layers) -> Option<Transition> {
        let (to, cause) = layers.effective();
        if self.shared_up.swap(layers.shared_up(), Ordering::AcqRel) != layers.shared_up() {
            self.stamp_new_work_change();
        }
        let planned = to == NodeState::Down
            && match cause {
                DownCause::Drained => true,
                // The operator's Down of a draining node ends its drain; of a
                // node taking work it is as sudden as a failure.
                DownCause::Admin => {
                    before.0 == NodeState::Draining
                        || (before.0 == NodeState::Down && self.planned_down.load(Ordering::Acquire))
                }
                _ => false,
            };
        self.planned_down.store(planned, Ordering::Release);
        self.cause.store(cause.to_u8(), Ordering::Release);
        self.state.store(to.to_u8(), Ordering::Release);
        if before != (to, cause) {
            self.routing.advance();
        }
        if before.0 == to {
            return None;
        }
        self.counters.state_changes.fetch_add(1, Ordering::Relaxed);
        Some(Transition { from: before.0, to })
    }

    /// Sets this process's own evidence; lifting it clears passive-health
    /// history.
    fn set_local(&self, g: &mut (Layers, Breaker), to: NodeState, cause: DownCause) -> Option<Transition> {
        let before = g.0.effective();
        g.0.local = to;
        g.0.local_cause = if to == NodeState::Up { DownCause::None } else { cause };
        if to == NodeState::Up {
            self.clear_history(g);
        }
        self.publish(before, g.0)
    }

    fn clear_history(&self, g: &mut (Layers, Breaker)) {
        g.1 = Breaker::default();
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.misses.store(0, Ordering::Relaxed);
    }

    /// The operator's plain call. `Up` lifts the operator's layer and this
    /// process's own evidence (the operator asserts the node is fine; the
    /// detectors find out again if it is not), never what a shared input
    /// says: a FAN `down` stays until a FAN `up` or a versioned call with a
    /// newer version, so the result is the same in any order of arrival.
    pub(crate) fn set_admin(&self, to: NodeState) -> Option<Transition> {
        let mut g = self.lock();
        let before = g.0.effective();
        g.0.admin = to;
        if to == NodeState::Up {
            g.0.local = NodeState::Up;
            g.0.local_cause = DownCause::None;
            self.clear_history(&mut g);
        }
        self.publish(before, g.0)
    }

    /// A shared input about the node's state (a FAN event, a versioned
    /// operator call). With a version it applies only if its [`ShareKey`] is
    /// above the one in force (the join that makes every order of arrival
    /// end alike); without one it applies as the latest word and leaves the
    /// key in force. An `up` also lifts this process's own evidence.
    pub(crate) fn set_shared(
        &self,
        to: NodeState,
        version: Option<u64>,
        drain_ms: Option<u64>,
        drain_until: u64,
    ) -> Option<Transition> {
        let mut g = self.lock();
        // Every shared input received starts a settle time, even one that
        // changes nothing here (older than what is in force, or equal to
        // it): another process may hold its value right now, having got it
        // in another order, and this process cannot tell (soak seed 267259).
        self.stamp_new_work_change();
        if let Some(v) = version {
            let key = ShareKey::new(v, to, drain_ms);
            if g.0.event_key.is_some_and(|k| k >= key) {
                return None;
            }
            g.0.event_key = Some(key);
        }
        let before = g.0.effective();
        g.0.event = to;
        g.0.event_drained = false;
        self.drain_until.store(if to == NodeState::Draining { drain_until } else { 0 }, Ordering::Release);
        if to == NodeState::Up && g.0.local != NodeState::Up {
            g.0.local = NodeState::Up;
            g.0.local_cause = DownCause::None;
            self.clear_history(&mut g);
        }
        // A new drain deadline is news to routes even when the state stays.
        self.routing.advance();
        self.publish(before, g.0)
    }

    /// The versioned shared input in force here, to hand to another node
    /// (`None`: only unversioned inputs so far).
    fn shared_input(&self) -> Option<SharedInput> {
        let g = self.lock();
        g.0.event_key.map(|key| SharedInput {
            to: g.0.event,
            version: key.version,
            drain_ms: key.drain_ms.checked_sub(1),
            drain_until: self.drain_until.load(Ordering::Acquire),
        })
    }

    /// Applies a versioned shared input as it arrived elsewhere (the join
    /// keeps the higher of it and what is in force).
    pub(crate) fn apply_shared(&self, input: SharedInput) -> Option<Transition> {
        self.set_shared(input.to, Some(input.version), input.drain_ms, input.drain_until)
    }

    /// Takes the versioned inputs of `old`, an earlier incarnation of this
    /// name (removed since): its shared state and its versioned weight.
    pub(crate) fn inherit_shared(&self, old: &Node, settle_ms: u64) {
        if let Some(input) = old.shared_input() {
            self.apply_shared(input);
        }
        let key = crate::fork::lock(&old.weight_window).key;
        if let Some((version, w)) = key {
            self.set_weight(w, Some(version), settle_ms);
        }
    }

    /// A FAN event's down (or a versioned operator call's).
    pub(crate) fn event_down(&self, version: Option<u64>) -> Option<Transition> {
        self.set_shared(NodeState::Down, version, None, 0)
    }

    /// A FAN event's up: lifts what shared inputs, heartbeats and ejection
    /// imposed (never an operator's plain mark-down or drain).
    pub(crate) fn event_up(&self, version: Option<u64>) -> Option<Transition> {
        self.set_shared(NodeState::Up, version, None, 0)
    }

    /// Lifts this process's own evidence (missed heartbeats, ejection); what
    /// shared inputs say stays, so a probe that answers never ends a planned
    /// drain nor its deadline.
    fn lift_local(&self, g: &mut (Layers, Breaker)) -> Option<Transition> {
        if g.0.local == NodeState::Up || !matches!(g.0.local_cause, DownCause::Heartbeat | DownCause::Ejected) {
            return None;
        }
        self.set_local(g, NodeState::Up, DownCause::None)
    }

    /// A unit of work on this node finished; `ok` is false for a node-level
    /// failure.
    ///
    /// While the node is ejected only the half-open trial's outcome counts:
    /// leases that were in flight at the ejection end first (each one
    /// discounts itself), and outside a trial nothing is judged, so a burst of
    /// late failures cannot stretch the back-off and a late success cannot
    /// close the breaker. Leases carry no identity, so a trial overtaken by a
    /// slower pre-ejection lease is counted as that lease; the next trial
    /// corrects it.
    pub(crate) fn record_outcome(
        &self,
        ok: bool,
        source: OutcomeSource,
        clock: &dyn Clock,
        health: &HealthConfig,
    ) -> Option<Transition> {
        if ok {
            self.counters.successes.incr();
            // The hot path: a success on a node that is not down takes no lock.
            if self.state.load(Ordering::Acquire) != NodeState::Down.to_u8() {
                if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
                    self.consecutive_failures.store(0, Ordering::Relaxed);
                }
                return None;
            }
        } else {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        let mut g = self.lock();
        // Host leases end `Ok` in their words, unseen until collected: an
        // end that raced the ejection (the host read the epoch just before
        // it moved) must discount itself before a trial's outcome is judged,
        // or the trial would be taken for that stale lease.
        self.collect_host_oks_locked(&mut g.1);
        if g.0.local == NodeState::Down && g.0.local_cause == DownCause::Ejected {
            if source == OutcomeSource::Lease && g.1.stale_leases > 0 {
                g.1.stale_leases -= 1;
                return None;
            }
            if !std::mem::take(&mut g.1.trial_out) {
                return None;
            }
            return if ok { self.lift_local(&mut g) } else { self.eject(&mut g, clock, health) };
        }
        if ok {
            self.consecutive_failures.store(0, Ordering::Relaxed);
            return None;
        }
        let n = self.consecutive_failures.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        if health.eject_after_failures == 0
            || g.0.local == NodeState::Down
            || g.0.event == NodeState::Down
            || n < health.eject_after_failures
        {
            return None;
        }
        g.1.stale_leases = self.in_flight().max(0);
        self.eject(&mut g, clock, health)
    }

    /// A lease ended without a verdict; it still discounts itself if it was
    /// in flight at the ejection.
    pub(crate) fn lease_ended_neutral(&self) {
        if self.state.load(Ordering::Acquire) != NodeState::Down.to_u8() {
            return;
        }
        let mut g = self.lock();
        if g.1.stale_leases > 0 {
            g.1.stale_leases -= 1;
        }
    }

    fn eject(&self, g: &mut (Layers, Breaker), clock: &dyn Clock, health: &HealthConfig) -> Option<Transition> {
        g.1.ejections_in_row = g.1.ejections_in_row.saturating_add(1);
        g.1.trial_out = false;
        self.ejected_until.store(clock.now_ms() + backoff_ms(health, g.1.ejections_in_row), Ordering::Release);
        self.counters.ejections.fetch_add(1, Ordering::Relaxed);
        let before = g.0.effective();
        g.0.local = NodeState::Down;
        g.0.local_cause = DownCause::Ejected;
        self.publish(before, g.0)
    }

    /// The host's heartbeat probe of this node finished.
    pub(crate) fn record_probe(&self, ok: bool, health: &HealthConfig) -> Option<Transition> {
        if ok {
            self.misses.store(0, Ordering::Relaxed);
            return self.lift_local(&mut self.lock());
        }
        self.counters.probe_misses.fetch_add(1, Ordering::Relaxed);
        let m = self.misses.fetch_add(1, Ordering::AcqRel) + 1;
        let mut g = self.lock();
        if m >= health.heartbeat_misses && g.0.local != NodeState::Down {
            return self.set_local(&mut g, NodeState::Down, DownCause::Heartbeat);
        }
        None
    }

    /// Applies one RLB advisory entry. Returns true when session affinity was
    /// revoked (aff went from TRUE to FALSE).
    pub(crate) fn set_advice(&self, percent: u8, flag: RlbFlag, aff: bool) -> bool {
        self.rlb_percent.store(percent.min(100), Ordering::Relaxed);
        let f = match flag {
            RlbFlag::Good => 1,
            RlbFlag::Violating => 2,
            RlbFlag::NoData => 3,
            RlbFlag::Unknown => 4,
            RlbFlag::Blocked => 5,
        };
        self.rlb_flag.store(f, Ordering::Relaxed);
        let was = self.aff.swap(aff, Ordering::AcqRel);
        let revoked = was && !aff;
        if revoked {
            // Bumping the epoch invalidates every session entry made before it
            // in O(1); entries are dropped lazily on their next lookup.
            self.session_epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.routing.advance();
        revoked
    }

    /// An advisory that does not name this node: the instance offers the
    /// service no share of new work (its percent is 0), and its session
    /// advice is left as it was.
    pub(crate) fn set_unadvised(&self) {
        self.rlb_percent.store(0, Ordering::Relaxed);
        self.rlb_flag.store(3, Ordering::Relaxed);
        self.routing.advance();
    }

    pub(crate) fn mark_removed(&self) {
        self.stamp_member_change();
        self.removed.store(true, Ordering::Release);
        self.session_epoch.fetch_add(1, Ordering::AcqRel);
        self.routing.advance();
    }
}

/// `oks` leases that ended `Ok` in hosts' words since the last collection:
/// any of them in flight at an ejection was counted stale, and each one
/// discounts itself as a library lease's end does.
fn discount_stale(breaker: &mut Breaker, oks: u64) {
    breaker.stale_leases = breaker.stale_leases.saturating_sub(i64::try_from(oks).unwrap_or(i64::MAX)).max(0);
}

fn backoff_ms(health: &HealthConfig, ejections_in_row: u32) -> u64 {
    let shift = ejections_in_row.saturating_sub(1).min(30);
    health.eject_base_ms.saturating_mul(1u64 << shift).min(health.eject_max_ms.max(health.eject_base_ms))
}
