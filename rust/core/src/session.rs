//! Web-session affinity (seed 002): a session key sticks to a node until it
//! idles out, ends, or the instance withdraws affinity (`aff=FALSE`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::agreement::{self, Agreed, Standing};
use crate::cluster::Cluster;
use crate::config::SessionMode;
use crate::error::{Error, Result, Scope};
use crate::hash;
use crate::node::NodeId;
use crate::rendezvous::{self, Weights};
use crate::route::{Route, RouteKind};
use crate::sharded::Sharded;
use crate::topology::Topology;

/// Longest accepted session or data key.
pub const MAX_KEY_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct SessionEntry {
    node: NodeId,
    /// The node's session epoch when the entry was made; an `aff=FALSE`
    /// advisory bumps the node's epoch and so revokes the entry.
    epoch: u32,
    last_used_ms: u64,
}

pub(crate) struct SessionRegistry {
    map: Sharded<Box<[u8]>, SessionEntry>,
    /// Per shard: when it was last swept of idle entries.
    swept: Box<[AtomicU64]>,
    pub revoked: AtomicU64,
    pub expired: AtomicU64,
}

impl SessionRegistry {
    pub fn new() -> Self {
        let map = Sharded::new();
        let swept = (0..map.shard_count()).map(|_| AtomicU64::new(0)).collect();
        SessionRegistry { map, swept, revoked: AtomicU64::new(0), expired: AtomicU64::new(0) }
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn clear(&self) {
        self.map.drain();
    }
}

pub(crate) fn check_key(what: &str, key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!("{what} must be 1..={MAX_KEY_BYTES} bytes, got {}", key.len())));
    }
    Ok(())
}

impl Cluster {
    /// Routes a request of web session `key`: its node while the affinity
    /// holds, else a newly placed one.
    pub fn session_route(&self, key: &[u8]) -> Result<Route> {
        check_key("session key", key)?;
        // One snapshot for the whole call: every load is two locked
        // instructions on the hot path. The registry loads its own, under
        // the entry's lock (`registry_topo`).
        match self.inner.config.session.mode {
            SessionMode::Stateless => {
                let topo = self.topo();
                let route = self.session_stateless(&topo, key)?;
                self.count(&topo, Some(Scope::Session), route);
                Ok(route)
            }
            SessionMode::Registry => self.session_registry(key),
        }
    }

    fn session_stateless(&self, topo: &Topology, key: &[u8]) -> Result<Route> {
        let h = hash::hash_bytes(key);
        let settle = self.inner.config.transaction.settle_ms;
        if settle > 0 && self.is_strict(Scope::Session) {
            self.session_owner_agreed(topo, h, settle)?;
        }
        // The owner is computed over every live node advising affinity, so a
        // node going down moves only its own sessions.
        let owner = rendezvous::owner(&topo.live, h, Weights::Static, |n| n.affinity_advised());
        match owner {
            Some(n) if n.accepts_existing(self.clock()) => Ok(Route::new(n.id(), RouteKind::Affinity)),
            Some(n) if self.is_strict(Scope::Session) => Err(self.refuse(Scope::Session, n)),
            _ => {
                // Static rendezvous over the rest, like the owner itself: the
                // fallback must agree across processes whatever advisories
                // each has seen.
                let (id, kind) = self.place_rendezvous(topo, Scope::Session, h, |n| n.affinity_advised())?;
                Ok(Route::new(
                    id,
                    if kind == RouteKind::Placed && owner.is_some() { RouteKind::Repinned } else { kind },
                ))
            }
        }
    }

    /// Strict stateless sessions across processes: a session is routed only
    /// while every process that may not have seen the latest node additions,
    /// removals or weights yet names the same owner ([`crate::agreement`]);
    /// else it is refused for `transaction.settle`, never sent to two nodes.
    fn session_owner_agreed(&self, topo: &Topology, h: u64, settle: u64) -> Result<()> {
        let standing = |n: &crate::node::Node| match (n.is_removed() || !n.affinity_advised(), n.member_settled(settle))
        {
            (_, false) => Standing::Changing,
            (true, true) => Standing::Ineligible,
            (false, true) => Standing::Eligible,
        };
        let agreed = match agreement::agreed_owner(&topo.by_id, h, settle, standing) {
            // The same rule on this process's view, as a check against
            // rounding in the bounds: any doubt refuses.
            Agreed::Owner(n)
                if rendezvous::owner(&topo.live, h, Weights::Static, |n| n.affinity_advised())
                    .is_none_or(|c| c.id() != n.id()) =>
            {
                Agreed::Unsettled(n)
            }
            other => other,
        };
        match agreed {
            Agreed::Unsettled(n) => {
                self.refuse(Scope::Session, n);
                Err(Error::StrictSettling {
                    node: n.name().to_string(),
                    state: n.state(),
                    since_ms: n.new_work_changed_ago_ms(),
                    settle_ms: settle,
                })
            }
            Agreed::Owner(_) | Agreed::Nobody => Ok(()),
        }
    }

    fn session_registry(&self, key: &[u8]) -> Result<Route> {
        let now = self.clock().now_ms();
        let mut m = self.inner.sessions.map.lock(key);
        let topo = &*self.registry_topo();
        let mut repin = false;
        match self.session_entry(topo, &mut m, key, now) {
            Entry::Live(node) => {
                drop(m);
                let route = Route::new(node, RouteKind::Affinity);
                self.count(topo, Some(Scope::Session), route);
                return Ok(route);
            }
            Entry::Lost(node) if self.is_strict(Scope::Session) => {
                return Err(self.refuse(Scope::Session, topo.node(node).expect("ids are never dropped")));
            }
            Entry::Lost(_) => repin = true,
            Entry::None => {}
        }
        let placement = self.inner.config.session.placement;
        let h = hash::hash_bytes(key);
        let (id, kind) = self.place(topo, Scope::Session, placement, h, |n| n.affinity_advised())?;
        let epoch = topo.node(id).expect("placed on a known node").session_epoch();
        m.insert(key.into(), SessionEntry { node: id, epoch, last_used_ms: now });
        drop(m);
        self.sweep_shard_if_due(key, now);
        let route = Route::new(id, if repin { RouteKind::Repinned } else { kind });
        self.count(topo, Some(Scope::Session), route);
        Ok(route)
    }

    /// [`Cluster::reroute`] of a session whose node `failed` could not give
    /// a connection: the session moves off it as if it were down (a session
    /// another caller moved already keeps its new node). Stateless sessions
    /// have no entry to move: this call goes to the fallback owner, later ones
    /// follow once the node is ejected. `None`: nowhere else to go.
    pub(crate) fn session_reroute(&self, key: &[u8], failed: NodeId) -> Result<Option<Route>> {
        check_key("session key", key)?;
        let mut topo = self.topo();
        let h = hash::hash_bytes(key);
        let away = |n: &crate::node::Node| n.affinity_advised() && n.id() != failed;
        let placed = match self.inner.config.session.mode {
            SessionMode::Stateless => self
                .place_rendezvous(&topo, Scope::Session, h, away)
                .map(|(id, kind)| Route::new(id, if kind == RouteKind::Placed { RouteKind::Repinned } else { kind })),
            SessionMode::Registry => {
                let now = self.clock().now_ms();
                let mut m = self.inner.sessions.map.lock(key);
                topo = self.registry_topo();
                match self.session_entry(&topo, &mut m, key, now) {
                    // Another caller moved it already: it keeps its new node.
                    Entry::Live(node) if node != failed => Ok(Route::new(node, RouteKind::Affinity)),
                    _ => {
                        let placement = self.inner.config.session.placement;
                        self.place(&topo, Scope::Session, placement, h, away).map(|(id, kind)| {
                            if id != failed {
                                let epoch = topo.node(id).expect("placed on a known node").session_epoch();
                                m.insert(key.into(), SessionEntry { node: id, epoch, last_used_ms: now });
                            }
                            Route::new(id, if kind == RouteKind::Placed { RouteKind::Repinned } else { kind })
                        })
                    }
                }
            }
        };
        let route = match placed {
            Ok(r) if r.node != failed => r,
            Ok(_) | Err(Error::NoNodeAvailable { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        self.count(&topo, Some(Scope::Session), route);
        Ok(Some(route))
    }

    /// The registry entry of `key` as a route sees it: expired (idle past
    /// `session.idle_ttl`) and revoked (its instance withdrew affinity)
    /// entries are removed and counted here, for every caller alike; a live
    /// one is touched.
    fn session_entry(&self, topo: &Topology, m: &mut HashMap<Box<[u8]>, SessionEntry>, key: &[u8], now: u64) -> Entry {
        let reg = &self.inner.sessions;
        let Some(e) = m.get_mut(key) else { return Entry::None };
        let node = topo.node(e.node).expect("ids are never dropped");
        if now.saturating_sub(e.last_used_ms) > self.inner.config.session.idle_ttl_ms {
            m.remove(key);
            reg.expired.fetch_add(1, Ordering::Relaxed);
            Entry::None
        } else if e.epoch != node.session_epoch() && !node.is_removed() {
            // The instance withdrew affinity: a release, not a failure.
            m.remove(key);
            reg.revoked.fetch_add(1, Ordering::Relaxed);
            Entry::None
        } else if node.accepts_existing(self.clock()) {
            e.last_used_ms = now;
            Entry::Live(e.node)
        } else {
            Entry::Lost(e.node)
        }
    }

    /// Amortised expiry: each shard is swept at most once per half TTL, by
    /// whichever insert comes along, so idle sessions cannot pile up.
    fn sweep_shard_if_due(&self, key: &[u8], now: u64) {
        let reg = &self.inner.sessions;
        let ttl = self.inner.config.session.idle_ttl_ms;
        let shard = (hash::hash_bytes(key) as usize) % reg.swept.len();
        let last = reg.swept[shard].load(Ordering::Relaxed);
        if now.saturating_sub(last) < ttl / 2 + 1 {
            return;
        }
        if reg.swept[shard].compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return;
        }
        let mut m = reg.map.shard(shard);
        let before = m.len();
        m.retain(|_, e| now.saturating_sub(e.last_used_ms) <= ttl);
        reg.expired.fetch_add((before - m.len()) as u64, Ordering::Relaxed);
    }

    /// Removes every idle session now; returns how many went.
    pub fn session_sweep(&self) -> usize {
        let now = self.clock().now_ms();
        let ttl = self.inner.config.session.idle_ttl_ms;
        let mut n = 0;
        self.inner.sessions.map.retain(|_, e| {
            let keep = now.saturating_sub(e.last_used_ms) <= ttl;
            n += usize::from(!keep);
            keep
        });
        self.inner.sessions.expired.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Ends session `key`'s affinity. Returns whether it existed.
    pub fn session_end(&self, key: &[u8]) -> Result<bool> {
        check_key("session key", key)?;
        Ok(self.inner.sessions.map.lock(key).remove(key).is_some())
    }

    /// The node session `key` is bound to, if any (registry mode).
    pub fn session_node(&self, key: &[u8]) -> Option<NodeId> {
        self.inner.sessions.map.lock(key).get(key).map(|e| e.node)
    }

    /// Live session entries (registry mode).
    pub fn session_count(&self) -> usize {
        self.inner.sessions.len()
    }
}

/// A session's registry entry, as [`Cluster::session_entry`] found it.
enum Entry {
    /// None (or one that expired or was revoked, now removed).
    None,
    /// On a node that keeps its work.
    Live(NodeId),
    /// On a node that lost it (down, removed, past a drain).
    Lost(NodeId),
}
