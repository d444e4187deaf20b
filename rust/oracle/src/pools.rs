//! The generic layer: one pool per node, and connections routed by the core.

use std::cell::Cell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use racaffinity::{
    Cluster, ContextKey, DataKey, EventEffect, Lease, NodeId, NodeState, Outcome, Route, RouteKind, Scope, StateChange,
};

use crate::error::Error;

/// A connection pool for one node (one RAC instance).
///
/// Implement it for your driver's pool to get routed connections from
/// [`NodePools`]. The crate implements it for [`OraclePool`](crate::OraclePool).
///
/// ```
/// use racaffinity_oracle::NodePool;
///
/// /// Opens a new connection per `get` (a real pool would reuse them).
/// struct TcpPool { addr: String }
///
/// impl NodePool for TcpPool {
///     type Connection = std::net::TcpStream;
///     type Error = std::io::Error;
///     fn get(&self) -> Result<Self::Connection, Self::Error> {
///         std::net::TcpStream::connect(&self.addr)
///     }
///     fn is_node_failure(err: &Self::Error) -> bool {
///         use std::io::ErrorKind::*;
///         matches!(err.kind(), ConnectionRefused | ConnectionReset | ConnectionAborted | TimedOut)
///     }
/// }
/// ```
pub trait NodePool: Send + Sync {
    /// What [`NodePool::get`] hands out. Dropping it should give it back to the pool.
    type Connection;
    /// The driver's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Gets a connection to this pool's node.
    ///
    /// # Errors
    /// The driver's error; [`NodePool::is_node_failure`] classifies it.
    fn get(&self) -> Result<Self::Connection, Self::Error>;

    /// Whether `err` means the node itself is gone or unreachable (connection
    /// refused or lost, instance shut down), as opposed to an error of the unit of
    /// work (bad SQL, a constraint, bad credentials). Node failures are reported to
    /// the cluster as [`Outcome::Failed`] and feed passive ejection.
    fn is_node_failure(err: &Self::Error) -> bool;

    /// Closes the pool's idle connections: its node is draining (planned
    /// maintenance) or down, and should hold none of ours when the drain
    /// ends. Called by [`NodePools::apply_event`] and [`NodePools::maintain`].
    /// The default does nothing, for pools that cannot; their idle
    /// connections then retire as they are next used and returned.
    fn close_idle(&self) {}

    /// Closes `conn` instead of returning it to the pool: its node is not
    /// taking new work. The default drops it (which, for pools whose
    /// connections go back on drop, returns it; override to really close).
    fn retire(&self, conn: Self::Connection) {
        drop(conn);
    }
}

/// One pool per node of a [`Cluster`], handing out connections to the node the
/// core routes each unit of work to.
///
/// Every `acquire*` method asks the core for a node, takes a lease on it
/// ([`Cluster::lease`]) and gets a connection from that node's pool. The returned
/// [`PooledConnection`] releases the lease with an [`Outcome`] when it drops.
///
/// # Connection failures and the one retry
///
/// When the pool's `get` fails, the lease is released as [`Outcome::Failed`] if
/// [`NodePool::is_node_failure`] says the node is gone, else as
/// [`Outcome::Neutral`]. Failed outcomes count toward passive ejection
/// (`health.eject_after_failures`, 5 by default).
///
/// If, after that, the node is `Down` (this failure ejected it, or a FAN event,
/// heartbeat or operator took it down meanwhile) and the affinity may move, the
/// call routes once more — the core then re-pins soft thread, transaction and
/// session affinities and falls back to load balancing for data keys — and tries
/// the new node. There is no second retry, and no retry onto the same node.
///
/// It does not retry when the node is still `Up` (the failures so far are below
/// the ejection threshold), when the scope is strict, for
/// [`acquire_tx_route`](NodePools::acquire_tx_route) (a transaction's 2PC never
/// moves) or for [`acquire_node`](NodePools::acquire_node); the caller gets
/// [`Error::Pool`]. Set `health.eject_after_failures = 1` to fail over at the first
/// connection failure; FAN events ([`NodePools::apply_event`]) and heartbeats
/// ([`NodePools::heartbeat_once`]) take a node down without any failed work.
pub struct NodePools<P> {
    cluster: Cluster,
    /// Indexed by `NodeId.0`; `None` for ids that had no live node at construction.
    pools: Vec<Option<P>>,
    loader: Option<MapLoader>,
}

/// What a partition-map loader returns: partition → instance name.
pub type PartitionMap = Vec<(u32, String)>;

/// A loader's failure (any error type the application's query gives).
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

type LoadFn = Box<dyn Fn() -> Result<PartitionMap, LoadError> + Send + Sync>;

/// The application's partition-map loader and when it runs next.
struct MapLoader {
    source: String,
    period: Duration,
    load: LoadFn,
    /// `None`: a period past what the clock can add (`Duration::MAX`),
    /// so `maintain()` never finds the loader due.
    next: Mutex<Option<Instant>>,
    /// Held across a load and its replace: overlapping reloads (an HA event's
    /// and maintain()'s) run one after the other, so the later read wins.
    running: Mutex<()>,
}

/// Shows the cluster and how many pools there are (pools need not be `Debug`).
impl<P> fmt::Debug for NodePools<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePools")
            .field("cluster", &self.cluster)
            .field("pools", &self.pools.iter().filter(|p| p.is_some()).count())
            .field("loader", &self.loader.as_ref().map(|l| (&l.source, l.period)))
            .finish()
    }
}

/// What a unit of work is routed by.
#[derive(Clone, Copy)]
enum Target<'k> {
    Pick,
    Context(ContextKey),
    TxBegin(&'k [u8]),
    TxRoute(&'k [u8]),
    Session(&'k [u8]),
    Data(DataKey<'k>),
    Node(NodeId),
}

impl Target<'_> {
    fn route(self, c: &Cluster) -> racaffinity::Result<Route> {
        match self {
            Target::Pick => c.pick(),
            Target::Context(k) => c.pick_in(k),
            Target::TxBegin(g) => c.tx_begin_on(g, c.thread_pinned_node()),
            Target::TxRoute(g) => c.tx_route(g),
            Target::Session(k) => c.session_route(k),
            Target::Data(k) => c.route_data(k),
            Target::Node(id) => match c.node(id) {
                Some(n) if !n.is_removed() => Ok(Route { node: id, kind: RouteKind::Affinity }),
                _ => Err(racaffinity::Error::UnknownNode(format!("#{}", id.0))),
            },
        }
    }

    /// Undoes what routing registered when no connection was obtained.
    fn undo(self, c: &Cluster) {
        if let Target::TxBegin(g) = self {
            // The branch never started: take back its count (the entry goes if it
            // was the only one, so a retry places the transaction afresh).
            let _ = c.tx_end(g);
        }
    }

    /// Whether the core may route this unit of work elsewhere on a retry.
    fn may_move(self, c: &Cluster) -> bool {
        match self {
            Target::Pick => c.thread_pinned_node().is_none() || !c.is_strict(Scope::Thread),
            Target::Context(k) => c.context_pinned_node(k).is_none() || !c.is_strict(Scope::Thread),
            Target::TxBegin(g) => !c.is_strict(Scope::Transaction) && !c.tx_info(g).is_some_and(|t| t.prepared),
            Target::Session(_) => !c.is_strict(Scope::Session),
            Target::Data(_) => !c.is_strict(Scope::Data),
            Target::TxRoute(_) | Target::Node(_) => false,
        }
    }
}

impl<P: NodePool> NodePools<P> {
    /// Pairs a cluster with one pool per live node, in [`Cluster::node_ids`] order
    /// (for a cluster built from config: config order, node id 0 first).
    ///
    /// Nodes added to the cluster later have no pool; routing to one gives
    /// [`Error::Config`].
    ///
    /// # Errors
    /// [`Error::Config`] if the number of pools differs from the number of live nodes.
    pub fn new(cluster: Cluster, pools: Vec<P>) -> Result<Self, Error<P::Error>> {
        let ids = cluster.node_ids();
        if ids.len() != pools.len() {
            return Err(Error::Config(format!(
                "{} pool(s) for {} node(s); pass one pool per node, in node id order",
                pools.len(),
                ids.len()
            )));
        }
        let len = ids.iter().map(|id| id.0 as usize + 1).max().unwrap_or(0);
        let mut slots: Vec<Option<P>> = (0..len).map(|_| None).collect();
        for (id, pool) in ids.into_iter().zip(pools) {
            slots[id.0 as usize] = Some(pool);
        }
        Ok(NodePools { cluster, pools: slots, loader: None })
    }

    /// The cluster (for transaction bookkeeping, metrics, node states, …).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The pool of `node`, if it has one.
    pub fn pool(&self, node: NodeId) -> Option<&P> {
        self.pools.get(node.0 as usize).and_then(Option::as_ref)
    }

    /// Every pool with its node, in id order.
    pub fn pools(&self) -> impl Iterator<Item = (NodeId, &P)> + '_ {
        self.pools.iter().enumerate().filter_map(|(i, p)| p.as_ref().map(|p| (NodeId(i as u32), p)))
    }

    /// A connection for the calling thread: on its pin's node if the thread is
    /// pinned ([`Cluster::pin_thread`]), else load-balanced ([`Cluster::pick`]).
    ///
    /// # Errors
    /// [`Error::Routing`] if the core refuses, [`Error::Pool`] if the pool fails
    /// (see [the retry rules](NodePools#connection-failures-and-the-one-retry)).
    pub fn acquire(&self) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::Pick)
    }

    /// A connection for pin context `key` ([`Cluster::pick_in`]): its pin's node if
    /// pinned ([`Cluster::pin_context`]), else load-balanced.
    ///
    /// # Errors
    /// As [`NodePools::acquire`].
    pub fn acquire_in(&self, key: ContextKey) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::Context(key))
    }

    /// A connection for a new branch of global transaction `gtrid`
    /// ([`Cluster::tx_begin_on`], preferring the calling thread's pin for a new
    /// gtrid): every branch, from any thread, gets the transaction's node.
    ///
    /// This begins (or joins) a branch in the core's registry. After the branch is
    /// prepared call [`Cluster::tx_prepared`]; send the 2PC commands through
    /// [`NodePools::acquire_tx_route`]; when the branch is committed or rolled back,
    /// call [`Cluster::tx_end`] (or [`Cluster::tx_complete`] for the whole
    /// transaction). If no connection is obtained, the branch is taken back.
    ///
    /// # Errors
    /// As [`NodePools::acquire`]; [`racaffinity::ErrorKind::InvalidArgument`] for an
    /// empty or over-long gtrid.
    pub fn acquire_tx(&self, gtrid: &[u8]) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::TxBegin(gtrid))
    }

    /// A connection for the two-phase-commit commands (prepare, commit, rollback,
    /// forget) of `gtrid` ([`Cluster::tx_route`]): always the transaction's node,
    /// never retried elsewhere.
    ///
    /// # Errors
    /// As [`NodePools::acquire`]; routing errors include
    /// [`racaffinity::ErrorKind::UnknownTransaction`] and
    /// [`racaffinity::ErrorKind::PreparedNodeUnavailable`].
    pub fn acquire_tx_route(&self, gtrid: &[u8]) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::TxRoute(gtrid))
    }

    /// A connection for a request of web session `key` ([`Cluster::session_route`]).
    ///
    /// # Errors
    /// As [`NodePools::acquire`].
    pub fn acquire_session(&self, key: &[u8]) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::Session(key))
    }

    /// A connection to the owner of data key `key` ([`Cluster::route_key`]).
    ///
    /// # Errors
    /// As [`NodePools::acquire`].
    pub fn acquire_key(&self, key: &[u8]) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::Data(DataKey::Bytes(key)))
    }

    /// A connection to the owner of integer data key `key` ([`Cluster::route_key_i64`]).
    ///
    /// # Errors
    /// As [`NodePools::acquire`].
    pub fn acquire_key_i64(&self, key: i64) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::Data(DataKey::Int(key)))
    }

    /// A connection to `node` itself, with no routing decision (recovery scans on
    /// every node, administration). Leased like the others; never retried.
    ///
    /// # Errors
    /// [`Error::Routing`] with [`racaffinity::ErrorKind::UnknownNode`] for an unknown
    /// or removed node; [`Error::Pool`] if the pool fails.
    pub fn acquire_node(&self, node: NodeId) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        self.acquire_target(Target::Node(node))
    }

    fn acquire_target(&self, target: Target<'_>) -> Result<PooledConnection<'_, P>, Error<P::Error>> {
        let c = &self.cluster;
        // The node and error of the first attempt, once it failed and a retry runs.
        let mut first: Option<(NodeId, Error<P::Error>)> = None;
        loop {
            let retrying = first.is_some();
            let route = match target.route(c) {
                Ok(route) => route,
                // The retry could not be routed: report the original failure.
                Err(e) => return Err(first.map_or(Error::Routing(e), |(_, err)| err)),
            };
            if let Some((node, err)) = first.take() {
                if route.node == node {
                    // No other node to go to (e.g. `panic = try_all` with all down).
                    target.undo(c);
                    return Err(err);
                }
            }
            let lease = c.lease(route);
            let Some(pool) = self.pool(route.node) else {
                lease.release(Outcome::Neutral);
                target.undo(c);
                return Err(Error::Config(format!("node `{}` has no pool", self.name(route.node))));
            };
            match pool.get() {
                Ok(conn) => {
                    return Ok(PooledConnection {
                        conn: Some(conn),
                        lease: Some(lease),
                        outcome: Cell::new(Outcome::Neutral),
                        pools: self,
                    })
                }
                Err(e) => {
                    let gone = P::is_node_failure(&e);
                    lease.release(if gone { Outcome::Failed } else { Outcome::Neutral });
                    target.undo(c);
                    let err = Error::Pool { node: self.name(route.node), source: e };
                    if !gone || retrying || !self.unusable(route.node) || !target.may_move(c) {
                        return Err(err);
                    }
                    first = Some((route.node, err));
                }
            }
        }
    }

    fn unusable(&self, node: NodeId) -> bool {
        match self.cluster.node(node) {
            Some(n) => n.is_removed() || n.state() == NodeState::Down,
            None => true,
        }
    }

    fn name(&self, node: NodeId) -> String {
        self.cluster.node_name(node).unwrap_or_else(|| format!("#{}", node.0))
    }

    /// Passes one FAN event or RLB advisory line to the cluster
    /// ([`Cluster::apply_event`]). A `status=down` event makes every later acquire
    /// avoid the instance; `status=up` brings it back.
    ///
    /// # Errors
    /// The core's typed errors (`EventParse`, `UnknownNode`, `ForeignEvent`); an
    /// erroneous line changes nothing.
    pub fn apply_event(&self, line: &str) -> racaffinity::Result<EventEffect> {
        let effect = self.cluster.apply_event(line)?;
        if !effect.changes.is_empty() {
            self.close_idle_of_unusable();
            // UCP re-syncs the partition topology after an HA event.
            if self.loader.is_some() {
                let _ = self.reload_partition_map();
            }
        }
        Ok(effect)
    }

    /// Installs the application's partition-map loader (UCP's data-affinity
    /// topology, kept in sync): `load` returns partition → instance name; the
    /// whole map replaces the cluster's explicit map in one step
    /// ([`Cluster::replace_partition_map`], source `source`). It runs now,
    /// after every FAN event that changed a node's state, and from
    /// [`NodePools::maintain`] once `period` has passed since the last run
    /// (never, for a period the clock cannot add, such as `Duration::MAX`).
    ///
    /// A failing loader (an error, or a map the cluster refuses) keeps the
    /// last good map and is counted in the metrics
    /// ([`Cluster::partition_map_load_failed`]); routing never breaks.
    ///
    /// # Errors
    /// The first load's failure (the loader stays installed and runs again),
    /// or the core's `InvalidArgument` for a source name it refuses (then
    /// nothing is installed).
    pub fn set_partition_loader<F>(&mut self, source: &str, period: Duration, load: F) -> Result<u64, LoadError>
    where
        F: Fn() -> Result<PartitionMap, LoadError> + Send + Sync + 'static,
    {
        // An empty map checks the source name without touching the map.
        racaffinity::check_partition_map_source(source)?;
        self.loader = Some(MapLoader {
            source: source.to_string(),
            period,
            load: Box::new(load),
            next: Mutex::new(None),
            running: Mutex::new(()),
        });
        self.reload_partition_map().expect("a loader is installed")
    }

    /// Runs the partition-map loader now (None: no loader installed).
    /// Returns the map's new epoch, or the failure (also counted in the
    /// metrics; the previous map stays).
    pub fn reload_partition_map(&self) -> Option<Result<u64, LoadError>> {
        let l = self.loader.as_ref()?;
        let _one_at_a_time = l.running.lock().unwrap_or_else(|p| p.into_inner());
        *l.next.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now().checked_add(l.period);
        let result = (l.load)().and_then(|map| {
            let entries: Vec<(u32, &str)> = map.iter().map(|(p, n)| (*p, n.as_str())).collect();
            self.cluster.replace_partition_map(&entries, &l.source).map_err(LoadError::from)
        });
        if let Err(e) = &result {
            // Drivers put the server's message in the source chain
            // (`postgres::Error` shows only "db error").
            let mut text = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                text.push_str(": ");
                text.push_str(&c.to_string());
                cause = c.source();
            }
            // The source passed the same check when the loader was installed.
            let _ = self.cluster.partition_map_load_failed(&l.source, &text);
        }
        Some(result)
    }

    /// Upkeep the host calls periodically from a thread of its own (the
    /// core and the pools run none), next to [`NodePools::heartbeat_once`]:
    /// closes idle connections of nodes that take no new work (an
    /// operator's drain, an ejection) and runs the partition-map loader when
    /// its period has passed. Returns the loader's result if it ran.
    pub fn maintain(&self) -> Option<Result<u64, LoadError>> {
        self.close_idle_of_unusable();
        let due = self.loader.as_ref().is_some_and(|l| {
            l.next.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|next| Instant::now() >= next)
        });
        if due {
            self.reload_partition_map()
        } else {
            None
        }
    }

    fn close_idle_of_unusable(&self) {
        for (id, pool) in self.pools() {
            if self.cluster.node(id).is_some_and(|n| !n.accepts_new()) {
                pool.close_idle();
            }
        }
    }

    /// Probes every node once with `probe` and reports each result
    /// ([`Cluster::report_probe`]); returns the state changes this caused.
    ///
    /// Hosts call this every [`Cluster::heartbeat_interval_ms`] (10 s by default),
    /// from a thread of their own: the core runs no threads. After
    /// `heartbeat.misses` (3) consecutive misses a node is `Down`; one success
    /// restores a node that heartbeats or ejection took down. Nodes are probed one
    /// after another, so a probe should bound its own time (a connect timeout).
    pub fn heartbeat_once(&self, probe: impl Fn(&P) -> bool) -> Vec<StateChange> {
        let mut changes = Vec::new();
        for (id, pool) in self.pools() {
            // A node removed meanwhile is not probed and reports nothing.
            if self.cluster.node(id).is_some_and(|n| n.is_removed()) {
                continue;
            }
            let ok = probe(pool);
            if let Ok(Some(change)) = self.cluster.report_probe(id, ok) {
                changes.push(change);
            }
        }
        changes
    }
}

/// A connection from a node's pool, leased on that node.
///
/// Derefs to the driver's connection. When it drops, the connection goes back to
/// its pool first, then the lease is released with the outcome gathered so far:
///
/// - [`Outcome::Failed`] once [`mark_failed`](PooledConnection::mark_failed) was
///   called or [`track`](PooledConnection::track) saw a node failure — sticky;
/// - else [`Outcome::Ok`] once `track` saw a success or an error of the work
///   itself (the node answered);
/// - else [`Outcome::Neutral`].
///
/// [`set_outcome`](PooledConnection::set_outcome) and
/// [`release`](PooledConnection::release) override this.
#[must_use = "dropping the guard returns the connection at once"]
pub struct PooledConnection<'a, P: NodePool> {
    conn: Option<P::Connection>,
    lease: Option<Lease<'a>>,
    outcome: Cell<Outcome>,
    pools: &'a NodePools<P>,
}

impl<'a, P: NodePool> PooledConnection<'a, P> {
    fn lease(&self) -> &Lease<'a> {
        self.lease.as_ref().expect("the lease lives until drop")
    }

    /// The node this connection is on.
    pub fn node(&self) -> NodeId {
        self.lease().node()
    }

    /// The node's name.
    pub fn node_name(&self) -> String {
        self.pools.name(self.node())
    }

    /// How the node was chosen (`Repinned`, `Fallback`, … after a failover).
    pub fn route(&self) -> Route {
        self.lease().route()
    }

    /// The outcome the lease will be released with.
    pub fn outcome(&self) -> Outcome {
        self.outcome.get()
    }

    /// Sets the outcome the lease will be released with, overriding anything so far.
    pub fn set_outcome(&self, outcome: Outcome) {
        self.outcome.set(outcome);
    }

    /// Marks the node failed: the lease will be released as [`Outcome::Failed`].
    pub fn mark_failed(&self) {
        self.outcome.set(Outcome::Failed);
    }

    /// Notes the result of work done on this connection and passes it through:
    /// an error that [`NodePool::is_node_failure`] classifies as a node failure
    /// marks the lease failed; a success, or any other error, counts as the node
    /// answering ([`Outcome::Ok`]) unless a failure was already noted.
    ///
    /// Takes `&self`, so it can wrap a call that borrows the connection
    /// (`conn.track(conn.execute(sql, &[]))?` with `oracle::Connection`); for a
    /// driver whose calls take `&mut`, bind the result first:
    /// `let r = conn.batch_execute(sql); conn.track(r)?`.
    pub fn track<T>(&self, result: Result<T, P::Error>) -> Result<T, P::Error> {
        let seen = match &result {
            Err(e) if P::is_node_failure(e) => Outcome::Failed,
            _ => Outcome::Ok,
        };
        if self.outcome.get() != Outcome::Failed {
            self.outcome.set(seen);
        }
        result
    }

    /// Returns the connection to its pool and releases the lease with `outcome`.
    pub fn release(self, outcome: Outcome) {
        self.outcome.set(outcome);
        drop(self);
    }

    /// Releases as [`Outcome::Failed`]: the node failed this unit of work.
    pub fn fail(self) {
        self.release(Outcome::Failed);
    }
}

impl<P: NodePool> Deref for PooledConnection<'_, P> {
    type Target = P::Connection;
    fn deref(&self) -> &P::Connection {
        self.conn.as_ref().expect("the connection lives until drop")
    }
}

impl<P: NodePool> DerefMut for PooledConnection<'_, P> {
    fn deref_mut(&mut self) -> &mut P::Connection {
        self.conn.as_mut().expect("the connection lives until drop")
    }
}

impl<P: NodePool> Drop for PooledConnection<'_, P> {
    fn drop(&mut self) {
        // Back to the pool first, so the node's in-flight count never
        // undercounts; a node that takes no new work (draining, down) gets
        // its connection closed instead, so a drain ends with none of ours.
        if let Some(conn) = self.conn.take() {
            let node = self.node();
            let keep = self.pools.cluster.node(node).is_some_and(|n| n.accepts_new());
            match self.pools.pool(node) {
                Some(pool) if !keep => pool.retire(conn),
                _ => drop(conn),
            }
        }
        if let Some(lease) = self.lease.take() {
            lease.release(self.outcome.get());
        }
    }
}

impl<P: NodePool> fmt::Debug for PooledConnection<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledConnection")
            .field("node", &self.node_name())
            .field("route", &self.route())
            .field("outcome", &self.outcome.get())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use racaffinity::ErrorKind;

    use super::*;

    #[derive(Debug)]
    struct MockError {
        gone: bool,
    }
    impl fmt::Display for MockError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(if self.gone { "connection refused" } else { "syntax error" })
        }
    }
    impl std::error::Error for MockError {}

    /// Which nodes fail their `get`, and how.
    #[derive(Default)]
    struct Faults {
        gone: HashSet<u32>,
        work: HashSet<u32>,
    }

    struct MockPool {
        id: u32,
        faults: Arc<Mutex<Faults>>,
        gets: AtomicUsize,
    }

    impl NodePool for MockPool {
        type Connection = u32;
        type Error = MockError;
        fn get(&self) -> Result<u32, MockError> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            let f = self.faults.lock().unwrap();
            if f.gone.contains(&self.id) {
                Err(MockError { gone: true })
            } else if f.work.contains(&self.id) {
                Err(MockError { gone: false })
            } else {
                Ok(self.id)
            }
        }
        fn is_node_failure(err: &MockError) -> bool {
            err.gone
        }
    }

    struct Fixture {
        pools: NodePools<MockPool>,
        faults: Arc<Mutex<Faults>>,
    }

    impl Fixture {
        fn new(extra_config: &str) -> Fixture {
            let cluster = Cluster::from_config_text(&format!("nodes = RAC1, RAC2, RAC3\n{extra_config}")).unwrap();
            let faults = Arc::new(Mutex::new(Faults::default()));
            let pools = (0..3).map(|id| MockPool { id, faults: faults.clone(), gets: AtomicUsize::new(0) }).collect();
            Fixture { pools: NodePools::new(cluster, pools).unwrap(), faults }
        }
        fn c(&self) -> &Cluster {
            self.pools.cluster()
        }
        fn fail(&self, node: NodeId) {
            self.faults.lock().unwrap().gone.insert(node.0);
        }
        fn fail_work(&self, node: NodeId) {
            self.faults.lock().unwrap().work.insert(node.0);
        }
        fn gets(&self, node: NodeId) -> usize {
            self.pools.pool(node).unwrap().gets.load(Ordering::SeqCst)
        }
        fn metrics(&self, node: NodeId) -> racaffinity::NodeMetrics {
            self.c().metrics().nodes.into_iter().find(|n| n.name == self.c().node_name(node).unwrap()).unwrap()
        }
        fn state(&self, node: NodeId) -> NodeState {
            self.c().node(node).unwrap().state()
        }
    }

    #[test]
    fn reloads_that_overlap_never_install_the_older_map_last() {
        // A reload after an HA event and one from maintain() can run at the
        // same time; the slower one read the table first and must not
        // overwrite what the later one read.
        let mut f = Fixture::new("data.partitions = 4");
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        f.pools
            .set_partition_loader("table", Duration::from_secs(3600), move || {
                let n = seen.fetch_add(1, Ordering::SeqCst);
                if n == 1 {
                    // The older read, slow to come back.
                    std::thread::sleep(Duration::from_millis(300));
                    return Ok((0..4).map(|p| (p, "RAC2".to_string())).collect());
                }
                Ok((0..4).map(|p| (p, "RAC3".to_string())).collect())
            })
            .unwrap();
        let pools = &f.pools;
        std::thread::scope(|s| {
            let slow = s.spawn(|| pools.reload_partition_map());
            while calls.load(Ordering::SeqCst) < 2 {
                std::thread::yield_now();
            }
            pools.reload_partition_map().unwrap().unwrap();
            slow.join().unwrap().unwrap().unwrap();
        });
        let owner = f.c().partition_owner(1).unwrap();
        assert_eq!(f.c().node_name(owner).unwrap(), "RAC3", "the older read was installed last");
    }

    /// `Duration::MAX` is how a host says "no periodic reload, only after
    /// FAN events and its own calls": the loader still runs now and on
    /// request, and `maintain()` never finds it due.
    #[test]
    fn a_loader_with_no_period_loads_now_and_never_from_maintain() {
        let mut f = Fixture::new("data.partitions = 4");
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        f.pools
            .set_partition_loader("table", Duration::MAX, move || {
                seen.fetch_add(1, Ordering::SeqCst);
                Ok((0..4).map(|p| (p, "RAC2".to_string())).collect())
            })
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the first load runs at once");
        assert!(f.pools.maintain().is_none(), "maintain() ran a loader whose period never passes");
        f.pools.reload_partition_map().unwrap().unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let owner = f.c().partition_owner(1).unwrap();
        assert_eq!(f.c().node_name(owner).unwrap(), "RAC2");
    }

    #[test]
    fn pool_count_must_match_nodes() {
        let cluster = Cluster::from_config_text("nodes = RAC1, RAC2").unwrap();
        let faults = Arc::new(Mutex::new(Faults::default()));
        let one = vec![MockPool { id: 0, faults, gets: AtomicUsize::new(0) }];
        let e = NodePools::new(cluster, one).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "node pools config: 1 pool(s) for 2 node(s); pass one pool per node, in node id order"
        );
    }

    #[test]
    fn pools_are_indexed_by_node_id() {
        let f = Fixture::new("");
        let ids: Vec<_> = f.pools.pools().map(|(id, p)| (id.0, p.id)).collect();
        assert_eq!(ids, [(0, 0), (1, 1), (2, 2)]);
        assert!(f.pools.pool(NodeId(3)).is_none());
    }

    #[test]
    fn removed_nodes_keep_the_other_pools_aligned() {
        let cluster = Cluster::from_config_text("nodes = RAC1, RAC2, RAC3").unwrap();
        cluster.remove_node("RAC2").unwrap();
        let faults = Arc::new(Mutex::new(Faults::default()));
        let pools = [0, 2].map(|id| MockPool { id, faults: faults.clone(), gets: AtomicUsize::new(0) }).into();
        let pools = NodePools::new(cluster, pools).unwrap();
        assert_eq!(pools.pool(NodeId(2)).unwrap().id, 2);
        assert!(pools.pool(NodeId(1)).is_none());
        for _ in 0..20 {
            let c = pools.acquire().unwrap();
            assert_eq!(*c, c.node().0);
            assert_ne!(c.node(), NodeId(1));
        }
    }

    #[test]
    fn pinned_thread_gets_its_node_and_leases_are_tracked() {
        let f = Fixture::new("");
        let pin = f.c().pin_thread().unwrap();
        for _ in 0..10 {
            let c = f.pools.acquire().unwrap();
            assert_eq!(c.node(), pin.node());
            assert_eq!(*c, pin.node().0, "the connection comes from the node's pool");
            assert_eq!(c.route().kind, RouteKind::Affinity);
            assert_eq!(f.c().node(pin.node()).unwrap().in_flight(), 1);
        }
        assert_eq!(f.c().node(pin.node()).unwrap().in_flight(), 0);
        assert_eq!(f.gets(pin.node()), 10);
    }

    #[test]
    fn context_pins_route_acquire_in() {
        let f = Fixture::new("");
        let key = f.c().new_context_key();
        let node = f.c().pin_context(key).unwrap().node;
        for _ in 0..10 {
            assert_eq!(f.pools.acquire_in(key).unwrap().node(), node);
        }
        f.c().release_context(key);
    }

    #[test]
    fn outcomes_reach_the_node() {
        let f = Fixture::new("");
        let pin = f.c().pin_thread().unwrap();
        let node = pin.node();

        drop(f.pools.acquire().unwrap()); // Neutral
        assert_eq!((f.metrics(node).successes, f.metrics(node).failures), (0, 0));

        let c = f.pools.acquire().unwrap();
        assert_eq!(c.outcome(), Outcome::Neutral);
        assert!(!c.track(Err::<(), _>(MockError { gone: false })).unwrap_err().gone);
        assert_eq!(c.outcome(), Outcome::Ok, "a work error means the node answered");
        drop(c);
        assert_eq!((f.metrics(node).successes, f.metrics(node).failures), (1, 0));

        let c = f.pools.acquire().unwrap();
        assert_eq!(c.track(Ok::<_, MockError>(7)).unwrap(), 7);
        assert!(c.track(Err::<(), _>(MockError { gone: true })).is_err());
        assert_eq!(c.outcome(), Outcome::Failed);
        c.track(Ok::<_, MockError>(())).unwrap();
        assert_eq!(c.outcome(), Outcome::Failed, "a failure is sticky");
        drop(c);
        assert_eq!((f.metrics(node).successes, f.metrics(node).failures), (1, 1));

        f.pools.acquire().unwrap().fail();
        assert_eq!(f.metrics(node).failures, 2);
        let c = f.pools.acquire().unwrap();
        c.mark_failed();
        c.set_outcome(Outcome::Ok);
        drop(c);
        f.pools.acquire().unwrap().release(Outcome::Ok);
        let m = f.metrics(node);
        assert_eq!((m.successes, m.failures, m.in_flight), (3, 2, 0));
    }

    #[test]
    fn node_failure_below_the_threshold_is_returned_not_retried() {
        let f = Fixture::new("");
        let pin = f.c().pin_thread().unwrap();
        let node = pin.node();
        f.fail(node);
        for i in 1..=4 {
            let e = f.pools.acquire().unwrap_err();
            assert_eq!(e.node(), Some(f.c().node_name(node).unwrap().as_str()));
            assert!(e.pool_error().unwrap().gone);
            assert_eq!(f.metrics(node).failures, i);
            assert_eq!(f.gets(node), i as usize);
        }
        assert_eq!(f.state(node), NodeState::Up);
        let total: usize = f.c().node_ids().into_iter().map(|n| f.gets(n)).sum();
        assert_eq!(total, 4, "no other node was tried");
        // The fifth failure ejects the node (default threshold 5): the retry re-pins.
        let c = f.pools.acquire().unwrap();
        assert_ne!(c.node(), node);
        assert_eq!(c.route().kind, RouteKind::Repinned);
        assert_eq!(f.state(node), NodeState::Down);
        assert_eq!(f.c().thread_pinned_node(), Some(c.node()));
        assert_eq!(f.c().node(node).unwrap().in_flight(), 0);
    }

    #[test]
    fn first_failure_fails_over_with_eject_after_one() {
        let f = Fixture::new("health.eject_after_failures = 1");
        let pin = f.c().pin_thread().unwrap();
        let node = pin.node();
        f.fail(node);
        let c = f.pools.acquire().unwrap();
        assert_ne!(c.node(), node);
        assert_eq!(*c, c.node().0);
        assert_eq!(f.gets(node), 1);
        assert_eq!(f.metrics(node).failures, 1);
        assert_eq!(f.metrics(node).in_flight, 0);
        drop(c);
        // Later acquires stay off the ejected node.
        for _ in 0..20 {
            assert_ne!(f.pools.acquire().unwrap().node(), node);
        }
        assert_eq!(f.gets(node), 1);
    }

    #[test]
    fn work_errors_are_neutral_and_not_retried() {
        let f = Fixture::new("health.eject_after_failures = 1");
        let pin = f.c().pin_thread().unwrap();
        f.fail_work(pin.node());
        for _ in 0..3 {
            let e = f.pools.acquire().unwrap_err();
            assert!(!e.pool_error().unwrap().gone);
        }
        let m = f.metrics(pin.node());
        assert_eq!((m.failures, m.successes, m.in_flight), (0, 0, 0));
        assert_eq!(f.state(pin.node()), NodeState::Up);
    }

    #[test]
    fn strict_scopes_do_not_retry() {
        let f = Fixture::new("health.eject_after_failures = 1\nthread.strict = true\nsession.strict = true");
        let pin = f.c().pin_thread().unwrap();
        f.fail(pin.node());
        let e = f.pools.acquire().unwrap_err();
        assert!(matches!(e, Error::Pool { .. }), "{e}");
        assert_eq!(f.state(pin.node()), NodeState::Down);
        // Now the core itself refuses.
        let e = f.pools.acquire().unwrap_err();
        assert_eq!(e.routing_error().unwrap().kind(), ErrorKind::StrictAffinity);

        let node = f.c().session_route(b"s-1").unwrap().node;
        if node != pin.node() {
            f.fail(node);
            assert!(matches!(f.pools.acquire_session(b"s-1").unwrap_err(), Error::Pool { .. }));
        }
        assert_eq!(
            f.pools.acquire_session(b"s-1").unwrap_err().routing_error().unwrap().kind(),
            ErrorKind::StrictAffinity
        );
    }

    #[test]
    fn unpinned_picks_retry_elsewhere() {
        let f = Fixture::new("health.eject_after_failures = 1");
        f.fail(NodeId(0));
        f.fail(NodeId(1));
        // Whatever the balancer picks, the result is node 2 or an error from a first
        // failure whose retry also failed; after both ejections only node 2 is left.
        for _ in 0..10 {
            let _ = f.pools.acquire();
        }
        assert_eq!(f.state(NodeId(0)), NodeState::Down);
        assert_eq!(f.state(NodeId(1)), NodeState::Down);
        for _ in 0..10 {
            assert_eq!(f.pools.acquire().unwrap().node(), NodeId(2));
        }
    }

    #[test]
    fn no_retry_onto_the_same_node() {
        // One node, panic = try_all: the retry routes to the same dead node.
        let cluster = Cluster::from_config_text("nodes = RAC1\nhealth.eject_after_failures = 1").unwrap();
        let faults = Arc::new(Mutex::new(Faults::default()));
        faults.lock().unwrap().gone.insert(0);
        let pools = NodePools::new(cluster, vec![MockPool { id: 0, faults, gets: AtomicUsize::new(0) }]).unwrap();
        let e = pools.acquire().unwrap_err();
        assert!(matches!(e, Error::Pool { .. }), "{e}");
        assert_eq!(pools.pool(NodeId(0)).unwrap().gets.load(Ordering::SeqCst), 1);
        assert_eq!(pools.cluster().node(NodeId(0)).unwrap().in_flight(), 0);
    }

    #[test]
    fn failed_retry_routing_reports_the_first_failure() {
        let cluster = Cluster::from_config_text("nodes = RAC1\nhealth.eject_after_failures = 1\npanic = fail").unwrap();
        let faults = Arc::new(Mutex::new(Faults::default()));
        faults.lock().unwrap().gone.insert(0);
        let pools = NodePools::new(cluster, vec![MockPool { id: 0, faults, gets: AtomicUsize::new(0) }]).unwrap();
        let e = pools.acquire().unwrap_err();
        assert!(matches!(e, Error::Pool { .. }), "{e}");
        // Once down, the core refuses up front.
        let e = pools.acquire().unwrap_err();
        assert_eq!(e.routing_error().unwrap().kind(), ErrorKind::NoNodeAvailable);
    }

    #[test]
    fn transaction_branches_share_a_node_and_failed_gets_are_taken_back() {
        let f = Fixture::new("");
        let a = f.pools.acquire_tx(b"g1").unwrap();
        let b = f.pools.acquire_tx(b"g1").unwrap();
        assert_eq!(a.node(), b.node());
        assert_eq!(f.c().tx_info(b"g1").unwrap().branches, 2);
        f.c().tx_prepared(b"g1").unwrap();
        assert_eq!(f.pools.acquire_tx_route(b"g1").unwrap().node(), a.node());
        drop((a, b));

        // A branch whose connection could not be had does not stay registered.
        let node = f.c().tx_begin(b"g2").unwrap().node;
        f.c().tx_end(b"g2").unwrap();
        f.fail(node);
        assert!(f.pools.acquire_tx(b"g2").is_err());
        assert_eq!(f.c().tx_info(b"g2"), None);
        assert_eq!(f.c().tx_count(), 1);
    }

    #[test]
    fn transaction_fails_over_before_prepare_only() {
        let f = Fixture::new("health.eject_after_failures = 1");
        let node = f.c().tx_begin(b"g1").unwrap().node;
        f.c().tx_end(b"g1").unwrap();
        f.fail(node);
        let c = f.pools.acquire_tx(b"g1").unwrap();
        assert_ne!(c.node(), node);
        let info = f.c().tx_info(b"g1").unwrap();
        assert_eq!((info.node, info.branches), (c.node(), 1));
        drop(c);

        // A prepared transaction never moves; 2PC commands are never retried
        // elsewhere and never refused for routing reasons: they go to the
        // owner, and a dead owner answers with its pool's error, again and
        // again, until it is back.
        f.c().tx_prepared(b"g1").unwrap();
        f.fail(info.node);
        for _ in 0..2 {
            let e = f.pools.acquire_tx_route(b"g1").unwrap_err();
            assert!(matches!(e, Error::Pool { .. }), "{e}");
        }
        assert_eq!(f.c().tx_begin(b"g1").unwrap_err().kind(), ErrorKind::PreparedNodeUnavailable);
        assert_eq!(f.c().tx_info(b"g1").unwrap().node, info.node);
        assert_eq!(
            f.pools.acquire_tx_route(b"nope").unwrap_err().routing_error().unwrap().kind(),
            ErrorKind::UnknownTransaction
        );
    }

    #[test]
    fn sessions_and_keys_route_to_their_nodes() {
        let f = Fixture::new("");
        for i in 0..20 {
            let key = format!("session-{i}");
            let c = f.pools.acquire_session(key.as_bytes()).unwrap();
            assert_eq!(Some(c.node()), f.c().session_node(key.as_bytes()));
            assert_eq!(*c, c.node().0);
        }
        for i in 0..20i64 {
            let owner = f.c().partition_owner(f.c().partition_of(DataKey::Int(i)).unwrap()).unwrap();
            assert_eq!(f.pools.acquire_key_i64(i).unwrap().node(), owner);
            let key = format!("customer-{i}");
            let owner = f.c().partition_owner(f.c().partition_of(DataKey::Bytes(key.as_bytes())).unwrap()).unwrap();
            assert_eq!(f.pools.acquire_key(key.as_bytes()).unwrap().node(), owner);
        }
    }

    #[test]
    fn data_keys_fall_back_when_their_owner_fails() {
        let f = Fixture::new("health.eject_after_failures = 1");
        let owner = f.c().route_key_i64(42).unwrap().node;
        f.fail(owner);
        let c = f.pools.acquire_key_i64(42).unwrap();
        assert_ne!(c.node(), owner);
        assert_eq!(c.route().kind, RouteKind::Fallback);
    }

    #[test]
    fn acquire_node_is_explicit_and_never_retried() {
        let f = Fixture::new("health.eject_after_failures = 1");
        assert_eq!(*f.pools.acquire_node(NodeId(1)).unwrap(), 1);
        f.fail(NodeId(1));
        assert!(matches!(f.pools.acquire_node(NodeId(1)).unwrap_err(), Error::Pool { .. }));
        assert_eq!(f.gets(NodeId(0)) + f.gets(NodeId(2)), 0);
        let e = f.pools.acquire_node(NodeId(9)).unwrap_err();
        assert_eq!(e.routing_error().unwrap().kind(), ErrorKind::UnknownNode);
    }

    #[test]
    fn nodes_added_later_have_no_pool() {
        let f = Fixture::new("");
        let id = f.c().add_node(racaffinity::NodeSpec::new("RAC4")).unwrap();
        let e = f.pools.acquire_node(id).unwrap_err();
        assert_eq!(e.to_string(), "node pools config: node `RAC4` has no pool");
        assert_eq!(f.c().node(id).unwrap().in_flight(), 0);
    }

    #[test]
    fn heartbeat_probes_every_node() {
        let f = Fixture::new("");
        let probed = Mutex::new(Vec::new());
        let changes = f.pools.heartbeat_once(|p| {
            probed.lock().unwrap().push(p.id);
            true
        });
        assert!(changes.is_empty());
        assert_eq!(*probed.lock().unwrap(), [0, 1, 2]);

        for round in 1..=3 {
            let changes = f.pools.heartbeat_once(|p| p.id != 1);
            if round < 3 {
                assert!(changes.is_empty(), "round {round}: {changes:?}");
            } else {
                assert_eq!(changes.len(), 1);
                assert_eq!((changes[0].name.as_str(), changes[0].to), ("RAC2", NodeState::Down));
            }
        }
        for _ in 0..20 {
            assert_ne!(f.pools.acquire().unwrap().node(), NodeId(1));
        }
        let changes = f.pools.heartbeat_once(|_| true);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].to, NodeState::Up);
    }

    #[test]
    fn events_pass_through() {
        let f = Fixture::new("");
        let effect = f
            .pools
            .apply_event(
                "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=RAC3 host=h3 status=down \
                 reason=FAILURE card=1",
            )
            .unwrap();
        assert_eq!(effect.changes.len(), 1);
        assert_eq!(f.state(NodeId(2)), NodeState::Down);
        for _ in 0..20 {
            assert_ne!(f.pools.acquire().unwrap().node(), NodeId(2));
        }
        assert_eq!(f.pools.apply_event("garbage").unwrap_err().kind(), ErrorKind::EventParse);
    }

    #[test]
    fn guard_debug_names_the_node() {
        let f = Fixture::new("");
        let c = f.pools.acquire_node(NodeId(0)).unwrap();
        let d = format!("{c:?}");
        assert!(d.starts_with("PooledConnection { node: \"RAC1\""), "{d}");
        assert_eq!(c.node_name(), "RAC1");
    }

    #[test]
    fn errors_display_and_chain() {
        let e: Error<MockError> = Error::Pool { node: "RAC2".into(), source: MockError { gone: true } };
        assert_eq!(e.to_string(), "pool of node `RAC2`: connection refused");
        assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "connection refused");
        let e: Error<MockError> = racaffinity::Error::UnknownNode("X".into()).into();
        assert_eq!(e.to_string(), "routing: unknown node `X`");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn guards_are_send_when_connections_are() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<NodePools<MockPool>>();
        sync::<NodePools<MockPool>>();
        send::<PooledConnection<'static, MockPool>>();
    }
}
