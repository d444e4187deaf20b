//! # racaffinity-oracle
//!
//! Per-instance connection pools routed by the [`racaffinity`] core. There is one
//! pool per RAC instance, and every unit of work gets a connection from the pool
//! of the instance the core routes it to: the thread's pin, the XA transaction's
//! node, the web session's node or the data key's owner.
//!
//! Two layers:
//!
//! - **[`NodePools<P>`](NodePools)** over any driver: implement the small
//!   [`NodePool`] trait for your pool type.
//! - **[`OracleNodePools`]** (feature `oracle`, on by default): one
//!   `oracle::pool::Pool` per instance, each connecting with a descriptor that
//!   names the instance (`INSTANCE_NAME`), so the listener does not balance
//!   connections away from it; Oracle errors are classified by one table,
//!   [`INSTANCE_GONE`].
//!
//! Every `acquire*` call takes a lease on the node ([`racaffinity::Cluster::lease`]);
//! the [`PooledConnection`] guard derefs to the driver's connection and releases
//! the lease with an [`Outcome`](racaffinity::Outcome) when it drops, which feeds
//! `least_outstanding` balancing and passive ejection.
//!
//! ## Quick start: Oracle
//!
#![cfg_attr(feature = "oracle", doc = "```no_run")]
#![cfg_attr(not(feature = "oracle"), doc = "```ignore")]
//! use racaffinity::Cluster;
//! use racaffinity_oracle::OracleNodePools;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let cluster = Cluster::from_config_text(
//!         "
//!         name = orcl
//!         service = MYDB
//!         nodes = MYDB1, MYDB2, MYDB3
//!         node.MYDB1.address = dbhost1:1522
//!         node.MYDB2.address = dbhost2:1522
//!         node.MYDB3.address = dbhost3:1522
//!         ",
//!     )?;
//!     let password = std::env::var("DB_PASSWORD").unwrap_or_default();
//!     // One oracle::pool::Pool per instance, each with INSTANCE_NAME in its descriptor.
//!     let pools = OracleNodePools::builder(cluster)
//!         .credentials("scott", password) // never shown by Debug, Display or errors
//!         .max_connections(20)
//!         .build()?; // needs the Oracle client library at run time (else DPI-1047)
//!
//!     // Thread affinity: everything this thread does while pinned goes to one instance.
//!     {
//!         let _pin = pools.cluster().pin_thread()?;
//!         let conn = pools.acquire()?; // derefs to oracle::Connection
//!         conn.track(conn.execute("update t set x = x + 1 where id = 1", &[]))?;
//!         conn.commit()?;
//!     } // connection back to its pool, lease released: Ok, or Failed on ORA-03113 & co.
//!
//!     // XA: every branch of a gtrid on one instance; 2PC commands go there too.
//!     let gtrid = b"gtrid-42";
//!     let branch = pools.acquire_tx(gtrid)?;
//!     // ... xa start / work / xa end / xa prepare on `branch` ...
//!     drop(branch);
//!     pools.cluster().tx_prepared(gtrid)?;
//!     let commit = pools.acquire_tx_route(gtrid)?; // never moves
//!     // ... xa commit on `commit` ...
//!     drop(commit);
//!     pools.cluster().tx_end(gtrid)?;
//!
//!     // Web sessions and data keys.
//!     let _s = pools.acquire_session(b"JSESSIONID=1f2e")?;
//!     let _k = pools.acquire_key_i64(4711)?;
//!
//!     // Failover inputs: FAN lines from your ONS subscriber, and heartbeats
//!     // every pools.cluster().heartbeat_interval_ms().
//!     pools.apply_event(
//!         "SERVICEMEMBER VERSION=1.0 service=MYDB database=orcl instance=MYDB2 \
//!          host=dbhost2 status=down reason=FAILURE card=1",
//!     )?;
//!     pools.heartbeat_once(|pool| pool.probe());
//!     Ok(())
//! }
//! ```
//!
//! An error that means "this instance is gone" ([`INSTANCE_GONE`]: `ORA-03113`,
//! `ORA-12541`, `ORA-01089`, …) releases the lease as `Failed`; others (bad SQL,
//! constraints, `ORA-01017`) as `Ok` or `Neutral`. Use
//! [`PooledConnection::track`] to classify a call's result, or
//! [`PooledConnection::fail`] / [`PooledConnection::release`] to say it yourself.
//!
//! ## Quick start: any driver
//!
//! ```
//! use racaffinity::Cluster;
//! use racaffinity_oracle::{NodePool, NodePools};
//!
//! /// A stand-in pool whose "connections" are the node's name.
//! struct NamePool(&'static str);
//!
//! impl NodePool for NamePool {
//!     type Connection = String;
//!     type Error = std::io::Error;
//!     fn get(&self) -> std::io::Result<String> {
//!         Ok(self.0.to_string())
//!     }
//!     fn is_node_failure(err: &std::io::Error) -> bool {
//!         err.kind() == std::io::ErrorKind::ConnectionRefused
//!     }
//! }
//!
//! let cluster = Cluster::from_config_text("nodes = RAC1, RAC2, RAC3")?;
//! // One pool per node, in node id order (config order).
//! let pools = NodePools::new(cluster, vec![NamePool("RAC1"), NamePool("RAC2"), NamePool("RAC3")])?;
//!
//! let pin = pools.cluster().pin_thread()?;
//! let conn = pools.acquire()?; // the pinned node's pool
//! assert_eq!(conn.node(), pin.node());
//! assert_eq!(*conn, pools.cluster().node_name(pin.node()).unwrap());
//! drop(conn);
//!
//! let first = pools.acquire_tx(b"gtrid-1")?.node();
//! assert_eq!(pools.acquire_tx(b"gtrid-1")?.node(), first); // a second branch
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Failover
//!
//! A node goes `Down` by a FAN event ([`NodePools::apply_event`]), by missed
//! heartbeats ([`NodePools::heartbeat_once`]) or by passive ejection after
//! `health.eject_after_failures` failed leases. From then on no acquire routes to
//! it: soft affinities re-pin, data keys fall back to load balancing, strict
//! scopes and prepared transactions refuse with a typed [`Error::Routing`]. A
//! failed `get` is retried once, on another node, only when the node is `Down`
//! by then; see [`NodePools`].
//!
//! ## What is not tested here
//!
//! There is no Oracle Database or Oracle client library on the build machine.
//! The Oracle layer's tests check the exact connect strings, the error table and
//! the `DPI-1047` error of building pools without a client. Routing, leases,
//! retries, heartbeats and failover are tested through [`NodePools`] over real
//! PostgreSQL servers standing in for instances (with real `PREPARE TRANSACTION`
//! / `COMMIT PREPARED` and a real `kill -9`). A real RAC and a real ONS feed are
//! not tested.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Without the `oracle` feature the Oracle items the docs link to are not built.
#![cfg_attr(not(feature = "oracle"), allow(rustdoc::broken_intra_doc_links))]

mod codes;
mod error;
#[cfg(feature = "oracle")]
mod oracle_pools;
mod pools;

pub use codes::{is_instance_gone, is_instance_gone_message, GoneCode, OracleCode, INSTANCE_GONE};
pub use error::Error;
#[cfg(feature = "oracle")]
pub use oracle_pools::{
    is_instance_gone_error, oracle_code, outcome_of, OracleError, OracleNodePools, OracleNodePoolsBuilder, OraclePool,
};
pub use pools::{LoadError, NodePool, NodePools, PartitionMap, PooledConnection};

/// Re-export of the core crate, so users need one dependency.
pub use racaffinity;

/// Re-export of the `oracle` crate this one is built on.
#[cfg(feature = "oracle")]
pub use oracle;

/// Compiles (and runs, where it can) the examples of this crate's README, the
/// text of the top-level README's section on this crate.
#[cfg(all(doctest, feature = "oracle"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
