//! Shared by the tool's integration tests: a real etcd cluster
//! (tests/cluster/etcdnodes) and real PostgreSQL nodes (tests/cluster/pgnodes)
//! on ports of their own, each destroyed when the test ends, pass or fail;
//! the tool run as a process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TOOL: &str = env!("CARGO_BIN_EXE_racaffinity-feed");

fn harness(name: &str) -> String {
    format!("{}/../../tests/cluster/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[path = "../../../core/tests/support/etcd.rs"]
mod etcd;

pub use etcd::Etcd;

/// PostgreSQL nodes 1..=n from `base_port`.
pub struct Pg {
    base_port: u16,
}

impl Pg {
    pub fn run(&self, args: &[&str]) -> String {
        let out = Command::new(harness("pgnodes"))
            .args(args)
            .env("RACAFF_PG_BASE_PORT", self.base_port.to_string())
            .env("RACAFF_PG_DIR", format!("/tmp/racaffinity-pg-feed-tool-{}", self.base_port))
            .output()
            .expect("run tests/cluster/pgnodes");
        assert!(
            out.status.success(),
            "pgnodes {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `n` nodes from `RACAFF_PG_BASE_PORT` + 50 when that is set, else from
    /// `default_base_port`. Not from the variable itself: `make test-rust`
    /// runs under `with-nodes`, whose nodes hold that base, and the test's
    /// own nodes on the same ports failed to start ("already in use").
    pub fn start(default_base_port: u16, n: usize) -> Pg {
        let base_port = match std::env::var("RACAFF_PG_BASE_PORT") {
            Ok(p) if !p.is_empty() => p.parse::<u16>().expect("RACAFF_PG_BASE_PORT is a port") + 50,
            _ => default_base_port,
        };
        let pg = Pg { base_port };
        pg.run(&["start", &n.to_string()]);
        pg
    }

    pub fn addr(&self, i: u16) -> String {
        format!("127.0.0.1:{}", self.base_port + i - 1)
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| self.run(&["destroy"]));
    }
}

/// Runs the tool to its end.
pub fn tool(args: &[&str]) -> Output {
    tool_with(args, &[], None)
}

pub fn tool_with(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(TOOL);
    cmd.args(args).env_remove("RACAFF_FEED").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run racaffinity-feed");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The revision in a `… at revision R` line.
pub fn revision_of(out: &Output) -> u64 {
    let s = text(&out.stdout);
    assert!(out.status.success(), "the tool failed: {s}{}", text(&out.stderr));
    let r = s.rsplit("at revision ").next().unwrap().trim();
    r.parse().unwrap_or_else(|_| panic!("no revision in `{s}`"))
}

/// Polls `ok` until it holds, for at most `within`; the elapsed time.
pub fn eventually(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// A monitor process, its stdout lines collected as they come.
pub struct Monitor {
    pub child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    pub id: String,
}

impl Monitor {
    pub fn start(id: &str, args: &[&str]) -> Monitor {
        let mut child = Command::new(TOOL)
            .arg("monitor")
            .args(["--id", id])
            .args(args)
            .env_remove("RACAFF_FEED")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run racaffinity-feed monitor");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Monitor { child, lines, id: id.to_string() }
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Its `wrote …` lines.
    pub fn writes(&self) -> Vec<String> {
        self.lines().into_iter().filter(|l| l.starts_with("wrote ")).collect()
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap();
        assert!(st.success());
    }

    /// Waits for its exit, at most `within`.
    pub fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(start.elapsed() < within, "monitor {} did not exit within {within:?}", self.id);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
