//! Shared by the PostgreSQL-backed tests: the node harness, a `NodePool` over
//! the `postgres` crate, and helpers.
#![allow(dead_code)] // each test binary uses a different part

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use postgres::{Client, NoTls};
use racaffinity::{Cluster, NodeId};
use racaffinity_oracle::{NodePool, NodePools};

/// `tests/cluster/pgnodes`: local PostgreSQL servers standing in for RAC instances.
pub const PGNODES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/cluster/pgnodes");

/// Runs the harness; panics with its output if it fails.
pub fn pgnodes(args: &[&str]) -> String {
    let out = Command::new(PGNODES).args(args).output().unwrap_or_else(|e| panic!("cannot run {PGNODES}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`pgnodes {}` failed ({}):\n{stdout}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// One local node, as `pgnodes env` describes it.
#[derive(Debug, Clone)]
pub struct PgNode {
    /// 1-based harness index (`pgnodes kill I`).
    pub index: u32,
    pub port: u16,
    pub dsn: String,
}

/// Starts three nodes (idempotent; the harness takes a lock, so parallel test
/// processes are fine) once per test process, and returns them. Nodes are left
/// running: `make test` stops them after the whole suite.
pub fn nodes() -> &'static [PgNode] {
    static NODES: OnceLock<Vec<PgNode>> = OnceLock::new();
    NODES.get_or_init(|| {
        pgnodes(&["start", "3"]);
        parse_env(&pgnodes(&["env"]), 3)
    })
}

fn parse_env(text: &str, n: u32) -> Vec<PgNode> {
    let var = |name: String| -> String {
        let prefix = format!("export {name}=");
        let line =
            text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        line.trim_matches('\'').to_string()
    };
    (1..=n)
        .map(|i| PgNode {
            index: i,
            port: var(format!("RACAFF_NODE{i}_PORT")).parse().expect("port"),
            dsn: var(format!("RACAFF_NODE{i}_DSN")),
        })
        .collect()
}

/// Cluster config text for the nodes: instance `RAC<i>` is harness node `i`.
pub fn config(nodes: &[PgNode], extra: &str) -> String {
    let names: Vec<String> = nodes.iter().map(|n| format!("RAC{}", n.index)).collect();
    let mut text = format!("name = pgtest\nservice = svc\ndatabase = orcl\nnodes = {}\n", names.join(", "));
    for n in nodes {
        text.push_str(&format!("node.RAC{}.address = 127.0.0.1:{}\n", n.index, n.port));
    }
    text.push_str(extra);
    text
}

/// A minimal pool: a new `postgres::Client` per `get`, so nothing stale is
/// reused across a node restart. Counts its gets.
pub struct PgPool {
    dsn: String,
    pub gets: AtomicUsize,
}

impl PgPool {
    pub fn new(node: &PgNode) -> PgPool {
        PgPool {
            dsn: format!("{} connect_timeout=5 application_name=racaffinity-oracle-test", node.dsn),
            gets: AtomicUsize::new(0),
        }
    }
    pub fn gets(&self) -> usize {
        self.gets.load(Ordering::SeqCst)
    }
}

impl NodePool for PgPool {
    type Connection = Client;
    type Error = postgres::Error;

    fn get(&self) -> Result<Client, postgres::Error> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        Client::connect(&self.dsn, NoTls)
    }

    /// Connection refused/reset/closed/timed out (an I/O error), or a server
    /// shutting down or crashing (SQLSTATE classes 08 and 57P).
    fn is_node_failure(err: &postgres::Error) -> bool {
        if let Some(db) = err.as_db_error() {
            let code = db.code().code();
            return code.starts_with("08") || code.starts_with("57P");
        }
        err.is_closed() || std::error::Error::source(err).is_some_and(|s| s.is::<std::io::Error>())
    }
}

/// Node pools over the local nodes.
pub fn pools(extra_config: &str) -> NodePools<PgPool> {
    let nodes = nodes();
    let cluster = Cluster::from_config_text(&config(nodes, extra_config)).unwrap();
    NodePools::new(cluster, nodes.iter().map(PgPool::new).collect()).unwrap()
}

/// The port the server behind `client` listens on.
pub fn server_port(client: &mut Client) -> u16 {
    let port: i32 = client.query_one("SELECT inet_server_port()", &[]).unwrap().get(0);
    u16::try_from(port).unwrap()
}

/// The port of node `id` (ids follow config order, which is harness order).
pub fn port_of(id: NodeId) -> u16 {
    nodes()[id.0 as usize].port
}
