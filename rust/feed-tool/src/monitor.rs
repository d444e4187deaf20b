//! `monitor`: probes every node and publishes `node/<N>/state` `down` after
//! `--misses` failed probes in a row, and `up` after one good probe of a
//! node whose record is `down`. Several monitors of one prefix elect one
//! writer: each holds an etcd lease and tries to attach the leader key
//! (`<prefix>/_monitor/leader`, value: the monitor's id) to it; the holder
//! writes, every write a transaction guarded by "the leader key is still
//! attached to my lease", so a monitor whose lease expired (it was paused,
//! cut off, or its keepalive failed) cannot write even before it notices.
//!
//! Output: one line per event on stdout (`leading as …`, `following …`,
//! `probe N: down …`, `wrote node/N/state = down at revision R`, `lost the
//! lead: …`); etcd errors on stderr.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use racaffinity::feed::etcd::{EtcdClient, Guarded};
use racaffinity::{validate_node_name, FeedUrl};

use crate::cli::{self, Args, Failure, Spec};
use crate::probe::{Kind, Prober};
use crate::signals;

/// The monitor's options.
pub const SPEC: Spec = Spec {
    valued: &[
        "--node",
        "--nodes",
        "--kind",
        "--interval",
        "--probe-timeout",
        "--misses",
        "--lease-ttl",
        "--id",
        "--pg-user",
        "--pg-dbname",
    ],
    // Test only, not in the help. --unsafe-no-election: no election, plain
    // puts, so a test can show its count of writers would see two monitors
    // writing. --unsafe-trust-lease: the monitor ignores what it knows of its
    // lease's expiry (its TTL, keepalive answers), so only the guard of each
    // write stops a monitor whose lease is gone.
    flags: &["--unsafe-no-election", "--unsafe-trust-lease"],
};

/// The relative key of the election.
pub const LEADER_KEY: &str = "_monitor/leader";

/// A parsed `monitor` command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub targets: Vec<(String, String)>,
    pub kind: Kind,
    pub interval: Duration,
    pub probe_timeout: Duration,
    pub misses: u32,
    pub lease_ttl_s: u64,
    pub id: String,
    pub election: bool,
    pub trust_lease: bool,
}

impl Options {
    /// Checks every option; nothing runs with a bad one.
    pub fn parse(args: &Args) -> Result<Options, Failure> {
        if let Some(p) = args.positionals.first() {
            return Err(Failure::Usage(format!("`monitor` takes no argument, got `{}`", p.escape_debug())));
        }
        let mut targets: Vec<(String, String)> = Vec::new();
        let lists = args.values("--nodes").iter().flat_map(|l| l.split(','));
        for t in args.values("--node").iter().map(String::as_str).chain(lists) {
            let t = t.trim();
            let (name, addr) = t
                .split_once('=')
                .ok_or_else(|| Failure::Invalid(format!("--node `{}` is not NAME=host:port", t.escape_debug())))?;
            validate_node_name(name).map_err(|e| Failure::Invalid(format!("--node: {e}")))?;
            let port_ok = addr
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && cli::digits::<u16>(p).is_some_and(|p| p > 0));
            if !port_ok {
                return Err(Failure::Invalid(format!("--node {name}: `{}` is not host:port", addr.escape_debug())));
            }
            if targets.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                return Err(Failure::Invalid(format!("--node {name} is given twice")));
            }
            targets.push((name.to_string(), addr.to_string()));
        }
        if targets.is_empty() {
            return Err(Failure::Usage(
                "`monitor` needs the nodes: --node NAME=host:port (repeated) or --nodes".into(),
            ));
        }
        let user = args.value("--pg-user").unwrap_or("postgres").to_string();
        let dbname = args.value("--pg-dbname").unwrap_or("postgres").to_string();
        let kind = match args.value("--kind").unwrap_or("tcp") {
            "tcp" => Kind::Tcp,
            "postgres" => Kind::Postgres { user, dbname },
            k => return Err(Failure::Invalid(format!("--kind `{}`: expected tcp or postgres", k.escape_debug()))),
        };
        let dur = |name: &str, default: u64| match args.value(name) {
            Some(v) => cli::duration(name, v),
            None => Ok(Duration::from_millis(default)),
        };
        let interval = dur("--interval", 1000)?;
        let probe_timeout = dur("--probe-timeout", 1000)?;
        let ttl = dur("--lease-ttl", 5000)?;
        if ttl.subsec_millis() != 0 {
            return Err(Failure::Invalid(format!("--lease-ttl must be whole seconds (etcd's unit), got {ttl:?}")));
        }
        let misses = match args.value("--misses") {
            Some(m) => cli::digits::<u32>(m).filter(|m| (1..=1000).contains(m)).ok_or_else(|| {
                Failure::Invalid(format!("--misses must be a number 1..=1000, got `{}`", m.escape_debug()))
            })?,
            None => 2,
        };
        let id = match args.value("--id") {
            Some(id) => id.to_string(),
            None => default_id(),
        };
        if id.is_empty() || id.chars().any(char::is_control) {
            return Err(Failure::Invalid("--id must be a non-empty line of text".into()));
        }
        Ok(Options {
            targets,
            kind,
            interval,
            probe_timeout,
            misses,
            lease_ttl_s: ttl.as_secs(),
            id,
            election: !args.flag("--unsafe-no-election"),
            trust_lease: args.flag("--unsafe-trust-lease"),
        })
    }
}

fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    format!("{}-{}", if host.is_empty() { "monitor" } else { host }, std::process::id())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    Unknown,
    Up,
    Down,
}

struct Node {
    name: String,
    misses: u32,
    view: View,
    /// What this monitor made the record agree with since it took the
    /// lead (`Unknown`: nothing yet).
    published: View,
    retry_at: Instant,
}

struct Lease {
    id: i64,
    /// When the lease may have expired on etcd: TTL after the last
    /// keepalive was sent (not answered), so never later than etcd's view.
    valid_until: Instant,
    next_keepalive: Instant,
}

struct Monitor<'a> {
    client: EtcdClient,
    prefix: String,
    leader_key: String,
    opts: Options,
    nodes: Vec<Node>,
    lease: Option<Lease>,
    leading: bool,
    next_campaign: Instant,
    holder_seen: Option<String>,
    last_error: String,
    /// The first failure to write `out`: the monitor stops on it.
    out_failed: Option<std::io::Error>,
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
}

/// Runs until SIGTERM or SIGINT, or until its output fails: a closed pipe
/// (`monitor | head -1`) is the reader having enough and ends it with
/// `Ok`, as the read commands; any other failure is [`Failure::Output`].
/// Either way it stops as on SIGTERM, its lease revoked, rather than run
/// on unseen.
pub fn run(
    feed: &FeedUrl,
    etcd_timeout: Duration,
    opts: Options,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), Failure> {
    signals::install();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    for (i, (_, addr)) in opts.targets.iter().enumerate() {
        let mut prober = Prober::new(opts.kind.clone(), addr.clone(), opts.probe_timeout);
        let (tx, stop, interval) = (tx.clone(), Arc::clone(&stop), opts.interval);
        std::thread::spawn(move || loop {
            let started = Instant::now();
            let result = prober.probe();
            if tx.send((i, result)).is_err() {
                return;
            }
            let next = started + interval;
            while Instant::now() < next {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep((next - Instant::now().min(next)).min(Duration::from_millis(50)));
            }
        });
    }
    let mut m = Monitor::new(feed, etcd_timeout, opts, out, err);
    m.say(&format!(
        "monitor {} of {} node(s) on {feed}{}",
        m.opts.id,
        m.nodes.len(),
        if m.opts.election { "" } else { " WITHOUT ELECTION (test only)" }
    ));
    while !signals::stopping() && m.out_failed.is_none() {
        m.take_results(&rx, Duration::from_millis(50));
        if m.opts.election {
            m.elect();
        }
        if m.leading || !m.opts.election {
            m.publish();
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(lease) = m.lease.take() {
        match m.client.lease_revoke(lease.id) {
            Ok(()) => m.say(&format!("revoked lease {:x}", lease.id)),
            Err(e) => m.warn(&format!("revoking lease {:x}: {e}", lease.id)),
        }
    }
    m.say("stopped");
    match m.out_failed {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::Output(format!("cannot write the output: {e}")))
        }
        _ => Ok(()),
    }
}

impl<'a> Monitor<'a> {
    fn new(
        feed: &FeedUrl,
        etcd_timeout: Duration,
        opts: Options,
        out: &'a mut dyn Write,
        err: &'a mut dyn Write,
    ) -> Self {
        let now = Instant::now();
        Monitor {
            client: EtcdClient::new(feed.endpoints.clone(), etcd_timeout),
            prefix: feed.prefix.clone(),
            leader_key: format!("{}{LEADER_KEY}", feed.prefix),
            nodes: opts
                .targets
                .iter()
                .map(|(n, _)| Node {
                    name: n.clone(),
                    misses: 0,
                    view: View::Unknown,
                    published: View::Unknown,
                    retry_at: now,
                })
                .collect(),
            opts,
            lease: None,
            leading: false,
            next_campaign: now,
            holder_seen: None,
            last_error: String::new(),
            out_failed: None,
            out,
            err,
        }
    }

    /// Waits up to `wait` for a probe result, then observes every result
    /// waiting: a turn that took one would let the probers, which do not
    /// wait for the loop, run ahead of it while etcd is slow, and the view
    /// it publishes would be as old as the queue is long.
    fn take_results(&mut self, rx: &mpsc::Receiver<(usize, Result<(), String>)>, wait: Duration) {
        let Ok((i, result)) = rx.recv_timeout(wait) else { return };
        self.observe(i, result);
        while let Ok((i, result)) = rx.try_recv() {
            self.observe(i, result);
        }
    }

    fn say(&mut self, line: &str) {
        if self.out_failed.is_some() {
            return;
        }
        // One event a line, whatever bytes a line repeats from etcd.
        let line = crate::one_line(line);
        if let Err(e) = writeln!(self.out, "{line}").and_then(|()| self.out.flush()) {
            self.out_failed = Some(e);
        }
    }

    /// An error line, not repeated while it stays the same.
    fn warn(&mut self, line: &str) {
        if line != self.last_error {
            let _ = writeln!(self.err, "racaffinity-feed monitor: {}", crate::one_line(line));
            self.last_error = line.to_string();
        }
    }

    fn observe(&mut self, i: usize, result: Result<(), String>) {
        let misses_needed = self.opts.misses;
        let node = &mut self.nodes[i];
        let line = match result {
            Ok(()) => {
                node.misses = 0;
                (node.view != View::Up).then(|| {
                    node.view = View::Up;
                    format!("probe {}: up", node.name)
                })
            }
            Err(e) => {
                node.misses = node.misses.saturating_add(1);
                (node.misses >= misses_needed && node.view != View::Down).then(|| {
                    node.view = View::Down;
                    format!("probe {}: down after {} failed probe(s): {e}", node.name, node.misses)
                })
            }
        };
        if let Some(line) = line {
            self.say(&line);
        }
    }

    fn step_down(&mut self, why: &str) {
        if self.leading {
            self.say(&format!("lost the lead: {why}"));
        }
        self.leading = false;
    }

    fn lose_lease(&mut self, why: &str) {
        self.step_down(why);
        if let Some(lease) = self.lease.take() {
            self.say(&format!("lease {:x} lost: {why}", lease.id));
        }
    }

    /// Keeps the lease alive (TTL/3) and campaigns (every interval) while
    /// not leading.
    fn elect(&mut self) {
        let ttl = Duration::from_secs(self.opts.lease_ttl_s);
        let now = Instant::now();
        let trust = self.opts.trust_lease;
        if let Some(lease) = &self.lease {
            let id = lease.id;
            if now >= lease.valid_until && !trust {
                self.lose_lease("its TTL ran out without a keepalive answer");
            } else if now >= lease.next_keepalive {
                match self.client.lease_keepalive(id) {
                    Ok(left) if left > 0 => {
                        if let Some(l) = &mut self.lease {
                            l.valid_until = now + Duration::from_secs(left.unsigned_abs()).min(ttl);
                            l.next_keepalive = now + ttl / 3;
                        }
                    }
                    _ if trust => {
                        if let Some(l) = &mut self.lease {
                            l.next_keepalive = now + ttl / 3;
                        }
                    }
                    Ok(_) => self.lose_lease("etcd says it expired"),
                    Err(e) => {
                        let why = format!("keepalive failed: {e}");
                        self.lose_lease(&why);
                        // Best effort: a lease we no longer renew should not
                        // keep the leader key until it expires.
                        let _ = self.client.lease_revoke(id);
                    }
                }
            }
        }
        if self.leading || now < self.next_campaign {
            return;
        }
        self.next_campaign = now + self.opts.interval;
        let id = match &self.lease {
            Some(l) => l.id,
            None => match self.client.lease_grant(self.opts.lease_ttl_s) {
                Ok(id) => {
                    self.lease = Some(Lease { id, valid_until: now + ttl, next_keepalive: now + ttl / 3 });
                    id
                }
                Err(e) => return self.warn(&format!("cannot get a lease: {e}")),
            },
        };
        match self.client.claim(&self.leader_key, &self.opts.id, id) {
            Ok((true, _)) => {
                self.leading = true;
                self.holder_seen = None;
                // Taking the lead: publish the whole current view once.
                for n in &mut self.nodes {
                    n.published = View::Unknown;
                    n.retry_at = now;
                }
                let line = format!("leading as {} (lease {id:x})", self.opts.id);
                self.say(&line);
            }
            Ok((false, holder)) => {
                let holder = holder.unwrap_or_else(|| "?".into());
                if self.holder_seen.as_deref() != Some(holder.as_str()) {
                    self.say(&format!("following {holder}"));
                    self.holder_seen = Some(holder);
                }
            }
            Err(e) => self.warn(&format!("campaigning: {e}")),
        }
    }

    /// Makes each node's record agree with the view: `down` for a node
    /// found down; `up` for a node found up whose record is `down` (a node
    /// an operator drained stays drained).
    fn publish(&mut self) {
        let now = Instant::now();
        for i in 0..self.nodes.len() {
            let (want, name) = {
                let n = &self.nodes[i];
                if n.view == View::Unknown || n.view == n.published || now < n.retry_at {
                    continue;
                }
                (n.view, n.name.clone())
            };
            let rel = format!("node/{name}/state");
            let key = format!("{}{rel}", self.prefix);
            let (value, only_if) = if want == View::Down { ("down", None) } else { ("up", Some("down")) };
            let result = match (&self.lease, self.opts.election) {
                (Some(l), true) => self.client.put_if_holder(&self.leader_key, l.id, &key, value, only_if),
                (None, true) => return self.step_down("no lease"),
                (_, false) => self.client.put(&key, value, 0).map(Guarded::Written),
            };
            match result {
                Ok(Guarded::Written(rev)) => {
                    self.nodes[i].published = want;
                    self.say(&format!("wrote {rel} = {value} at revision {rev}"));
                }
                // Not `down`: nothing of ours to undo.
                Ok(Guarded::ValueDiffers) => self.nodes[i].published = want,
                Ok(Guarded::NotHolder) => {
                    return self.step_down("the leader key is no longer attached to our lease");
                }
                Err(e) => {
                    self.nodes[i].retry_at = now + self.opts.interval;
                    self.warn(&format!("writing {rel}: {e}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(words: &[&str]) -> Result<Options, Failure> {
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        Options::parse(&cli::parse("monitor", &words, &SPEC)?)
    }

    #[test]
    fn defaults_and_node_lists() {
        let o = opts(&["--node", "A=h:1", "--nodes", "B=h:2,C=[::1]:3"]).unwrap();
        assert_eq!(o.targets.len(), 3);
        assert_eq!(
            (o.interval, o.probe_timeout, o.misses, o.lease_ttl_s),
            (Duration::from_secs(1), Duration::from_secs(1), 2, 5)
        );
        assert_eq!(o.kind, Kind::Tcp);
        assert!(o.election);
        let o = opts(&["--node=A=h:1", "--kind", "postgres", "--unsafe-no-election", "--lease-ttl", "2s"]).unwrap();
        assert!(matches!(o.kind, Kind::Postgres { .. }) && !o.election && o.lease_ttl_s == 2);
    }

    #[test]
    fn one_turn_of_the_loop_observes_every_waiting_probe_result() {
        // Each turn of the loop can spend the etcd timeout on one call (a
        // campaign, a write) while etcd does not answer, and every node's
        // prober sends a result per interval meanwhile. A turn that takes
        // one result lets the queue grow for as long as etcd is away, and
        // the monitor that leads again publishes what it saw then.
        let o = opts(&["--node", "A=h:1", "--node", "B=h:2", "--misses", "2"]).unwrap();
        let feed = FeedUrl::parse("etcd://127.0.0.1:1/p/").unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut m = Monitor::new(&feed, Duration::from_millis(10), o, &mut out, &mut err);
        let (tx, rx) = mpsc::channel();
        // A went down and came back, B went down, while the loop was in a call.
        for r in [(0, Err("x".to_string())), (1, Err("x".into())), (0, Err("x".into()))] {
            tx.send(r).unwrap();
        }
        for r in [(1, Err("x".to_string())), (0, Ok(()))] {
            tx.send(r).unwrap();
        }
        m.take_results(&rx, Duration::from_millis(50));
        assert_eq!((m.nodes[0].view, m.nodes[1].view), (View::Up, View::Down));
        // Nothing waiting: the turn waits no longer than asked.
        let t0 = Instant::now();
        m.take_results(&rx, Duration::from_millis(50));
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[test]
    fn refuses_bad_options() {
        for bad in [
            &["--node", "A"][..],
            &["--node", "A=h"],
            &["--node", "A=h:0"],
            &["--node", "a b=h:1"],
            &["--node", "A=h:1", "--node", "a=h:2"],
            &["--node", "A=h:1", "--kind", "icmp"],
            &["--node", "A=h:1", "--interval", "1"],
            &["--node", "A=h:1", "--misses", "0"],
            &["--node", "A=h:1", "--lease-ttl", "1500ms"],
            // Digits only, as the clusters' config and the feed's records
            // read numbers: `str::parse` also takes a leading `+`.
            &["--node", "A=h:+5432"],
            &["--nodes", "A=h:+1"],
            &["--node", "A=h:1", "--misses", "+2"],
        ] {
            assert!(matches!(opts(bad), Err(Failure::Invalid(_))), "{bad:?}");
        }
        assert!(matches!(opts(&[]), Err(Failure::Usage(_))));
        assert!(matches!(opts(&["--node", "A=h:1", "extra"]), Err(Failure::Usage(_))));
    }
}
