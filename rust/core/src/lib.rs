//! # racaffinity
//!
//! Client-side affinity and load balancing over the nodes of a clustered
//! database (Oracle RAC instances, or any set of per-node pools).
//!
//! One [`Cluster`] decides which node a unit of work goes to and keeps related
//! work there:
//!
//! - **load balancing** for unpinned picks ([`Policy`]);
//! - **affinity**: thread/context pins ([`Cluster::pin_thread`],
//!   [`Cluster::pin_context`]), XA transactions by gtrid ([`Cluster::tx_begin`]),
//!   web sessions ([`Cluster::session_route`]) and data keys
//!   ([`Cluster::route_key`]), each strict or soft;
//! - **failover**: FAN events and RLB advisories ([`Cluster::apply_event`]),
//!   heartbeats ([`Cluster::report_probe`]) and passive ejection from lease
//!   outcomes ([`Lease::release`]);
//! - **metrics** ([`Cluster::metrics`]).
//!
//! ```
//! use racaffinity::Cluster;
//!
//! let cluster = Cluster::from_config_text("nodes = MYDB1, MYDB2, MYDB3")?;
//! let route = cluster.tx_begin(b"gtrid-42")?;
//! assert_eq!(cluster.tx_begin(b"gtrid-42")?.node, route.node); // second branch
//! cluster.apply_event("SERVICEMEMBER VERSION=1.0 service=svc database=orcl \
//!     instance=MYDB2 host=h2 status=down reason=FAILURE card=1")?;
//! # Ok::<(), racaffinity::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod agreement;
mod balance;
mod clock;
mod cluster;
pub mod config;
pub mod connect;
pub mod continuity;
mod counter;
mod data;
mod epoch;
mod error;
pub mod event;
mod failover;
pub mod feed;
mod fork;
pub mod hash;
mod lease;
mod metrics;
mod node;
mod pin;
mod rendezvous;
mod request;
mod route;
mod session;
mod sharded;
mod thread_hits;
mod token;
mod topology;
mod transaction;

pub use balance::{PanicPolicy, Policy};
pub use clock::{Clock, ManualClock, SystemClock};
pub use cluster::{ClockDebug, Cluster, ClusterBuilder};
pub use config::{
    Config, DataConfig, Placement, RecoveryScope, SessionConfig, SessionMode, ThreadConfig, TransactionConfig,
};
pub use continuity::{
    classify_oracle_error, classify_sqlstate, sets_session_state, CommitOutcome, ErrorClass, ReplayRefusal, ReplayStep,
    RequestFailure, SqlReading, TransactionControl,
};
pub use data::{check_partition_map_source, DataKey};
pub use epoch::{
    HostLeased, RoutingEpoch, HOST_LEASE_BEGIN, HOST_LEASE_END_NEUTRAL, HOST_LEASE_END_OK, HOST_LEASE_IN_FLIGHT_BITS,
    HOST_LEASE_NODES, HOST_LEASE_OFFSET, HOST_LEASE_STRIPES,
};
pub use error::{Error, ErrorKind, Result, Scope};
pub use failover::{EventEffect, StateChange};
pub use feed::{FeedMetrics, FeedOutcome, FeedUrl, MAX_FEED_VALUE_BYTES};
pub use fork::{after_fork, after_fork_in_child, prepare_fork};
pub use lease::{Lease, LeaseToken, Outcome};
pub use metrics::{MetricsSnapshot, NodeMetrics, ScopeMetrics};
pub use node::{
    check_weight, validate_node_name, DownCause, HealthConfig, LocalConfig, Locality, Node, NodeId, NodeSpec,
    NodeState, MAX_NODE_NAME, MAX_WEIGHT,
};
pub use pin::{ContextKey, ContextPin, ThreadPin};
pub use request::RouteRequest;
pub use route::{Route, RouteKind};
pub use session::MAX_KEY_BYTES;
pub use token::{node_token_id, ChosenToken, SessionRouting, TokenParts, TokenRoute};
pub use transaction::{xa_transaction_key, TxInfo, MAX_GTRID_BYTES, MAX_XA_TRANSACTION_KEY_BYTES};

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Compiles and runs the README's Rust quick start as a doctest, so it keeps
/// working as written.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
