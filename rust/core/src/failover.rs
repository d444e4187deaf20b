//! Failover inputs: FAN events, RLB advisories, heartbeat probes and
//! operator state changes, applied to node states.

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::event::{parse_event, Event, FanEvent, FanEventType, FanReason, FanStatus, RlbAdvisory};
use crate::node::{drain_deadline, Node, NodeId, NodeState, OutcomeSource, SharedInput};

/// One node's state change caused by an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// The node.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// State before.
    pub from: NodeState,
    /// State after.
    pub to: NodeState,
}

/// What applying an event did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventEffect {
    /// State changes, in node order.
    pub changes: Vec<StateChange>,
    /// Nodes whose session affinity was revoked (`aff=FALSE`).
    pub revoked: Vec<NodeId>,
    /// Nodes whose RLB advice was updated.
    pub advised: Vec<NodeId>,
}

fn same(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        _ => true,
    }
}

impl Cluster {
    pub(crate) fn check_foreign(&self, database: &Option<String>, service: &Option<String>) -> Result<()> {
        let c = &self.inner.config;
        if !same(&c.database, database) {
            return Err(Error::ForeignEvent(format!(
                "database `{}` is not `{}`",
                database.as_deref().unwrap_or(""),
                c.database.as_deref().unwrap_or("")
            )));
        }
        if !same(&c.service, service) {
            return Err(Error::ForeignEvent(format!(
                "service `{}` is not `{}`",
                service.as_deref().unwrap_or(""),
                c.service.as_deref().unwrap_or("")
            )));
        }
        Ok(())
    }

    /// Parses and applies one FAN HA event or RLB advisory line. Malformed
    /// text, a foreign database/service or an unknown instance changes nothing.
    pub fn apply_event(&self, line: &str) -> Result<EventEffect> {
        match parse_event(line)? {
            Event::Fan(e) => self.apply_fan(&e),
            Event::Rlb(a) => self.apply_rlb(&a),
        }
    }

    /// Applies a parsed FAN event: `down` with reason `user` drains (planned
    /// maintenance), any other `down`/`nodedown` is a failure, `up` restores.
    pub fn apply_fan(&self, ev: &FanEvent) -> Result<EventEffect> {
        self.apply_fan_versioned(ev, None)
    }

    /// [`Cluster::apply_fan`] with `version` in place of the event's own
    /// (a feed's revision, which orders events of every publisher).
    pub(crate) fn apply_fan_versioned(&self, ev: &FanEvent, version: Option<u64>) -> Result<EventEffect> {
        // INSTANCE, DATABASE and NODE events carry the database name in
        // `service=`, so only service-level events are filtered by service.
        let service = match ev.event_type {
            FanEventType::Service | FanEventType::ServiceMember => ev.service.clone(),
            _ => None,
        };
        self.check_foreign(&ev.database, &service)?;
        let targets = self.fan_targets(ev)?;
        let drain_ms = ev.drain_timeout_s.map(|s| u64::from(s) * 1000);
        let version = version.or_else(|| ev.version());
        let to = match ev.status {
            FanStatus::Up => NodeState::Up,
            FanStatus::Down if ev.reason == Some(FanReason::User) => NodeState::Draining,
            FanStatus::Down | FanStatus::NodeDown => NodeState::Down,
            // Pre-connect and restart notices say nothing about where work can go.
            _ => return Ok(EventEffect::default()),
        };
        if matches!(ev.event_type, FanEventType::Service | FanEventType::Database) {
            if let Some(v) = version {
                // About every node, so about a node added later too.
                let until = drain_deadline(self.clock(), drain_ms, ev.instant());
                let input = SharedInput { to, version: v, drain_ms, drain_until: until };
                let mut wide = crate::fork::lock(&self.inner.wide_input);
                *wide = Some(SharedInput::max(*wide, input));
            }
        }
        let mut effect = EventEffect::default();
        for n in targets {
            // Events write the automatic layer only, so `up` lifts what
            // events, heartbeats and ejection imposed but never an operator's
            // mark-down or drain.
            let t = match to {
                NodeState::Up => n.event_up(version),
                NodeState::Draining => {
                    n.drain_for(drain_ms, version, drain_deadline(self.clock(), drain_ms, ev.instant()))
                }
                NodeState::Down => n.event_down(version),
            };
            if let Some(t) = t {
                effect.changes.push(StateChange { node: n.id(), name: n.name().to_string(), from: t.from, to: t.to });
            }
        }
        Ok(effect)
    }

    /// The nodes a FAN event is about: its instance, the nodes on its host,
    /// or every live node (service and database events).
    fn fan_targets(&self, ev: &FanEvent) -> Result<Vec<Arc<Node>>> {
        let topo = self.topo();
        Ok(match ev.event_type {
            FanEventType::Instance | FanEventType::ServiceMember => {
                let name = ev.instance.as_deref().ok_or_else(|| Error::event("missing `instance=`"))?;
                vec![topo.find_or_unknown(name).cloned()?]
            }
            FanEventType::Node => {
                let host = ev.host.as_deref().ok_or_else(|| Error::event("missing `host=`"))?;
                let v: Vec<_> = topo.live.iter().filter(|n| n.is_on_host(host)).cloned().collect();
                if v.is_empty() {
                    return Err(Error::UnknownNode(format!("no node has host `{host}`")));
                }
                v
            }
            FanEventType::Service | FanEventType::Database => topo.live.clone(),
            // A pre-connect notice routes nothing (its service is the shadow
            // one, not the cluster's): no target, so nothing to refuse.
            FanEventType::SrvPreconnect => Vec::new(),
        })
    }

    /// What [`Cluster::apply_event`] would refuse of `event` before changing
    /// anything: a foreign database or service, an instance or host this
    /// cluster does not have. A relay checks a line with it before writing
    /// it for the whole fleet.
    pub(crate) fn check_event(&self, event: &Event) -> Result<()> {
        match event {
            Event::Fan(ev) => {
                let service = match ev.event_type {
                    FanEventType::Service | FanEventType::ServiceMember => ev.service.clone(),
                    _ => None,
                };
                self.check_foreign(&ev.database, &service)?;
                self.fan_targets(ev).map(drop)
            }
            Event::Rlb(adv) => {
                self.check_foreign(&adv.database, &adv.service)?;
                let topo = self.topo();
                adv.entries.iter().try_for_each(|e| topo.find_or_unknown(&e.instance).map(drop))
            }
        }
    }

    /// Applies an RLB advisory: every named instance must exist (else nothing
    /// changes); then each gets its percent, flag and affinity advice. An
    /// advisory lists the instances offering the service, so a node it does
    /// not name gets a share of 0 rather than keeping a static weight on
    /// another scale.
    pub fn apply_rlb(&self, adv: &RlbAdvisory) -> Result<EventEffect> {
        self.check_foreign(&adv.database, &adv.service)?;
        let topo = self.topo();
        let nodes =
            adv.entries.iter().map(|e| topo.find_or_unknown(&e.instance).cloned()).collect::<Result<Vec<_>>>()?;
        let mut effect = EventEffect::default();
        for (e, n) in adv.entries.iter().zip(&nodes) {
            if n.set_advice(e.percent, e.flag, e.aff) {
                effect.revoked.push(n.id());
            }
            effect.advised.push(n.id());
        }
        for n in topo.live.iter().filter(|n| !nodes.iter().any(|a| a.id() == n.id())) {
            n.set_unadvised();
        }
        Ok(effect)
    }

    /// Reports a heartbeat probe of `node` by the host; `misses` consecutive
    /// failures mark it down, a success restores a heartbeat/ejection down.
    /// A removed node's id is accepted and changes nothing (a probe begun
    /// before the removal); an id never issued is [`Error::UnknownNode`].
    pub fn report_probe(&self, node: NodeId, ok: bool) -> Result<Option<StateChange>> {
        let topo = self.topo();
        let Some(n) = reported_node(&topo, node)? else { return Ok(None) };
        Ok(n.record_probe(ok, self.health()).map(|t| StateChange {
            node,
            name: n.name().to_string(),
            from: t.from,
            to: t.to,
        }))
    }

    /// Reports a node-level failure or success outside a lease. A removed
    /// node's id is accepted and changes nothing, as in
    /// [`Cluster::report_probe`].
    pub fn report_outcome(&self, node: NodeId, ok: bool) -> Result<Option<StateChange>> {
        let topo = self.topo();
        let Some(n) = reported_node(&topo, node)? else { return Ok(None) };
        let t = n.record_outcome(ok, OutcomeSource::Report, self.clock(), self.health());
        Ok(t.map(|t| StateChange { node, name: n.name().to_string(), from: t.from, to: t.to }))
    }

    /// How often hosts should probe each node (`heartbeat.interval`).
    pub fn heartbeat_interval_ms(&self) -> u64 {
        self.health().heartbeat_interval_ms
    }
}

/// The node a probe or outcome report is about; `None` for a removed node.
/// A report about a removed node is a probe or call begun before the
/// removal (a heartbeat holding the id, a removal from the feed meanwhile):
/// accepted and ignored, as a host lease's end is, since counting it would
/// act on a node that routes nothing. An id never issued is `UnknownNode`.
fn reported_node(topo: &crate::topology::Topology, node: NodeId) -> Result<Option<&Arc<Node>>> {
    let n = topo.node(node).ok_or_else(|| Error::UnknownNode(format!("#{}", node.0)))?;
    Ok((!n.is_removed()).then_some(n))
}
