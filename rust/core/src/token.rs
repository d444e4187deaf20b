//! WebLogic's session routing data (seed 001), carried in the session
//! identifier: the primary node and a backup on another machine, so any
//! process in any language routes the session the same way with no shared
//! state, even while their views of the topology differ.
//!
//! A token is `<session-id>!ra1.<primary>.<backup>`: `ra1` is the format
//! version; each node is named by 8 lower-case hex digits of the
//! racaffinity-hrw-v2 hash of its upper-cased name (stable across processes
//! and restarts, and no instance name in a cookie); `none` marks an empty
//! backup slot. Every character is cookie-safe.

use crate::cluster::Cluster;
use crate::error::{Error, Result, Scope};
use crate::hash;
use crate::node::{Node, NodeId};
use crate::rendezvous;
use crate::route::{Route, RouteKind};
use crate::session::MAX_KEY_BYTES;
use crate::topology::Topology;

const VERSION: &str = "ra1";
const NO_BACKUP: &str = "none";

/// A session's routing data: where it lives and where it goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRouting {
    /// The node serving the session.
    pub primary: NodeId,
    /// The node that takes over when the primary is gone, on another
    /// machine when the topology has one; `None` when no other node is usable.
    pub backup: Option<NodeId>,
}

/// What [`Cluster::route_token`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRoute {
    /// The node for this request.
    pub route: Route,
    /// The rewritten token when the routing data changed (promotion, a new
    /// backup); `None` when the client's token still holds.
    pub token: Option<String>,
}

/// What [`Cluster::route_tokens`] chose among a request's tokens, and how
/// the chosen one routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenToken {
    /// The chosen token's position among the candidates, in the order given.
    pub index: usize,
    /// The chosen token's route, as [`Cluster::route_token`] decides it: an
    /// error when no node may serve the session now (strict session mode,
    /// every node down). The index stands either way, so the caller keeps
    /// the chosen token for when a node is back.
    pub route: Result<TokenRoute>,
}

/// A token taken apart ([`Cluster::decode_token`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenParts {
    /// The application's session id.
    pub session_id: String,
    /// The primary, if this cluster knows the node the token names.
    pub primary: Option<NodeId>,
    /// The backup, if the slot is not `none` and this cluster knows the node.
    pub backup: Option<NodeId>,
}

/// The stable identifier of a node name inside a token.
pub fn node_token_id(name: &str) -> String {
    format!("{:08x}", token_id_of(name))
}

pub(crate) fn token_id_of(name: &str) -> u32 {
    hash::hash_bytes(name.to_ascii_uppercase().as_bytes()) as u32
}

/// Why `name` cannot join a cluster that has `other`: a token naming one
/// would route to the other.
pub(crate) fn token_id_clash(name: &str, other: &str) -> String {
    format!(
        "node `{name}` has the same session-token id ({}) as node `{other}`, so a token could not tell \
         them apart; rename one of them",
        node_token_id(name)
    )
}

/// The live node a token's id names. The id is parsed once and compared as
/// a number, so a route allocates nothing per node. Two names with one id
/// (about 1 in 2^32 per pair) are ambiguous: `None`, which counts as down.
fn find_node<'a>(topo: &'a Topology, id: &str) -> Option<&'a std::sync::Arc<Node>> {
    let id = u32::from_str_radix(id, 16).ok()?;
    let mut hits = topo.live.iter().filter(|n| n.token_id() == id);
    match (hits.next(), hits.next()) {
        (Some(n), None) => Some(n),
        _ => None,
    }
}

fn check_session_id(sid: &str) -> Result<()> {
    if sid.is_empty() || sid.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!("session id must be 1..={MAX_KEY_BYTES} bytes, got {}", sid.len())));
    }
    // RFC 6265 cookie-octets: the token must survive as a cookie value.
    if let Some(c) = sid.chars().find(|&c| !('\x21'..='\x7e').contains(&c) || matches!(c, '"' | ',' | ';' | '\\')) {
        return Err(Error::InvalidArgument(format!("session id contains {c:?}, which a cookie cannot carry")));
    }
    Ok(())
}

fn malformed(token: &str, why: &str) -> Error {
    let shown: String = token.chars().take(80).collect();
    Error::InvalidArgument(format!("malformed session token `{}`: {why}", shown.escape_debug()))
}

/// A token split into its parts (node ids not yet resolved).
struct Parsed<'a> {
    sid: &'a str,
    primary: &'a str,
    backup: Option<&'a str>,
}

/// Refuses a malformed or foreign token, as routing it would.
pub(crate) fn check_token(token: &str) -> Result<()> {
    parse(token).map(drop)
}

fn parse(token: &str) -> Result<Parsed<'_>> {
    let (sid, routing) = token.rsplit_once('!').ok_or_else(|| malformed(token, "no `!` before the routing data"))?;
    check_session_id(sid)?;
    let mut parts = routing.split('.');
    match parts.next() {
        Some(VERSION) => {}
        Some(v) if v.starts_with("ra") => {
            return Err(malformed(token, &format!("format `{}` is not supported (this library reads ra1)", v)))
        }
        _ => return Err(malformed(token, "not a racaffinity token")),
    }
    let (Some(primary), Some(backup), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(malformed(token, "expected ra1.<primary>.<backup>"));
    };
    let is_id = |s: &str| s.len() == 8 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !is_id(primary) || !(backup == NO_BACKUP || is_id(backup)) {
        return Err(malformed(token, "a node is 8 lower-case hex digits, an empty backup `none`"));
    }
    Ok(Parsed { sid, primary, backup: (backup != NO_BACKUP).then_some(backup) })
}

fn encode(sid: &str, topo: &Topology, r: SessionRouting) -> String {
    let id = |n: NodeId| node_token_id(topo.node(n).expect("a live node").name());
    let backup = r.backup.map_or_else(|| NO_BACKUP.to_string(), id);
    format!("{sid}!{VERSION}.{}.{backup}", id(r.primary))
}

impl Cluster {
    /// The routing data a new session with key `key` gets: the first node of
    /// the key's rendezvous ranking that takes new work, and as backup the
    /// next one on a different machine (`node.<N>.machine`, else the host of
    /// its address), else any other usable node, else none.
    pub fn session_routing(&self, key: &[u8]) -> Result<SessionRouting> {
        crate::session::check_key("session key", key)?;
        let topo = self.topo();
        let ranking = rendezvous::ranking(&topo.live, hash::hash_bytes(key), |n| n.accepts_new());
        let primary = ranking.first().ok_or(Error::NoNodeAvailable { scope: Some(Scope::Session) })?;
        Ok(SessionRouting { primary: primary.id(), backup: backup_for(&ranking, primary) })
    }

    /// A new token for session `session_id`: the id with
    /// [`Cluster::session_routing`]'s decision appended.
    pub fn session_token(&self, session_id: &str) -> Result<String> {
        check_session_id(session_id)?;
        let r = self.session_routing(session_id.as_bytes())?;
        Ok(encode(session_id, &self.topo(), r))
    }

    /// Takes a token apart without routing: the session id and the nodes it
    /// names (`None` for an empty backup slot or a node this cluster does
    /// not know). A malformed or foreign token is an error.
    pub fn decode_token(&self, token: &str) -> Result<TokenParts> {
        let p = parse(token)?;
        let topo = self.topo();
        let find = |id: &str| find_node(&topo, id).map(|n| n.id());
        Ok(TokenParts { session_id: p.sid.to_string(), primary: find(p.primary), backup: p.backup.and_then(find) })
    }

    /// Routes a request carrying `token`, by seed 001's rules: the primary
    /// while it holds its work; else the backup is promoted and a new backup
    /// chosen; with both gone, a fresh primary and backup; a backup slot
    /// that is empty or names a node that is gone gets a usable node again.
    /// A node the token names that this cluster does not know counts as
    /// down. Strict session mode refuses instead of promoting. The returned
    /// token is `Some` whenever the routing data changed.
    pub fn route_token(&self, token: &str) -> Result<TokenRoute> {
        let p = parse(token)?;
        let topo = self.topo();
        let clock = self.clock();
        let find = |id: &str| find_node(&topo, id);
        let primary = find(p.primary).filter(|n| n.accepts_existing(clock));
        let backup = p.backup.and_then(find);
        let ranking = rendezvous::ranking(&topo.live, hash::hash_bytes(p.sid.as_bytes()), |n| n.accepts_new());
        let (now, kind) = match primary {
            Some(n) => (n.clone(), RouteKind::Affinity),
            None => {
                if self.is_strict(Scope::Session) {
                    return Err(match find(p.primary) {
                        Some(n) => self.refuse(Scope::Session, n),
                        // A node this cluster does not know (another
                        // cluster's token, or one removed): no node of ours
                        // refused, so none is blamed or counted.
                        None => self.refuse_unknown(Scope::Session, p.primary),
                    });
                }
                match promoted(backup, &ranking, clock) {
                    Some(n) => (n.clone(), RouteKind::Repinned),
                    None => {
                        let h = hash::hash_bytes(p.sid.as_bytes());
                        let (id, kind) = self.place_rendezvous(&topo, Scope::Session, h, |_| true)?;
                        let route = Route::new(id, kind);
                        self.count(&topo, Some(Scope::Session), route);
                        return Ok(TokenRoute { route, token: None });
                    }
                }
            }
        };
        let keep_backup = backup.filter(|b| b.id() != now.id() && b.accepts_existing(clock));
        let routing = SessionRouting {
            primary: now.id(),
            backup: keep_backup.map(|b| b.id()).or_else(|| backup_for(&ranking, &now)),
        };
        let rewritten = encode(p.sid, &topo, routing);
        let route = Route::new(now.id(), kind);
        self.count(&topo, Some(Scope::Session), route);
        Ok(TokenRoute { route, token: (rewritten != token).then_some(rewritten) })
    }

    /// Chooses the token to route among those one request carries, in the
    /// order the client sent them, and routes it ([`Cluster::route_token`]).
    /// A browser sends one cookie per path it holds, the longest path first
    /// (RFC 6265, 5.4), so a stale token under a longer path (another
    /// cluster's, or from before a re-configuration) comes before the
    /// current one. The chosen token is the first that names a node of this
    /// cluster (its primary or backup; [`Cluster::decode_token`]), else the
    /// first well-formed one (its session id is kept, on a fresh pair of
    /// nodes). `None` when no candidate is well-formed (or there is none):
    /// the request starts a new session ([`Cluster::session_token`]).
    ///
    /// ```
    /// # use racaffinity::Cluster;
    /// let c = Cluster::from_config_text("nodes = A, B, C").unwrap();
    /// let other = Cluster::from_config_text("nodes = X, Y").unwrap();
    /// let current = c.session_token("s-1").unwrap();
    /// let stale = other.session_token("s-0").unwrap();
    /// let chosen = c.route_tokens(["garbage", stale.as_str(), current.as_str()]).unwrap();
    /// assert_eq!(chosen.index, 2);
    /// assert_eq!(chosen.route.unwrap().token, None, "the current token still holds");
    /// assert!(c.route_tokens(["garbage"]).is_none());
    /// ```
    pub fn route_tokens<I>(&self, candidates: I) -> Option<ChosenToken>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let (index, token) = {
            let topo = self.topo();
            let names_a_node = |p: &Parsed<'_>| {
                find_node(&topo, p.primary).is_some() || p.backup.is_some_and(|b| find_node(&topo, b).is_some())
            };
            let mut well_formed = None;
            let mut chosen = None;
            for (i, t) in candidates.into_iter().enumerate() {
                let Ok(p) = parse(t.as_ref()) else { continue };
                if names_a_node(&p) {
                    chosen = Some((i, t));
                    break;
                }
                if well_formed.is_none() {
                    well_formed = Some((i, t));
                }
            }
            chosen.or(well_formed)?
        };
        Some(ChosenToken { index, route: self.route_token(token.as_ref()) })
    }

    /// The node [`Cluster::route_token`] would route a request carrying
    /// `token` to, neither counted nor refused: where a new gtrid of that
    /// request is placed by preference ([`Cluster::tx_begin_for`]). `None`
    /// when no node would take it. Strict session mode does not apply: no
    /// branch exists yet, so placing the gtrid elsewhere splits nothing.
    pub(crate) fn token_node(&self, token: &str) -> Result<Option<NodeId>> {
        let p = parse(token)?;
        let topo = self.topo();
        let clock = self.clock();
        if let Some(n) = find_node(&topo, p.primary).filter(|n| n.accepts_existing(clock)) {
            return Ok(Some(n.id()));
        }
        let backup = p.backup.and_then(|id| find_node(&topo, id));
        let ranking = rendezvous::ranking(&topo.live, hash::hash_bytes(p.sid.as_bytes()), |n| n.accepts_new());
        Ok(promoted(backup, &ranking, clock).map(|n| n.id()))
    }

    /// A token's primary as every process may see it within `settle_ms`,
    /// for placing a new gtrid strictly across processes: the token is the
    /// same bytes in every process that sees the request, but a promoted
    /// backup is each process's own decision, so only the primary counts.
    /// `Node` while it takes new work by the shared inputs; `None` when by
    /// them it does not, or when no process knows it; `Unsettled` while a
    /// node of its id was added or removed, or its standing changed, within
    /// the settle time (another process may see it otherwise).
    pub(crate) fn token_agreed_primary(&self, topo: &Topology, token: &str, settle_ms: u64) -> Result<TokenOwner> {
        use crate::agreement::Standing;
        use crate::transaction::shared_standing;
        let p = parse(token)?;
        let Ok(id) = u32::from_str_radix(p.primary, 16) else { return Ok(TokenOwner::None) };
        if let Some(n) = topo.by_id.iter().find(|n| n.token_id() == id && !n.member_settled(settle_ms)) {
            return Ok(TokenOwner::Unsettled(n.clone()));
        }
        Ok(match find_node(topo, p.primary) {
            Some(n) => match shared_standing(n, settle_ms) {
                Standing::Eligible => TokenOwner::Node(n.id()),
                Standing::Changing => TokenOwner::Unsettled(n.clone()),
                Standing::Ineligible => TokenOwner::None,
            },
            None => TokenOwner::None,
        })
    }
}

/// [`Cluster::token_agreed_primary`]'s answer.
pub(crate) enum TokenOwner {
    Node(NodeId),
    Unsettled(std::sync::Arc<Node>),
    None,
}

/// The node that takes a session over from a primary that lost its work: the
/// backup holds the session's copy, so it is promoted while it takes new
/// work, and while Draining too when no node takes new work (a drain keeps
/// existing sessions); else the first of the session's own ranking.
fn promoted<'t>(
    backup: Option<&'t std::sync::Arc<Node>>,
    ranking: &[&'t std::sync::Arc<Node>],
    clock: &dyn crate::clock::Clock,
) -> Option<&'t std::sync::Arc<Node>> {
    backup
        .filter(|b| b.accepts_new())
        .or_else(|| ranking.first().copied())
        .or_else(|| backup.filter(|b| b.accepts_existing(clock)))
}

/// The backup for `primary`: the first node of `ranking` on another machine,
/// else any other node of it, else none.
fn backup_for(ranking: &[&std::sync::Arc<Node>], primary: &Node) -> Option<NodeId> {
    let others = || ranking.iter().filter(|n| n.id() != primary.id());
    let home = primary.machine();
    let elsewhere = |n: &&&std::sync::Arc<Node>| match (n.machine(), home.as_deref()) {
        (Some(a), Some(b)) => !a.eq_ignore_ascii_case(b),
        // Unknown machines cannot be told apart; prefer nodes that are known
        // to be elsewhere, so only an exact match counts.
        _ => false,
    };
    others().find(elsewhere).or_else(|| others().next()).map(|n| n.id())
}
