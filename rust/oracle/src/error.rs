//! The crate's error type.

use std::fmt;

/// Errors of [`NodePools`](crate::NodePools) and of the Oracle pools.
///
/// `E` is the driver's error type ([`NodePool::Error`](crate::NodePool::Error)); for
/// the Oracle pools it is `oracle::Error` ([`OracleError`](crate::OracleError)).
///
/// No variant ever carries a user name or password: messages name nodes, hosts,
/// ports and services only.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error<E> {
    /// The core refused to route: a strict scope's node is unavailable, a prepared
    /// transaction's node is down, no node is available, an invalid gtrid or key, …
    /// Match on [`racaffinity::Error::kind`] for the reason.
    Routing(racaffinity::Error),
    /// The node's pool failed: building it, or getting a connection from it.
    ///
    /// The message includes the driver's message (so a log line is self-contained),
    /// and [`std::error::Error::source`] returns the driver error as well.
    Pool {
        /// The node (instance) name.
        node: String,
        /// The driver's error.
        source: E,
    },
    /// The pools do not fit the cluster: wrong number of pools, a node without an
    /// address or pool, a name or address that cannot go into a connect string, or a
    /// missing service name or credentials.
    Config(String),
}

impl<E> Error<E> {
    /// The node named by a [`Error::Pool`] error.
    pub fn node(&self) -> Option<&str> {
        match self {
            Error::Pool { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The driver error of a [`Error::Pool`] error.
    pub fn pool_error(&self) -> Option<&E> {
        match self {
            Error::Pool { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The core's error of a [`Error::Routing`] error.
    pub fn routing_error(&self) -> Option<&racaffinity::Error> {
        match self {
            Error::Routing(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> From<racaffinity::Error> for Error<E> {
    fn from(e: racaffinity::Error) -> Self {
        Error::Routing(e)
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Routing(e) => write!(f, "routing: {e}"),
            Error::Pool { node, source } => write!(f, "pool of node `{node}`: {source}"),
            Error::Config(m) => write!(f, "node pools config: {m}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Routing(e) => Some(e),
            Error::Pool { source, .. } => Some(source),
            Error::Config(_) => None,
        }
    }
}
