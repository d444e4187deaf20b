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
    ///    key or a session ([`Cluster::tx_route`]);
    /// 2. the data key: the data lives on one node ([`Cluster::route_data`]);
    /// 3. the session ([`Cluster::session_route`]);
    /// 4. the context's pin, or without a context the thread's pin, else the
    ///    load-balancing policy ([`Cluster::pick_in`], [`Cluster::pick`]).
    pub fn route(&self, request: &RouteRequest<'_>) -> Result<Route> {
        if let Some(gtrid) = request.transaction {
            return self.tx_route(gtrid);
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
}
