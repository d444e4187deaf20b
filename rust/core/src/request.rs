//! One routing call for hosts that hold several affinities at once (a pool
//! asked for a connection inside a transaction, a session and a pin): the
//! precedence between them is a routing decision, so it lives here and every
//! binding gets the same answer.

use crate::agreement::Standing;
use crate::cluster::Cluster;
use crate::data::{DataKey, KeyOwner};
use crate::error::{Error, Result, Scope};
use crate::node::NodeId;
use crate::pin::ContextKey;
use crate::route::{Route, RouteKind};
use crate::token::TokenOwner;
use crate::transaction::{shared_standing, Preferred};

/// What [`Cluster::reroute`] did to a pin.
pub(crate) enum PinMove {
    /// No pin: the retry is load-balanced.
    Unpinned,
    /// Strict, or nowhere else to go: no retry.
    Stay,
    /// The pin is (now) on this node.
    To(Route),
}

/// What a host knows about the unit of work asking for a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteRequest<'a> {
    /// The global transaction the work belongs to (its branch was begun with
    /// [`Cluster::tx_begin`]).
    pub transaction: Option<&'a [u8]>,
    /// A data (sharding) key.
    pub key: Option<DataKey<'a>>,
    /// A web session key.
    pub session: Option<&'a [u8]>,
    /// The request's session routing token ([`Cluster::route_token`]):
    /// read only when a new gtrid is placed ([`Cluster::tx_begin_for`]).
    pub token: Option<&'a str>,
    /// The host's pin context; `None` uses the calling OS thread's pin.
    pub context: Option<ContextKey>,
}

impl Cluster {
    /// Routes a request by the first affinity that applies, in this order:
    /// 1. the transaction: its branches must never split, so it wins over a
    ///    key or a session (its node; if that node is lost, soft mode moves
    ///    the transaction as [`Cluster::tx_begin`] would, strict refuses);
    /// 2. the data key: the data lives on one node ([`Cluster::route_data`]);
    /// 3. the session ([`Cluster::session_route`]);
    /// 4. the context's pin, or without a context the thread's pin, else the
    ///    load-balancing policy ([`Cluster::pick_in`], [`Cluster::pick`]).
    pub fn route(&self, request: &RouteRequest<'_>) -> Result<Route> {
        if let Some(gtrid) = request.transaction {
            return self.tx_work_route(gtrid);
        }
        if let Some(key) = request.key {
            return self.route_data(key);
        }
        if let Some(session) = request.session {
            return self.session_route(session);
        }
        match request.context {
            Some(ctx) => self.pick_in(ctx),
            None => self.pick(),
        }
    }

    /// Begins or joins a branch of `gtrid` ([`Cluster::tx_begin`]); a *new*
    /// gtrid is placed where the request's other affinities point (its data
    /// key, else the node its session routing token routes it to, else its
    /// session, else the context's or thread's pin), and by the transaction
    /// placement policy when none applies or that node cannot take new work.
    /// A token never refuses a new gtrid, even in strict session mode: no
    /// branch exists yet, so placing it elsewhere splits nothing; a
    /// malformed or foreign token is [`Error::InvalidArgument`], for a gtrid
    /// with branches too, and changes nothing. `request.transaction` is
    /// ignored.
    pub fn tx_begin_for(&self, gtrid: &[u8], request: &RouteRequest<'_>) -> Result<Route> {
        // Before the request's session is routed: a refused call changes nothing.
        crate::transaction::check_gtrid(gtrid)?;
        // Bad input is refused whatever wins, a gtrid with branches included:
        // its branch would otherwise be counted with the token never read.
        if let Some(token) = request.token {
            crate::token::check_token(token)?;
        }
        if self.tx_info(gtrid).is_some() {
            return self.tx_begin(gtrid);
        }
        let settle = self.inner.config.transaction.settle_ms;
        if settle > 0 && self.is_strict(Scope::Transaction) {
            return self.tx_begin_agreed(gtrid, request);
        }
        // The key's owner, never a per-call fallback: a fallback is a random
        // draw, and every process must place one gtrid on the same node.
        let preferred = if let Some(key) = request.key {
            self.data_owner(key)?
        } else if let Some(token) = request.token {
            self.token_node(token)?
        } else if let Some(session) = request.session {
            Some(self.session_route(session)?.node)
        } else {
            match request.context {
                Some(ctx) => self.context_pinned_node(ctx),
                None => self.thread_pinned_node(),
            }
        };
        self.tx_begin_with(gtrid, preferred.map(Preferred::Derived))
    }

    /// [`Cluster::tx_begin_for`] of a new gtrid in strict mode across
    /// processes: placed from shared inputs only. The data key's owner as
    /// every process sees it ([`Cluster::agreed_partition_owner`]) while it
    /// takes new work by the shared inputs, else where
    /// [`Cluster::place_settled`] puts the gtrid; without a key, the token's
    /// primary in the same way ([`Cluster::token_agreed_primary`]: the token
    /// is the same bytes in every process, a promoted backup is not). A
    /// session's or pin's node is this process's own state (another process
    /// placing a branch of the same gtrid has other pins), so it never places
    /// a gtrid here.
    fn tx_begin_agreed(&self, gtrid: &[u8], request: &RouteRequest<'_>) -> Result<Route> {
        let settle = self.inner.config.transaction.settle_ms;
        if let (None, Some(session)) = (request.key, request.session) {
            // Never routed here, but refused as the soft mode refuses it:
            // bad input is an error whatever the strict switch.
            crate::session::check_key("session key", session)?;
        }
        if let Some(token) = request.token {
            crate::token::check_token(token)?;
        }
        let topo = self.topo();
        let mut preferred = None;
        if let (None, Some(token)) = (request.key, request.token) {
            match self.token_agreed_primary(&topo, token, settle)? {
                TokenOwner::Node(n) => preferred = Some(Preferred::Agreed(n)),
                TokenOwner::Unsettled(n) => return Err(self.settling(&n)),
                TokenOwner::None => {}
            }
        }
        if let Some(key) = request.key {
            let p = self.partition_of(key)?;
            match self.agreed_partition_owner(&topo, p)? {
                KeyOwner::Node(n) => match shared_standing(&n, settle) {
                    Standing::Eligible => preferred = Some(Preferred::Agreed(n.id())),
                    Standing::Changing => return Err(self.settling(&n)),
                    Standing::Ineligible => {}
                },
                KeyOwner::Unsettled(n) => return Err(self.settling(&n)),
                KeyOwner::None => {}
            }
        }
        drop(topo);
        self.tx_begin_with(gtrid, preferred)
    }

    /// Routes `request` again after `failed` could not give it a connection
    /// (refused, reset, connect timeout), so that the host can retry once on
    /// another node within the same call. The host reports the failure
    /// itself first (a failed lease), so ejection counts it.
    ///
    /// The affinity that chose `failed` moves with the retry, by the same
    /// rules as when its node goes down, so the next request follows it
    /// instead of trying the dead node again: a session (registry mode) or
    /// context pin is re-pinned; a data key falls back for this call only
    /// (its data still lives on the owner); plain balancing picks another
    /// node. `Ok(None)` means "no retry": a transaction's branch (its
    /// branches must never split), a strict scope (it refuses rather than
    /// moves), or no other usable node.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] if `failed` was never a node of the cluster (a
    /// removed node is rerouted from, as a Down one); the request's own
    /// errors (an invalid key).
    pub fn reroute(&self, request: &RouteRequest<'_>, failed: NodeId) -> Result<Option<Route>> {
        let topo = self.topo();
        // A removed node's id is still the cluster's (ids are never reused): a request that
        // waited on it when it was removed is routed away from it as from a Down node.
        if topo.node(failed).is_none() {
            return Err(Error::UnknownNode(format!("#{}", failed.0)));
        }
        drop(topo);
        if request.transaction.is_some() {
            return Ok(None);
        }
        // A bad key is the caller's error whatever the strict switches say.
        if let Some(key) = request.key {
            self.partition_of(key)?;
        } else if let Some(session) = request.session {
            crate::session::check_key("session key", session)?;
        }
        let route = if request.key.is_some() {
            if self.is_strict(Scope::Data) {
                return Ok(None);
            }
            self.reroute_balanced(Some(Scope::Data), failed, RouteKind::Fallback)?
        } else if let Some(session) = request.session {
            if self.is_strict(Scope::Session) {
                return Ok(None);
            }
            self.session_reroute(session, failed)?
        } else {
            let pinned = match request.context {
                Some(ctx) => self.context_reroute(ctx, failed)?,
                None => self.thread_reroute(failed)?,
            };
            match pinned {
                PinMove::Unpinned => self.reroute_balanced(None, failed, RouteKind::Balanced)?,
                PinMove::Stay => None,
                PinMove::To(r) => {
                    // Hosts cache a pin's route until the routing epoch moves.
                    self.inner.routing.advance();
                    Some(r)
                }
            }
        };
        Ok(route.filter(|r| r.node != failed))
    }

    /// A load-balanced choice away from `failed` (no half-open trial: the
    /// retry must go where work is known to land), counted as `kind`.
    fn reroute_balanced(&self, scope: Option<Scope>, failed: NodeId, kind: RouteKind) -> Result<Option<Route>> {
        let topo = self.topo();
        let (id, panic) = match self.balanced_in(&topo, scope, |n| n.id() != failed) {
            Ok(c) => c,
            Err(Error::NoNodeAvailable { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if id == failed {
            return Ok(None);
        }
        let r = Route::new(id, if panic { RouteKind::Panic } else { kind });
        self.count(&topo, scope, r);
        Ok(Some(r))
    }
}
