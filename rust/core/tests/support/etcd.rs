//! A real etcd cluster for the Rust integration tests (tests/cluster/etcdnodes,
//! etcd 3.7.3): three members on ports of the test's own, destroyed when the
//! handle drops, pass or fail.
//!
//! One file for every Rust suite that needs etcd (`rust/core/tests/feed_etcd.rs`
//! and `rust/feed-tool/tests/common`, which takes it with `#[path]`): a test
//! crate cannot depend on another crate's tests, and a helper crate of its own
//! would be a workspace member for some sixty lines.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use racaffinity::feed::etcd::EtcdClient;

/// A running etcd cluster of three members.
pub struct Etcd {
    /// The members' client addresses, `host:port`, member 1 first.
    pub endpoints: Vec<String>,
    base_port: u16,
    dir: String,
}

impl Etcd {
    /// Starts three members (clients from the base port, peers 10 above it).
    /// The base port is `RACAFF_ETCD_BASE_PORT` when set (as for the Python
    /// suite; the Java suites read `RACAFF_JAVA_ETCD_BASE_PORT`, so that both
    /// can run at once), else `default_base_port`; the data root is
    /// `RACAFF_ETCD_DIR` when set, else one under /tmp named by `tag` and port.
    pub fn start(default_base_port: u16, tag: &str) -> Etcd {
        let base_port = match std::env::var("RACAFF_ETCD_BASE_PORT") {
            Ok(p) if !p.is_empty() => p.parse().expect("RACAFF_ETCD_BASE_PORT is a port"),
            _ => default_base_port,
        };
        let dir = match std::env::var("RACAFF_ETCD_DIR") {
            Ok(d) if !d.is_empty() => d,
            _ => format!("/tmp/racaffinity-etcd-{tag}-{base_port}"),
        };
        let mut etcd = Etcd { endpoints: Vec::new(), base_port, dir };
        etcd.nodes(&["start", "3"]);
        let env = etcd.nodes(&["env"]);
        let line = env.lines().find(|l| l.contains("RACAFF_ETCD_ENDPOINTS=")).expect("endpoints in env");
        let value = line.split_once('=').unwrap().1.trim_matches(|c| c == '"' || c == '\'');
        etcd.endpoints = value.split(',').map(str::to_string).collect();
        etcd
    }

    /// Runs `tests/cluster/etcdnodes ARGS` on this cluster (`kill 3`,
    /// `restart 3`, `leader`, …); its standard output. A failure panics with
    /// the tool's output.
    pub fn nodes(&self, args: &[&str]) -> String {
        let tool = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/cluster/etcdnodes");
        let out = Command::new(tool)
            .args(args)
            .env("RACAFF_ETCD_BASE_PORT", self.base_port.to_string())
            .env("RACAFF_ETCD_DIR", &self.dir)
            .output()
            .expect("run tests/cluster/etcdnodes");
        assert!(
            out.status.success(),
            "etcdnodes {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A client of every member, calls bounded at 5 s.
    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(self.endpoints.clone(), Duration::from_secs(5))
    }

    /// `topology.feed` for `prefix` over every member.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}/{prefix}", self.endpoints.join(","))
    }

    /// The store's revision (it moves with every write anywhere).
    pub fn revision(&self) -> u64 {
        self.client().range_prefix("\u{1}none/").unwrap().0
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.nodes(&["destroy"])));
    }
}
