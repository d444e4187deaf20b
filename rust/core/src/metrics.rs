//! Metrics: per-node and per-scope counters, read as a snapshot struct, JSON
//! or Prometheus text.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::cluster::Cluster;
use crate::counter::StripedCounter;
use crate::error::Scope;
use crate::hash::HASH_VERSION;
use crate::node::{DownCause, NodeId, NodeState};
use crate::route::RouteKind;

#[derive(Debug, Default)]
pub(crate) struct ScopeCounters {
    pub live: AtomicI64,
    pub hits: StripedCounter,
    pub placements: AtomicU64,
    pub repins: AtomicU64,
    pub fallbacks: AtomicU64,
    pub panics: AtomicU64,
    pub strict_refusals: AtomicU64,
}

impl ScopeCounters {
    #[inline]
    pub fn count(&self, kind: RouteKind) {
        match kind {
            RouteKind::Affinity => self.hits.incr(),
            RouteKind::Placed => {
                self.placements.fetch_add(1, Ordering::Relaxed);
            }
            RouteKind::Repinned => {
                self.repins.fetch_add(1, Ordering::Relaxed);
            }
            RouteKind::Fallback => {
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
            }
            RouteKind::Panic => {
                self.panics.fetch_add(1, Ordering::Relaxed);
            }
            RouteKind::Balanced => {}
        }
    }
}

/// One node's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMetrics {
    /// Node id, from the same topology snapshot as the rest (a binding
    /// that looked it up by name afterwards raced node removals).
    pub id: NodeId,
    /// Node name.
    pub name: String,
    /// Current state.
    pub state: NodeState,
    /// Why it is down or draining (`none` when up).
    pub down_cause: &'static str,
    /// Static weight.
    pub weight: u32,
    /// RLB percent from the last advisory (-1: none).
    pub rlb_percent: i32,
    /// Whether the instance advises session affinity.
    pub affinity_advised: bool,
    /// Routing decisions that returned this node.
    pub picks: u64,
    /// Of those, existing affinities honoured.
    pub affinity_hits: u64,
    /// Affinities moved here from an unavailable node.
    pub repins: u64,
    /// Strict refusals naming this node.
    pub strict_refusals: u64,
    /// Leases in flight.
    pub in_flight: i64,
    /// Leases released OK.
    pub successes: u64,
    /// Node-level failures reported.
    pub failures: u64,
    /// State transitions.
    pub state_changes: u64,
    /// Passive ejections.
    pub ejections: u64,
    /// Missed heartbeats.
    pub probe_misses: u64,
    /// Transactions that had branches here and then one placed elsewhere
    /// (soft mode only; each is a two-node commit).
    pub tx_spans: u64,
    /// Where the node sits relative to this process (`machine`, `zone`,
    /// `remote`, or `unknown` without `local.*` settings): its picks are
    /// this process's local, zone or remote picks.
    pub locality: &'static str,
}

/// One scope's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeMetrics {
    /// The scope.
    pub scope: Scope,
    /// Strict mode currently on.
    pub strict: bool,
    /// Live affinities (pins, transactions, sessions, mapped partitions).
    pub live: u64,
    /// Existing affinities honoured.
    pub hits: u64,
    /// New affinities placed.
    pub placements: u64,
    /// Affinities moved off an unavailable node.
    pub repins: u64,
    /// Data routes that fell back to load balancing.
    pub fallbacks: u64,
    /// Routes chosen by the panic policy.
    pub panics: u64,
    /// Strict refusals.
    pub strict_refusals: u64,
}

/// A point-in-time view of a cluster's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Cluster name.
    pub cluster: String,
    /// Topology epoch.
    pub epoch: u64,
    /// Rendezvous hash scheme.
    pub hash_version: &'static str,
    /// Load-balancing policy.
    pub policy: &'static str,
    /// Live nodes, in id order.
    pub nodes: Vec<NodeMetrics>,
    /// Per scope, in [`Scope::ALL`] order.
    pub scopes: Vec<ScopeMetrics>,
    /// Sessions dropped because the instance withdrew affinity.
    pub sessions_revoked: u64,
    /// Sessions dropped after their idle TTL.
    pub sessions_expired: u64,
    /// Soft-mode transaction spans, summed over every node the cluster
    /// ever had (see [`NodeMetrics::tx_spans`]): a removed node's stay, so
    /// the sum never goes down.
    pub tx_spans: u64,
    /// Picks by where the node sits relative to this process (`machine`,
    /// `zone`, `remote`), over every node the cluster ever had, removed ones
    /// included: a counter must never go down.
    pub locality_picks: [u64; 3],
    /// [`Cluster::topology_fingerprint`] at the snapshot.
    pub fingerprint: String,
    /// The explicit partition map's epoch (0: as configured).
    pub partition_map_epoch: u64,
    /// Who set the partition map (`config`, `set_partition`, a loader's name).
    pub partition_map_source: String,
    /// Loads of the partition map that failed ([`Cluster::partition_map_load_failed`]).
    pub partition_map_load_failures: u64,
    /// The last failed load, `<source>: <error>`.
    pub partition_map_last_error: Option<String>,
    /// The topology feed's health; `None` without `topology.feed`.
    pub feed: Option<crate::feed::FeedMetrics>,
}

impl MetricsSnapshot {
    /// Sum of picks over nodes.
    pub fn total_picks(&self) -> u64 {
        // Counters wrap (host hits can add any amount): so does their sum.
        self.nodes.iter().fold(0u64, |a, n| a.wrapping_add(n.picks))
    }

    /// The snapshot as one JSON object. Names are validated identifiers, so no
    /// string needs escaping.
    pub fn to_json(&self) -> String {
        let mut s = String::with_capacity(256 + 320 * self.nodes.len());
        let _ = write!(
            s,
            r#"{{"cluster":"{}","epoch":{},"hash_version":"{}","policy":"{}","sessions_revoked":{},"sessions_expired":{},"tx_spans":{},"fingerprint":"{}","partition_map":{{"epoch":{},"source":"{}","load_failures":{},"last_error":{}}},"#,
            self.cluster,
            self.epoch,
            self.hash_version,
            self.policy,
            self.sessions_revoked,
            self.sessions_expired,
            self.tx_spans,
            self.fingerprint,
            self.partition_map_epoch,
            self.partition_map_source,
            self.partition_map_load_failures,
            self.partition_map_last_error.as_deref().map_or_else(|| "null".to_string(), json_string)
        );
        match &self.feed {
            None => s.push_str(r#""feed":null,"#),
            Some(f) => {
                let opt = |t: &Option<String>| t.as_deref().map_or_else(|| "null".to_string(), json_string);
                let _ = write!(
                    s,
                    r#""feed":{{"url":{},"connected":{},"revision":{},"leader_revision":{},"lag":{},"applied":{},"stale":{},"refused":{},"reconnects":{},"full_reads":{},"last_error":{},"last_refused":{}}},"#,
                    json_string(&f.url),
                    f.connected,
                    f.revision,
                    f.leader_revision,
                    f.lag,
                    f.applied,
                    f.stale,
                    f.refused,
                    f.reconnects,
                    f.full_reads,
                    opt(&f.last_error),
                    opt(&f.last_refused)
                );
            }
        }
        s.push_str(r#""nodes":["#);
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                r#"{{"name":"{}","state":"{}","down_cause":"{}","weight":{},"rlb_percent":{},"affinity_advised":{},"picks":{},"affinity_hits":{},"repins":{},"strict_refusals":{},"in_flight":{},"successes":{},"failures":{},"state_changes":{},"ejections":{},"probe_misses":{},"tx_spans":{},"locality":"{}"}}"#,
                n.name,
                n.state,
                n.down_cause,
                n.weight,
                n.rlb_percent,
                n.affinity_advised,
                n.picks,
                n.affinity_hits,
                n.repins,
                n.strict_refusals,
                n.in_flight,
                n.successes,
                n.failures,
                n.state_changes,
                n.ejections,
                n.probe_misses,
                n.tx_spans,
                n.locality
            );
        }
        s.push_str(r#"],"scopes":{"#);
        for (i, sc) in self.scopes.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                r#""{}":{{"strict":{},"live":{},"hits":{},"placements":{},"repins":{},"fallbacks":{},"panics":{},"strict_refusals":{}}}"#,
                sc.scope,
                sc.strict,
                sc.live,
                sc.hits,
                sc.placements,
                sc.repins,
                sc.fallbacks,
                sc.panics,
                sc.strict_refusals
            );
        }
        s.push_str("}}");
        s
    }

    /// The snapshot in the Prometheus text exposition format (0.0.4).
    pub fn to_prometheus(&self) -> String {
        let mut s = String::with_capacity(2048 + 1024 * self.nodes.len());
        let c = &self.cluster;
        // Wide enough for every field as it is: u64 counters past i64::MAX
        // (a host's `count_host_hits` adds any u64) and signed gauges.
        type NodeField = fn(&NodeMetrics) -> i128;
        let node_series: [(&str, &str, &str, NodeField); 13] = [
            ("racaffinity_node_picks_total", "counter", "Routing decisions that returned the node.", |n| {
                i128::from(n.picks)
            }),
            ("racaffinity_node_affinity_hits_total", "counter", "Existing affinities honoured on the node.", |n| {
                i128::from(n.affinity_hits)
            }),
            (
                "racaffinity_node_repins_total",
                "counter",
                "Affinities moved to the node from an unavailable one.",
                |n| i128::from(n.repins),
            ),
            ("racaffinity_node_strict_refusals_total", "counter", "Strict refusals naming the node.", |n| {
                i128::from(n.strict_refusals)
            }),
            ("racaffinity_node_in_flight", "gauge", "Leases in flight on the node.", |n| i128::from(n.in_flight)),
            ("racaffinity_node_successes_total", "counter", "Leases released OK.", |n| i128::from(n.successes)),
            ("racaffinity_node_failures_total", "counter", "Node-level failures reported.", |n| i128::from(n.failures)),
            ("racaffinity_node_state_changes_total", "counter", "Node state transitions.", |n| {
                i128::from(n.state_changes)
            }),
            ("racaffinity_node_ejections_total", "counter", "Passive ejections.", |n| i128::from(n.ejections)),
            ("racaffinity_node_probe_misses_total", "counter", "Missed heartbeat probes.", |n| {
                i128::from(n.probe_misses)
            }),
            ("racaffinity_node_weight", "gauge", "Static weight.", |n| i128::from(n.weight)),
            (
                "racaffinity_node_tx_spans_total",
                "counter",
                "Transactions that left the node for another with branches still here (soft mode).",
                |n| i128::from(n.tx_spans),
            ),
            (
                "racaffinity_node_affinity_advised",
                "gauge",
                "1 while the instance advises session affinity (RLB aff=TRUE).",
                |n| i128::from(n.affinity_advised),
            ),
        ];
        for (name, kind, help, f) in node_series {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for n in &self.nodes {
                let _ = writeln!(s, "{name}{{cluster=\"{c}\",node=\"{}\"}} {}", n.name, f(n));
            }
        }
        let _ = writeln!(
            s,
            "# HELP racaffinity_node_state Node state (1 for the current state).\n# TYPE racaffinity_node_state gauge"
        );
        for n in &self.nodes {
            for st in [NodeState::Up, NodeState::Draining, NodeState::Down] {
                let _ = writeln!(
                    s,
                    "racaffinity_node_state{{cluster=\"{c}\",node=\"{}\",state=\"{st}\"}} {}",
                    n.name,
                    u8::from(n.state == st)
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP racaffinity_node_rlb_percent RLB percent from the last advisory (absent before one).\n# TYPE racaffinity_node_rlb_percent gauge"
        );
        for n in self.nodes.iter().filter(|n| n.rlb_percent >= 0) {
            let _ =
                writeln!(s, "racaffinity_node_rlb_percent{{cluster=\"{c}\",node=\"{}\"}} {}", n.name, n.rlb_percent);
        }
        let _ = writeln!(
            s,
            "# HELP racaffinity_node_down_cause Why the node is down or draining (1 for the current cause).\n# TYPE racaffinity_node_down_cause gauge"
        );
        for n in &self.nodes {
            for cause in [
                DownCause::None,
                DownCause::Admin,
                DownCause::Event,
                DownCause::Heartbeat,
                DownCause::Ejected,
                DownCause::Drained,
            ] {
                let cause = cause.as_str();
                let _ = writeln!(
                    s,
                    "racaffinity_node_down_cause{{cluster=\"{c}\",node=\"{}\",cause=\"{cause}\"}} {}",
                    n.name,
                    u8::from(n.down_cause == cause)
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP racaffinity_scope_strict 1 while the scope refuses instead of moving work.\n# TYPE racaffinity_scope_strict gauge"
        );
        for sc in &self.scopes {
            let _ = writeln!(
                s,
                "racaffinity_scope_strict{{cluster=\"{c}\",scope=\"{}\"}} {}",
                sc.scope,
                u8::from(sc.strict)
            );
        }
        let _ = writeln!(
            s,
            "# HELP racaffinity_locality_picks_total Picks by where the node sits relative to this process.\n# TYPE racaffinity_locality_picks_total counter"
        );
        for (place, picks) in LOCALITY_PLACES.iter().zip(self.locality_picks) {
            let _ = writeln!(s, "racaffinity_locality_picks_total{{cluster=\"{c}\",locality=\"{place}\"}} {picks}");
        }
        type ScopeField = fn(&ScopeMetrics) -> u64;
        let scope_series: [(&str, &str, &str, ScopeField); 7] = [
            ("racaffinity_affinities", "gauge", "Live affinities per scope.", |s| s.live),
            ("racaffinity_affinity_hits_total", "counter", "Existing affinities honoured.", |s| s.hits),
            ("racaffinity_affinity_placements_total", "counter", "New affinities placed.", |s| s.placements),
            ("racaffinity_affinity_repins_total", "counter", "Affinities moved off an unavailable node.", |s| s.repins),
            ("racaffinity_affinity_fallbacks_total", "counter", "Data routes that fell back to load balancing.", |s| {
                s.fallbacks
            }),
            ("racaffinity_affinity_panics_total", "counter", "Routes chosen by the panic policy.", |s| s.panics),
            ("racaffinity_strict_refusals_total", "counter", "Strict refusals per scope.", |s| s.strict_refusals),
        ];
        for (name, kind, help, f) in scope_series {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for sc in &self.scopes {
                let _ = writeln!(s, "{name}{{cluster=\"{c}\",scope=\"{}\"}} {}", sc.scope, f(sc));
            }
        }
        let _ = writeln!(
            s,
            "# HELP racaffinity_sessions_revoked_total Sessions dropped because the instance withdrew affinity.\n# TYPE racaffinity_sessions_revoked_total counter\nracaffinity_sessions_revoked_total{{cluster=\"{c}\"}} {}",
            self.sessions_revoked
        );
        // An info series: its value is 1, the fingerprint is the label.
        let _ = writeln!(
            s,
            "# HELP racaffinity_topology_fingerprint_info Hash of the routing view; processes that agree route alike.\n# TYPE racaffinity_topology_fingerprint_info gauge\nracaffinity_topology_fingerprint_info{{cluster=\"{c}\",fingerprint=\"{}\"}} 1",
            self.fingerprint
        );
        // The name of 0.2.0 and before (no `_info`), kept one release for the
        // dashboards and alerts that read it (CHANGELOG, Deprecated).
        let _ = writeln!(
            s,
            "# HELP racaffinity_topology_fingerprint Deprecated: racaffinity_topology_fingerprint_info, the same series; this name goes in the next release.\n# TYPE racaffinity_topology_fingerprint gauge\nracaffinity_topology_fingerprint{{cluster=\"{c}\",fingerprint=\"{}\"}} 1",
            self.fingerprint
        );
        let _ = writeln!(
            s,
            "# HELP racaffinity_partition_map_epoch Epoch of the explicit partition map (labelled with its source).\n# TYPE racaffinity_partition_map_epoch gauge\nracaffinity_partition_map_epoch{{cluster=\"{c}\",source=\"{}\"}} {}",
            self.partition_map_source, self.partition_map_epoch
        );
        let _ = writeln!(
            s,
            "# HELP racaffinity_partition_map_load_failures_total Partition map loads that failed (the last good map stayed).\n# TYPE racaffinity_partition_map_load_failures_total counter\nracaffinity_partition_map_load_failures_total{{cluster=\"{c}\"}} {}",
            self.partition_map_load_failures
        );
        let _ = writeln!(
            s,
            "# HELP racaffinity_sessions_expired_total Sessions dropped after their idle TTL.\n# TYPE racaffinity_sessions_expired_total counter\nracaffinity_sessions_expired_total{{cluster=\"{c}\"}} {}",
            self.sessions_expired
        );
        if let Some(f) = &self.feed {
            let series: [(&str, &str, &str, u64); 9] = [
                (
                    "racaffinity_feed_connected",
                    "gauge",
                    "1 while the topology feed's watch is open and answering.",
                    u64::from(f.connected),
                ),
                (
                    "racaffinity_feed_revision",
                    "gauge",
                    "Every feed record up to this etcd revision is applied.",
                    f.revision,
                ),
                (
                    "racaffinity_feed_leader_revision",
                    "gauge",
                    "etcd's revision at the feed's last answer.",
                    f.leader_revision,
                ),
                (
                    "racaffinity_feed_lag_records",
                    "gauge",
                    "Feed records written after the applied revision, at the last check.",
                    f.lag,
                ),
                (
                    "racaffinity_feed_records_applied_total",
                    "counter",
                    "Feed records that changed or confirmed this process's view.",
                    f.applied,
                ),
                (
                    "racaffinity_feed_records_stale_total",
                    "counter",
                    "Feed records older than this process's view (no change).",
                    f.stale,
                ),
                (
                    "racaffinity_feed_records_refused_total",
                    "counter",
                    "Feed records refused (malformed or unknown node); nothing changed.",
                    f.refused,
                ),
                (
                    "racaffinity_feed_reconnects_total",
                    "counter",
                    "Feed watches re-opened after a failure.",
                    f.reconnects,
                ),
                (
                    "racaffinity_feed_full_reads_total",
                    "counter",
                    "Whole-prefix reads of the feed (at start and after a compaction).",
                    f.full_reads,
                ),
            ];
            for (name, kind, help, v) in series {
                let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{cluster=\"{c}\"}} {v}");
            }
        }
        s
    }
}

impl Cluster {
    /// A short hash (8 hex digits) of exactly what placement reads: the
    /// live nodes by their canonical (upper-cased) names, in name order,
    /// each with its state by the shared inputs (what strict placement
    /// across processes acts on), its state in this process's view (what
    /// soft placement acts on), its static weight and its session advice
    /// (`aff`); the placement hash version; the number of partitions, the
    /// explicit partition map's content and the data placement; the strict
    /// switches. RLB percents are left out: they steer load balancing, never
    /// a placement. Processes whose fingerprints match place every gtrid,
    /// partition and stateless session alike; comparing them shows how long
    /// views disagree after an input that reaches processes at different
    /// times.
    pub fn topology_fingerprint(&self) -> String {
        let topo = self.topo();
        let mut nodes: Vec<_> = topo.live.iter().collect();
        nodes.sort_unstable_by(|a, b| a.canonical_name().cmp(b.canonical_name()));
        let mut view = String::with_capacity(48 * nodes.len() + 64);
        let _ = write!(view, "{};", crate::hash::HASH_VERSION);
        for n in nodes {
            let _ = write!(
                view,
                "{}|{}|{}|{}|{};",
                n.canonical_name(),
                n.shared_state(),
                n.state(),
                n.weight(),
                n.affinity_advised()
            );
        }
        for s in Scope::ALL {
            view.push(if self.is_strict(s) { 'S' } else { 's' });
        }
        let _ = write!(
            view,
            "|{}|{:?}|{:016x}",
            self.partitions(),
            self.inner.config.data.placement,
            self.partition_map_digest()
        );
        format!("{:08x}", crate::hash::hash_bytes(view.as_bytes()) as u32)
    }

    /// A snapshot of every counter.
    pub fn metrics(&self) -> MetricsSnapshot {
        // A fork waits for this read to end, so the child never inherits
        // the tally locks it holds (see fork.rs).
        let _fork = crate::fork::reading();
        let topo = self.topo();
        let (load_failures, last_error) = self.partition_map_load_failures();
        // Held until the scope counters are read: no thread pin folds its
        // tally into them meanwhile, so no hit is counted twice or missed.
        let thread_hits = self.inner.thread_hits.merged();
        // Every node ever added, for the cluster-wide counters; removed
        // nodes' counters no longer move.
        let mut tx_spans = 0u64;
        let mut locality_picks = [0u64; 3];
        for n in &topo.by_id {
            let c = &n.counters;
            let hits = c.affinity_hits.sum().wrapping_add(thread_hits.node(n.id()));
            let picks = c.other_picks.sum().wrapping_add(hits);
            if let Some(i) = LOCALITY_PLACES.iter().position(|p| *p == n.locality().as_str()) {
                locality_picks[i] = locality_picks[i].wrapping_add(picks);
            }
            tx_spans = tx_spans.wrapping_add(c.tx_spans.load(Ordering::Relaxed));
        }
        let nodes: Vec<NodeMetrics> = topo
            .live
            .iter()
            .map(|n| {
                n.collect_host_oks();
                let c = &n.counters;
                let hits = c.affinity_hits.sum().wrapping_add(thread_hits.node(n.id()));
                NodeMetrics {
                    id: n.id(),
                    name: n.name().to_string(),
                    state: n.state(),
                    down_cause: n.down_cause().as_str(),
                    weight: n.weight(),
                    rlb_percent: n.rlb_percent().map_or(-1, i32::from),
                    affinity_advised: n.affinity_advised(),
                    picks: c.other_picks.sum().wrapping_add(hits),
                    affinity_hits: hits,
                    repins: c.repins.load(Ordering::Relaxed),
                    strict_refusals: c.strict_refusals.load(Ordering::Relaxed),
                    in_flight: n.in_flight(),
                    successes: c.successes.sum(),
                    failures: c.failures.load(Ordering::Relaxed),
                    state_changes: c.state_changes.load(Ordering::Relaxed),
                    ejections: c.ejections.load(Ordering::Relaxed),
                    probe_misses: c.probe_misses.load(Ordering::Relaxed),
                    tx_spans: c.tx_spans.load(Ordering::Relaxed),
                    locality: n.locality().as_str(),
                }
            })
            .collect();
        let scopes = Scope::ALL
            .iter()
            .map(|&sc| {
                let k = &self.inner.scope[sc as usize];
                // Context pins count in their own scope (a UCP callback's
                // web-session context is a live session affinity), next to
                // the scope's registry.
                let contexts = k.live.load(Ordering::Relaxed).max(0) as u64;
                let live = contexts
                    + match sc {
                        Scope::Thread => 0,
                        Scope::Transaction => self.tx_count() as u64,
                        Scope::Session => self.session_count() as u64,
                        Scope::Data => self.data_affinities() as u64,
                    };
                ScopeMetrics {
                    scope: sc,
                    strict: self.is_strict(sc),
                    live,
                    hits: if sc == Scope::Thread {
                        k.hits.sum().wrapping_add(thread_hits.total())
                    } else {
                        k.hits.sum()
                    },
                    placements: k.placements.load(Ordering::Relaxed),
                    repins: k.repins.load(Ordering::Relaxed),
                    fallbacks: k.fallbacks.load(Ordering::Relaxed),
                    panics: k.panics.load(Ordering::Relaxed),
                    strict_refusals: k.strict_refusals.load(Ordering::Relaxed),
                }
            })
            .collect();
        MetricsSnapshot {
            tx_spans,
            locality_picks,
            fingerprint: self.topology_fingerprint(),
            cluster: self.name().to_string(),
            epoch: topo.epoch,
            hash_version: HASH_VERSION,
            policy: self.inner.config.policy.as_str(),
            nodes,
            scopes,
            sessions_revoked: self.inner.sessions.revoked.load(Ordering::Relaxed),
            sessions_expired: self.inner.sessions.expired.load(Ordering::Relaxed),
            partition_map_epoch: self.partition_map_epoch(),
            partition_map_source: self.partition_map_source(),
            partition_map_load_failures: load_failures,
            partition_map_last_error: last_error,
            feed: self.inner.feed.get().map(crate::feed::Subscription::metrics),
        }
    }
}

/// The `locality` labels of `racaffinity_locality_picks_total`, in
/// [`MetricsSnapshot::locality_picks`] order (`unknown` has no series).
const LOCALITY_PLACES: [&str; 3] = ["machine", "zone", "remote"];

/// `text` as a JSON string literal (host error messages are free text).
fn json_string(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for ch in text.chars() {
        match ch {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}
