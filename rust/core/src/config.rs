//! Cluster configuration: a Rust builder and one text format that every
//! binding passes through unchanged.
//!
//! The text format is Java-properties-like, so it also fits bean properties and
//! app-server `<Resource>` attributes: `key = value` entries separated by
//! newlines or `;`, blank lines and lines starting with `#` or `!` ignored.
//! Every key is documented in the README; an unknown key is an error, because
//! a typo silently ignored would be a routing bug found in production.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::balance::{PanicPolicy, Policy};
use crate::error::{Error, Result};
use crate::node::{validate_node_name, HealthConfig, LocalConfig, NodeSpec};

/// Largest accepted config text.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;
/// Upper bound on `data.partitions`.
pub const MAX_PARTITIONS: u32 = 1 << 20;

/// Where a *new* transaction, session or data partition is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Weighted rendezvous hashing: every process places the same id on the
    /// same node with no shared state.
    Rendezvous,
    /// The cluster's load-balancing policy.
    Balanced,
}

impl Placement {
    /// Config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Placement::Rendezvous => "rendezvous",
            Placement::Balanced => "balanced",
        }
    }

    fn parse(key: &str, v: &str) -> Result<Self> {
        match v {
            "rendezvous" => Ok(Placement::Rendezvous),
            "balanced" => Ok(Placement::Balanced),
            _ => Err(Error::config(key, format!("expected rendezvous or balanced, got `{v}`"))),
        }
    }
}

/// What the nodes are to each other, which decides how in-doubt
/// transactions are recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RecoveryScope {
    /// Independent databases (sharding, or the local test nodes): a branch
    /// exists on one node only; each node is scanned and completes the ids it
    /// returned; an id on two nodes is a split transaction.
    #[default]
    Node,
    /// Instances of one database (Oracle RAC): any instance lists every
    /// in-doubt id and can complete it, so one answering instance suffices.
    Database,
}

impl RecoveryScope {
    /// Config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecoveryScope::Node => "node",
            RecoveryScope::Database => "database",
        }
    }
}

impl std::str::FromStr for RecoveryScope {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "node" => Ok(RecoveryScope::Node),
            "database" => Ok(RecoveryScope::Database),
            _ => Err(Error::config("recovery.scope", format!("expected node or database, got `{s}`"))),
        }
    }
}

/// How web sessions are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionMode {
    /// A registry of key → node with an idle TTL.
    Registry,
    /// No state: rendezvous hashing of the key over nodes advising affinity.
    Stateless,
}

/// Per-thread / per-context pinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadConfig {
    /// Refuse instead of re-pinning when the pinned node goes down.
    pub strict: bool,
    /// Every pick on an unpinned thread pins it (seed 000's connection factory).
    pub auto_pin: bool,
}

/// Transaction (XA gtrid) affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionConfig {
    /// `useStrictXAAffinity`: refuse instead of re-placing an unprepared gtrid.
    pub strict: bool,
    /// Placement of a new gtrid.
    pub placement: Placement,
    /// Strict mode only: how long a node's change between taking and
    /// refusing new work is treated as not yet seen by every process (the
    /// spread of FAN delivery). Meanwhile a new gtrid whose owner it is gets
    /// refused rather than placed by a view other processes may not share.
    pub settle_ms: u64,
}

/// Web-session affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// `useStrictWebSessionAffinity`.
    pub strict: bool,
    /// Placement of a new session.
    pub placement: Placement,
    /// Registry or stateless.
    pub mode: SessionMode,
    /// A session unused this long is forgotten.
    pub idle_ttl_ms: u64,
}

/// Data (sharding key) affinity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataConfig {
    /// Refuse instead of falling back to load balancing.
    pub strict: bool,
    /// Placement of a partition with no explicit mapping.
    pub placement: Placement,
    /// Keys hash into this many partitions.
    pub partitions: u32,
    /// Explicit partition → node name entries.
    pub map: Vec<(u32, String)>,
}

/// Everything a cluster is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Name used in metrics and JMX.
    pub name: String,
    /// If set, FAN/RLB events for another database are rejected.
    pub database: Option<String>,
    /// If set, FAN/RLB events for another service are rejected.
    pub service: Option<String>,
    /// Nodes in id order.
    pub nodes: Vec<NodeSpec>,
    /// Balancing policy for unpinned picks.
    pub policy: Policy,
    /// What to do when no node is available.
    pub panic: PanicPolicy,
    /// Thread / context pins.
    pub thread: ThreadConfig,
    /// Transactions.
    pub transaction: TransactionConfig,
    /// Web sessions.
    pub session: SessionConfig,
    /// Data affinity.
    pub data: DataConfig,
    /// Ejection and heartbeat.
    pub health: HealthConfig,
    /// Independent databases or instances of one (`recovery.scope`).
    pub recovery_scope: RecoveryScope,
    /// Where this process runs, for locality-aware picks.
    pub local: LocalConfig,
    /// The shared topology feed, if any (`topology.feed`).
    pub feed: FeedConfig,
}

/// The shared topology feed (docs/operations.md, "Topology feed").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedConfig {
    /// `topology.feed`: the etcd members and key prefix; `None`: no feed.
    pub url: Option<crate::feed::FeedUrl>,
    /// `topology.feed_timeout`: bound of one etcd call, of the wait for the
    /// first full read at start, and the silence after which the
    /// subscriber checks that its watch is still live.
    pub timeout_ms: u64,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig { url: None, timeout_ms: 2_000 }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "default".into(),
            database: None,
            service: None,
            nodes: Vec::new(),
            policy: Policy::default(),
            panic: PanicPolicy::default(),
            thread: ThreadConfig { strict: false, auto_pin: false },
            transaction: TransactionConfig { strict: false, placement: Placement::Rendezvous, settle_ms: 5_000 },
            session: SessionConfig {
                strict: false,
                placement: Placement::Balanced,
                mode: SessionMode::Registry,
                idle_ttl_ms: 30 * 60 * 1000,
            },
            data: DataConfig { strict: false, placement: Placement::Rendezvous, partitions: 4096, map: Vec::new() },
            health: HealthConfig::default(),
            recovery_scope: RecoveryScope::Node,
            local: LocalConfig::default(),
            feed: FeedConfig::default(),
        }
    }
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    if v.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if v.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(Error::config(key, format!("expected true or false, got `{v}`")))
    }
}

/// Decimal digits only: `+8`, `0x8` or `8.0` are refused rather than guessed.
pub(crate) fn parse_digits<T: std::str::FromStr>(v: &str) -> Option<T> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// Machine and zone names travel into metrics labels like node names.
fn place_name(key: &str, v: &str) -> Result<String> {
    validate_node_name(v).map_err(|e| Error::config(key, e.to_string().replace("node name", "name")))?;
    Ok(v.to_string())
}

fn parse_u32(key: &str, v: &str, min: u32, max: u32) -> Result<u32> {
    match parse_digits::<u32>(v) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Error::config(key, format!("expected an integer, at least {min} and at most {max}, got `{v}`"))),
    }
}

/// Every top-level key `Config::parse` knows (`node.<NAME>.*` and
/// `data.partition.<P>` aside).
const KEYS: &[&str] = &[
    "name",
    "database",
    "service",
    "nodes",
    "policy",
    "panic",
    "thread.strict",
    "thread.auto_pin",
    "transaction.strict",
    "transaction.placement",
    "transaction.settle",
    "session.strict",
    "session.placement",
    "session.mode",
    "session.idle_ttl",
    "data.strict",
    "data.placement",
    "data.partitions",
    "health.eject_after_failures",
    "health.eject_backoff",
    "health.eject_backoff_max",
    "heartbeat.interval",
    "heartbeat.misses",
    "recovery.scope",
    "local.machine",
    "local.zone",
    "locality.spill_percent",
    "topology.feed",
    "topology.feed_timeout",
];

/// The message for a key `Config::parse` does not know, with the nearest
/// known key when one is a few edits away (a typo, not another word).
fn unknown_key(key: &str) -> String {
    let lower = key.to_ascii_lowercase();
    let nearest = KEYS
        .iter()
        .map(|k| (edit_distance(&lower, k), *k))
        .min()
        .filter(|(d, k)| *d <= 2.max(k.len() / 6) && *d < k.len() / 2);
    match nearest {
        Some((_, k)) => format!("unknown key; did you mean `{k}`? (every key: docs/configuration.md)"),
        None => "unknown key (every key: docs/configuration.md)".to_string(),
    }
}

/// Levenshtein distance over bytes; keys are short ASCII.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() > 64 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Longest `health.eject_backoff` and `health.eject_backoff_max`: 24 hours.
pub const MAX_EJECT_BACKOFF_MS: u64 = 24 * 3_600_000;
/// Longest `heartbeat.interval`: 1 hour.
pub const MAX_HEARTBEAT_INTERVAL_MS: u64 = 3_600_000;
/// Longest `transaction.settle`: 1 hour.
pub const MAX_SETTLE_MS: u64 = 3_600_000;
/// Longest `topology.feed_timeout`: 1 minute.
pub const MAX_FEED_TIMEOUT_MS: u64 = 60_000;
/// Longest `session.idle_ttl`: 30 days.
pub const MAX_IDLE_TTL_MS: u64 = 720 * 3_600_000;
/// Largest `health.eject_after_failures`, `heartbeat.misses` and
/// `locality.spill_percent`.
pub const MAX_COUNT: u32 = 1_000_000;

/// Parses `500ms`, `10s`, `30m`, `2h`. A bare number is refused: the unit is
/// where config mistakes hide; so is any other spelling (`10 s`, `1min`).
pub fn parse_duration_ms(key: &str, v: &str) -> Result<u64> {
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = parse_digits(num)
        .ok_or_else(|| Error::config(key, format!("expected a duration like 500ms, 10s, 30m, got `{v}`")))?;
    let mul = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(Error::config(key, format!("`{v}` needs a unit: ms, s, m or h"))),
        u => return Err(Error::config(key, format!("unknown duration unit `{u}` in `{v}` (use ms, s, m or h)"))),
    };
    n.checked_mul(mul).ok_or_else(|| Error::config(key, format!("duration `{v}` is too large")))
}

fn fmt_duration(ms: u64) -> String {
    if ms % 3_600_000 == 0 && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 && ms > 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl Config {
    /// Parses the text format. Node settings (`node.<NAME>.<key>`) may come in
    /// any order; the `nodes` list, when present, fixes node order and ids.
    pub fn parse(text: &str) -> Result<Config> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(Error::config(
                "",
                format!("config text is {} bytes; the limit is {MAX_CONFIG_BYTES}", text.len()),
            ));
        }
        let mut c = Config::default();
        let mut seen = HashSet::new();
        let mut listed: Option<Vec<String>> = None;
        let mut declared: Vec<NodeSpec> = Vec::new();
        for raw in text.split(['\n', ';']) {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (key, value) = line.split_once('=').ok_or_else(|| Error::config(line, "expected `key = value`"))?;
            let (key, value) = (key.trim(), value.trim());
            // Node names match case-insensitively, so `node.a.weight` and
            // `node.A.weight` are the same key; a partition is its number.
            let canonical = if let Some(rest) = key.strip_prefix("node.") {
                format!("node.{}", rest.to_ascii_uppercase())
            } else if let Some(p) = key.strip_prefix("data.partition.") {
                format!("data.partition.{}", parse_u32(key, p, 0, MAX_PARTITIONS - 1)?)
            } else {
                key.to_string()
            };
            if !seen.insert(canonical) {
                return Err(Error::config(key, "given more than once"));
            }
            if let Some(rest) = key.strip_prefix("node.") {
                let (name, attr) = rest
                    .rsplit_once('.')
                    .ok_or_else(|| Error::config(key, "expected node.<NAME>.address, .weight, .machine or .zone"))?;
                validate_node_name(name).map_err(|e| Error::config(key, e.to_string()))?;
                let idx = match declared.iter().position(|n| n.name.eq_ignore_ascii_case(name)) {
                    Some(i) => i,
                    None => {
                        declared.push(NodeSpec::new(name));
                        declared.len() - 1
                    }
                };
                match attr {
                    "address" => declared[idx].address = Some(value.to_string()),
                    "weight" => declared[idx].weight = parse_u32(key, value, 1, crate::node::MAX_WEIGHT)?,
                    "machine" => declared[idx].machine = Some(place_name(key, value)?),
                    "zone" => declared[idx].zone = Some(place_name(key, value)?),
                    _ => {
                        return Err(Error::config(
                            key,
                            format!("unknown node setting `{attr}` (expected address, weight, machine or zone)"),
                        ))
                    }
                }
                continue;
            }
            if let Some(p) = key.strip_prefix("data.partition.") {
                let p = parse_u32(key, p, 0, MAX_PARTITIONS - 1)?;
                validate_node_name(value).map_err(|e| Error::config(key, e.to_string()))?;
                c.data.map.push((p, value.to_string()));
                continue;
            }
            match key {
                "name" => {
                    validate_node_name(value)
                        .map_err(|e| Error::config(key, e.to_string().replace("node name", "cluster name")))?;
                    c.name = value.to_string()
                }
                "database" => c.database = Some(value.to_string()).filter(|v| !v.is_empty()),
                "service" => c.service = Some(value.to_string()).filter(|v| !v.is_empty()),
                "nodes" => {
                    let names: Vec<String> = if value.is_empty() {
                        Vec::new()
                    } else {
                        value.split(',').map(|s| s.trim().to_string()).collect()
                    };
                    if names.iter().any(|n| n.is_empty()) {
                        return Err(Error::config(key, format!("empty node name in `{value}`")));
                    }
                    for n in &names {
                        validate_node_name(n).map_err(|e| Error::config(key, e.to_string()))?;
                    }
                    listed = Some(names);
                }
                "policy" => c.policy = value.parse()?,
                "panic" => c.panic = value.parse()?,
                "thread.strict" => c.thread.strict = parse_bool(key, value)?,
                "thread.auto_pin" => c.thread.auto_pin = parse_bool(key, value)?,
                "transaction.strict" => c.transaction.strict = parse_bool(key, value)?,
                "transaction.placement" => c.transaction.placement = Placement::parse(key, value)?,
                "transaction.settle" => c.transaction.settle_ms = parse_duration_ms(key, value)?,
                "session.strict" => c.session.strict = parse_bool(key, value)?,
                "session.placement" => c.session.placement = Placement::parse(key, value)?,
                "session.mode" => {
                    c.session.mode = match value {
                        "registry" => SessionMode::Registry,
                        "stateless" => SessionMode::Stateless,
                        _ => return Err(Error::config(key, format!("expected registry or stateless, got `{value}`"))),
                    }
                }
                "session.idle_ttl" => c.session.idle_ttl_ms = parse_duration_ms(key, value)?,
                "data.strict" => c.data.strict = parse_bool(key, value)?,
                "data.placement" => c.data.placement = Placement::parse(key, value)?,
                "data.partitions" => c.data.partitions = parse_u32(key, value, 1, MAX_PARTITIONS)?,
                "health.eject_after_failures" => c.health.eject_after_failures = parse_u32(key, value, 0, MAX_COUNT)?,
                "health.eject_backoff" => c.health.eject_base_ms = parse_duration_ms(key, value)?,
                "health.eject_backoff_max" => c.health.eject_max_ms = parse_duration_ms(key, value)?,
                "heartbeat.interval" => c.health.heartbeat_interval_ms = parse_duration_ms(key, value)?,
                "recovery.scope" => c.recovery_scope = value.parse()?,
                "local.machine" => c.local.machine = Some(place_name(key, value)?),
                "local.zone" => c.local.zone = Some(place_name(key, value)?),
                "locality.spill_percent" => c.local.spill_percent = parse_u32(key, value, 0, MAX_COUNT)?,
                "topology.feed" => {
                    c.feed.url = if value.is_empty() { None } else { Some(crate::feed::FeedUrl::parse(value)?) }
                }
                "topology.feed_timeout" => c.feed.timeout_ms = parse_duration_ms(key, value)?,
                "heartbeat.misses" => c.health.heartbeat_misses = parse_u32(key, value, 1, MAX_COUNT)?,
                _ => return Err(Error::config(key, unknown_key(key))),
            }
        }
        c.nodes = match listed {
            Some(names) => {
                let mut nodes = Vec::with_capacity(names.len());
                for n in names {
                    // The `nodes` list's spelling wins: the name seeds rendezvous hashing.
                    let spec = match declared.iter().position(|d| d.name.eq_ignore_ascii_case(&n)) {
                        Some(i) => NodeSpec { name: n, ..declared.remove(i) },
                        None => NodeSpec::new(n),
                    };
                    nodes.push(spec);
                }
                if let Some(extra) = declared.first() {
                    return Err(Error::config(format!("node.{}", extra.name), "node is not in the `nodes` list"));
                }
                nodes
            }
            None => declared,
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks bounds and cross-field rules; builders call it too.
    pub fn validate(&self) -> Result<()> {
        // Metrics write the name unescaped, as a label and in JSON: the
        // builder's name is held to the text format's rule.
        validate_node_name(&self.name)
            .map_err(|e| Error::config("name", e.to_string().replace("node name", "cluster name")))?;
        if self.nodes.is_empty() {
            // Every pick would fail, blaming down nodes and the panic policy.
            return Err(Error::config(
                "nodes",
                "a cluster needs at least one node: list them in `nodes` (or declare one with node.<NAME>.* keys)",
            ));
        }
        // Bounded so that `now + duration` (and a back-off's doubling, which
        // saturates at the bound) never overflows a millisecond clock.
        let h = &self.health;
        let durations = [
            ("health.eject_backoff", h.eject_base_ms, MAX_EJECT_BACKOFF_MS),
            ("health.eject_backoff_max", h.eject_max_ms, MAX_EJECT_BACKOFF_MS),
            ("heartbeat.interval", h.heartbeat_interval_ms, MAX_HEARTBEAT_INTERVAL_MS),
            ("transaction.settle", self.transaction.settle_ms, MAX_SETTLE_MS),
            ("session.idle_ttl", self.session.idle_ttl_ms, MAX_IDLE_TTL_MS),
            ("topology.feed_timeout", self.feed.timeout_ms, MAX_FEED_TIMEOUT_MS),
        ];
        for (key, ms, max) in durations {
            if ms > max {
                return Err(Error::config(
                    key,
                    format!("{} is too long: at most {}", fmt_duration(ms), fmt_duration(max)),
                ));
            }
        }
        let counts = [
            ("health.eject_after_failures", h.eject_after_failures, 0, MAX_COUNT),
            ("heartbeat.misses", h.heartbeat_misses, 1, MAX_COUNT),
            ("locality.spill_percent", self.local.spill_percent, 0, MAX_COUNT),
            ("data.partitions", self.data.partitions, 1, MAX_PARTITIONS),
        ];
        for (key, n, min, max) in counts {
            if !(min..=max).contains(&n) {
                return Err(Error::config(key, format!("{n} is out of range: at least {min}, at most {max}")));
            }
        }
        let mut names = HashSet::new();
        let mut token_ids = std::collections::HashMap::new();
        for n in &self.nodes {
            n.validate().map_err(|e| Error::config(format!("node.{}", n.name), e.to_string()))?;
            if !names.insert(n.name.to_ascii_uppercase()) {
                return Err(Error::config("nodes", format!("node `{}` is listed twice", n.name)));
            }
            if let Some(other) = token_ids.insert(crate::token::token_id_of(&n.name), n.name.as_str()) {
                return Err(Error::config("nodes", crate::token::token_id_clash(&n.name, other)));
            }
        }
        for (p, node) in &self.data.map {
            if *p >= self.data.partitions {
                return Err(Error::config(
                    format!("data.partition.{p}"),
                    format!("partition {p} is out of range (data.partitions = {})", self.data.partitions),
                ));
            }
            if !names.contains(&node.to_ascii_uppercase()) {
                return Err(Error::config(format!("data.partition.{p}"), format!("unknown node `{node}`")));
            }
        }
        if self.health.eject_max_ms < self.health.eject_base_ms {
            return Err(Error::config("health.eject_backoff_max", "must be ≥ health.eject_backoff"));
        }
        if self.feed.timeout_ms == 0 {
            return Err(Error::config("topology.feed_timeout", "must be > 0"));
        }
        if self.health.heartbeat_interval_ms == 0 {
            return Err(Error::config("heartbeat.interval", "must be > 0"));
        }
        Ok(())
    }

    /// Renders the text format; `Config::parse(&c.to_text())` yields `c`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "name = {}", self.name);
        if let Some(d) = &self.database {
            let _ = writeln!(s, "database = {d}");
        }
        if let Some(v) = &self.service {
            let _ = writeln!(s, "service = {v}");
        }
        let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        let _ = writeln!(s, "nodes = {}", names.join(", "));
        for n in &self.nodes {
            if let Some(a) = &n.address {
                let _ = writeln!(s, "node.{}.address = {a}", n.name);
            }
            let _ = writeln!(s, "node.{}.weight = {}", n.name, n.weight);
            if let Some(m) = &n.machine {
                let _ = writeln!(s, "node.{}.machine = {m}", n.name);
            }
            if let Some(z) = &n.zone {
                let _ = writeln!(s, "node.{}.zone = {z}", n.name);
            }
        }
        let _ = writeln!(s, "policy = {}", self.policy);
        let _ = writeln!(s, "panic = {}", self.panic.as_str());
        let _ = writeln!(s, "thread.strict = {}", self.thread.strict);
        let _ = writeln!(s, "thread.auto_pin = {}", self.thread.auto_pin);
        let _ = writeln!(s, "transaction.strict = {}", self.transaction.strict);
        let _ = writeln!(s, "transaction.placement = {}", self.transaction.placement.as_str());
        let _ = writeln!(s, "transaction.settle = {}", fmt_duration(self.transaction.settle_ms));
        let _ = writeln!(s, "session.strict = {}", self.session.strict);
        let _ = writeln!(s, "session.placement = {}", self.session.placement.as_str());
        let mode = match self.session.mode {
            SessionMode::Registry => "registry",
            SessionMode::Stateless => "stateless",
        };
        let _ = writeln!(s, "session.mode = {mode}");
        let _ = writeln!(s, "session.idle_ttl = {}", fmt_duration(self.session.idle_ttl_ms));
        let _ = writeln!(s, "data.strict = {}", self.data.strict);
        let _ = writeln!(s, "data.placement = {}", self.data.placement.as_str());
        let _ = writeln!(s, "data.partitions = {}", self.data.partitions);
        for (p, n) in &self.data.map {
            let _ = writeln!(s, "data.partition.{p} = {n}");
        }
        let h = &self.health;
        let _ = writeln!(s, "health.eject_after_failures = {}", h.eject_after_failures);
        let _ = writeln!(s, "health.eject_backoff = {}", fmt_duration(h.eject_base_ms));
        let _ = writeln!(s, "health.eject_backoff_max = {}", fmt_duration(h.eject_max_ms));
        let _ = writeln!(s, "heartbeat.interval = {}", fmt_duration(h.heartbeat_interval_ms));
        let _ = writeln!(s, "heartbeat.misses = {}", h.heartbeat_misses);
        let _ = writeln!(s, "recovery.scope = {}", self.recovery_scope.as_str());
        if let Some(m) = &self.local.machine {
            let _ = writeln!(s, "local.machine = {m}");
        }
        if let Some(z) = &self.local.zone {
            let _ = writeln!(s, "local.zone = {z}");
        }
        let _ = writeln!(s, "locality.spill_percent = {}", self.local.spill_percent);
        if let Some(u) = &self.feed.url {
            let _ = writeln!(s, "topology.feed = {u}");
        }
        let _ = writeln!(s, "topology.feed_timeout = {}", fmt_duration(self.feed.timeout_ms));
        s
    }
}

impl std::str::FromStr for Config {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Config::parse(s)
    }
}
