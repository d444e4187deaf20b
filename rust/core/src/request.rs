//! One routing call for hosts that hold several affinities at once (a pool
//! asked for a connection inside a transaction, a session and a pin): the
//! precedence between them is a routing decision, so it lives here and every
//! binding gets the same answer.

use crate::cluster::Cluster;
use crate::data::DataKey;
use crate::error::Result;
use crate::pin::ContextKey;
use crate::route::Route;

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
    /// key, else its session, else the context's or thread's pin), and by the
    /// transaction placement policy when none applies or that node cannot
    /// take new work. `request.transaction` is ignored.
    pub fn tx_begin_for(&self, gtrid: &[u8], request: &RouteRequest<'_>) -> Result<Route> {
        // Before the request's session is routed: a refused call changes nothing.
        crate::transaction::check_gtrid(gtrid)?;
        if self.tx_info(gtrid).is_some() {
            return self.tx_begin(gtrid);
        }
        // The key's owner, never a per-call fallback: a fallback is a random
        // draw, and every process must place one gtrid on the same node.
        let preferred = if let Some(key) = request.key {
            self.data_owner(key)?
        } else if let Some(session) = request.session {
            Some(self.session_route(session)?.node)
        } else {
            match request.context {
                Some(ctx) => self.context_pinned_node(ctx),
                None => self.thread_pinned_node(),
            }
        };
        self.tx_begin_on(gtrid, preferred)
    }
}
