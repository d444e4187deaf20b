//! Node pools over the `oracle` crate: one `oracle::pool::Pool` per RAC instance.

use std::fmt;
use std::sync::{Mutex, OnceLock};

use oracle::pool::{Pool, PoolBuilder};
use racaffinity::connect::{descriptor, split_host_port, InstanceAddress};
use racaffinity::{Cluster, NodeId, Outcome};

use crate::codes::{classify, OracleCode};
use crate::error::Error;
use crate::pools::{NodePool, NodePools};

/// [`NodePools`] over one [`OraclePool`] per RAC instance. Build it with
/// [`OracleNodePools::builder`](NodePools::builder).
pub type OracleNodePools = NodePools<OraclePool>;

/// The error of [`OracleNodePools`]: [`Error`] with `oracle::Error` as the driver error.
pub type OracleError = Error<oracle::Error>;

/// The Oracle code of an `oracle::Error`: `ORA-n` for errors from the database or
/// Oracle Net, `DPI-n` for errors from ODPI-C; `None` for the crate's own errors
/// (type conversions, no rows, …).
pub fn oracle_code(err: &oracle::Error) -> Option<OracleCode> {
    let db = err.db_error()?;
    match err.kind() {
        oracle::ErrorKind::OciError if db.code() != 0 => Some(OracleCode::Ora(db.code())),
        oracle::ErrorKind::DpiError => err.dpi_code().map(OracleCode::Dpi),
        _ => None,
    }
}

/// Whether `err` means the instance is gone: its code is in
/// [`INSTANCE_GONE`](crate::INSTANCE_GONE) (with that table's `DPI-1080` rule).
/// This is [`OraclePool`]'s [`NodePool::is_node_failure`].
pub fn is_instance_gone_error(err: &oracle::Error) -> bool {
    match (oracle_code(err), err.db_error()) {
        (Some(code), Some(db)) => classify(code, db.message()),
        _ => false,
    }
}

/// The lease outcome `err` calls for: [`Outcome::Failed`] if the instance is gone,
/// else [`Outcome::Neutral`] (an error of the work, not of the node).
pub fn outcome_of(err: &oracle::Error) -> Outcome {
    if is_instance_gone_error(err) {
        Outcome::Failed
    } else {
        Outcome::Neutral
    }
}

/// The `oracle::pool::Pool` of one RAC instance, connecting with a descriptor
/// that names the instance (`INSTANCE_NAME`), so the listener does not balance
/// its connections to another instance.
///
/// The pool is opened when [`OracleNodePools`] is built. If the instance is gone
/// then (an error in [`INSTANCE_GONE`](crate::INSTANCE_GONE)), the build goes on
/// and the pool opens on its first [`get`](NodePool::get) instead, so one dead
/// instance does not keep the application from starting.
///
/// Its `Debug` output shows the node, the connect string and whether the pool is
/// open; never the credentials.
pub struct OraclePool {
    node: String,
    connect_string: String,
    /// Holds the credentials: never printed (its own `Debug` would show them).
    builder: PoolBuilder,
    pool: OnceLock<Pool>,
    opening: Mutex<()>,
}

impl OraclePool {
    /// The instance (node) name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The connect descriptor the pool uses.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// Whether the underlying pool has been opened.
    pub fn is_open(&self) -> bool {
        self.pool.get().is_some()
    }

    /// The underlying pool, opening it first if needed.
    ///
    /// # Errors
    /// The `oracle::Error` of opening the pool.
    pub fn pool(&self) -> Result<&Pool, oracle::Error> {
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let _one_opener = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let p = self.builder.build()?;
        Ok(self.pool.get_or_init(|| p))
    }

    /// A heartbeat probe for [`NodePools::heartbeat_once`]: gets a connection and
    /// pings the instance.
    pub fn probe(&self) -> bool {
        self.get().and_then(|c| c.ping()).is_ok()
    }
}

impl NodePool for OraclePool {
    type Connection = oracle::Connection;
    type Error = oracle::Error;

    fn get(&self) -> Result<oracle::Connection, oracle::Error> {
        self.pool()?.get()
    }

    fn is_node_failure(err: &oracle::Error) -> bool {
        is_instance_gone_error(err)
    }

    /// Drops the session from the pool instead of keeping it idle (its
    /// instance is draining or down). Idle sessions are left to the Oracle
    /// pool itself, which closes those of an instance FAN reports down when
    /// the pool runs in events mode.
    fn retire(&self, conn: oracle::Connection) {
        if conn.close_with_mode(oracle::conn::CloseMode::Drop).is_err() {
            // Open statements or LOBs: dropping returns it; the pool's own
            // health checks catch a dead session on its next use.
            drop(conn);
        }
    }
}

impl fmt::Debug for OraclePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OraclePool")
            .field("node", &self.node)
            .field("connect_string", &self.connect_string)
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}

/// User name and password; `Debug` shows neither.
#[derive(Clone)]
struct Credentials {
    user: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

type Configure = Box<dyn Fn(&mut PoolBuilder) + Send + Sync>;

/// Builds [`OracleNodePools`]: one `oracle::pool::Pool` per node of the cluster.
///
/// Each node needs an address in the cluster config (`node.<NAME>.address =
/// host:port`; the port defaults to [`default_port`](Self::default_port)). The
/// node name is the instance name. The connect string is
/// [`racaffinity::connect::descriptor`]'s, e.g.
/// `(DESCRIPTION=(ADDRESS_LIST=(ADDRESS=(PROTOCOL=tcp)(HOST=dbhost1)(PORT=1522)))(CONNECT_DATA=(SERVICE_NAME=MYDB)(INSTANCE_NAME=MYDB1)))`.
///
/// `Debug` never shows the credentials.
pub struct OracleNodePoolsBuilder {
    cluster: Cluster,
    service: Option<String>,
    credentials: Option<Credentials>,
    default_port: u16,
    min_connections: Option<u32>,
    max_connections: Option<u32>,
    connection_increment: Option<u32>,
    configure: Option<Configure>,
}

impl fmt::Debug for OracleNodePoolsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OracleNodePoolsBuilder")
            .field("cluster", &self.cluster)
            .field("service", &self.service)
            .field("credentials", &self.credentials)
            .field("default_port", &self.default_port)
            .field("min_connections", &self.min_connections)
            .field("max_connections", &self.max_connections)
            .field("connection_increment", &self.connection_increment)
            .field("configure", &self.configure.as_ref().map(|_| "Fn(&mut PoolBuilder)"))
            .finish()
    }
}

impl NodePools<OraclePool> {
    /// Starts building one Oracle pool per node of `cluster`.
    pub fn builder(cluster: Cluster) -> OracleNodePoolsBuilder {
        OracleNodePoolsBuilder {
            cluster,
            service: None,
            credentials: None,
            default_port: 1521,
            min_connections: None,
            max_connections: None,
            connection_increment: None,
            configure: None,
        }
    }
}

impl OracleNodePoolsBuilder {
    /// The database service to connect to. Defaults to the cluster config's
    /// `service` key (the one FAN events are filtered by).
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.service = Some(service.into());
        self
    }

    /// User name and password for every pool. Kept out of `Debug`, `Display` and
    /// every error.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials { user: user.into(), password: password.into() });
        self
    }

    /// Listener port for node addresses without one (default 1521).
    pub fn default_port(mut self, port: u16) -> Self {
        self.default_port = port;
        self
    }

    /// `PoolBuilder::min_connections` for every pool.
    pub fn min_connections(mut self, n: u32) -> Self {
        self.min_connections = Some(n);
        self
    }

    /// `PoolBuilder::max_connections` for every pool.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// `PoolBuilder::connection_increment` for every pool.
    pub fn connection_increment(mut self, n: u32) -> Self {
        self.connection_increment = Some(n);
        self
    }

    /// Adjusts every node's `PoolBuilder` before its pool is built (ping interval,
    /// timeouts, statement cache, `events(true)`, …). Runs after the size settings
    /// above. The builder it receives holds the credentials, and its own `Debug`
    /// shows them: do not log it.
    pub fn configure(mut self, f: impl Fn(&mut PoolBuilder) + Send + Sync + 'static) -> Self {
        self.configure = Some(Box::new(f));
        self
    }

    fn service_name(&self) -> Result<&str, OracleError> {
        self.service.as_deref().or(self.cluster.config().service.as_deref()).ok_or_else(|| {
            Error::Config("no service name: call `.service(..)` or set `service` in the cluster config".into())
        })
    }

    /// The connect string of each node's pool, in node id order: exactly what
    /// [`build`](Self::build) uses. Needs no Oracle client.
    ///
    /// # Errors
    /// [`Error::Config`] for a missing service name, a node without an address, an
    /// invalid address, or a node name that is not a valid instance name.
    pub fn connect_strings(&self) -> Result<Vec<(NodeId, String)>, OracleError> {
        let service = self.service_name()?;
        let mut out = Vec::new();
        for id in self.cluster.node_ids() {
            let node = self.cluster.node(id).ok_or_else(|| Error::Config(format!("node #{} vanished", id.0)))?;
            let name = node.name();
            let address = node.address().ok_or_else(|| {
                Error::Config(format!("node `{name}` has no address; set `node.{name}.address = host:port`"))
            })?;
            let (host, port) = split_host_port(&address, self.default_port)
                .map_err(|e| Error::Config(format!("node `{name}`: address: {e}")))?;
            let cs = descriptor(&InstanceAddress { host, port, service, instance: name })
                .map_err(|e| Error::Config(format!("node `{name}`: connect string: {e}")))?;
            out.push((id, cs));
        }
        Ok(out)
    }

    /// Builds and opens one pool per node.
    ///
    /// Every connect string is checked before any pool is opened. A pool whose
    /// instance is gone (an error in [`INSTANCE_GONE`](crate::INSTANCE_GONE)) is
    /// left to open on first use; any other error stops the build.
    ///
    /// # Errors
    /// - [`Error::Config`]: see [`connect_strings`](Self::connect_strings); or no
    ///   credentials.
    /// - [`Error::Pool`]: a pool failed to open, e.g. `DPI-1047` when the Oracle
    ///   client library cannot be loaded, or `ORA-01017` for bad credentials.
    pub fn build(self) -> Result<OracleNodePools, OracleError> {
        let connect_strings = self.connect_strings()?;
        let creds = self
            .credentials
            .as_ref()
            .ok_or_else(|| Error::Config("no credentials: call `.credentials(user, password)`".into()))?;
        let mut pools = Vec::with_capacity(connect_strings.len());
        for (id, cs) in connect_strings {
            let node = self.cluster.node_name(id).unwrap_or_default();
            let mut b = PoolBuilder::new(creds.user.clone(), creds.password.clone(), cs.clone());
            if let Some(n) = self.min_connections {
                b.min_connections(n);
            }
            if let Some(n) = self.max_connections {
                b.max_connections(n);
            }
            if let Some(n) = self.connection_increment {
                b.connection_increment(n);
            }
            if let Some(f) = &self.configure {
                f(&mut b);
            }
            let pool =
                OraclePool { node, connect_string: cs, builder: b, pool: OnceLock::new(), opening: Mutex::new(()) };
            match pool.pool() {
                Ok(_) => {}
                Err(e) if is_instance_gone_error(&e) => {}
                Err(e) => return Err(Error::Pool { node: pool.node, source: e }),
            }
            pools.push(pool);
        }
        NodePools::new(self.cluster, pools)
    }
}
