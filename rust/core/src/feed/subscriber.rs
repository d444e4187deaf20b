//! The topology feed's subscriber: one thread per cluster that reads every
//! record under the feed's etcd prefix, then watches it, and applies each
//! record in revision order as a versioned input (`apply_feed_record`, the
//! record's `mod_revision` as its version).
//!
//! Resuming is what makes it exact: the thread remembers the last revision
//! it applied and re-opens the watch from the next one after any disconnect,
//! so nothing is lost and nothing applied twice. When etcd has compacted
//! that revision away, it reads the whole prefix again; records it had seen
//! that are gone by then are applied as deletions at the read's revision.
//! A record applied twice would be harmless anyway (the shared layer is a
//! join), but the counters in the metrics stay exact this way.
//!
//! A record about a node no record has added yet (a FAN line relayed before
//! its instance's `node/` record, or read before it: a full read comes back
//! sorted by key, and `fan/` sorts before `node/`) is kept, and applied
//! again after every batch that applied something, until its node is there
//! or a later record replaces it. Records are versioned, so applying one
//! late ends where the log in revision order ends: a process that watched
//! the records arrive and one that read them all later agree.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::etcd::{EtcdClient, EtcdError, KeyValue, Watch};
use super::FeedOutcome;
use crate::cluster::{Cluster, Inner};
use crate::config::FeedConfig;
use crate::error::{Error, ErrorKind};

/// Longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long one wait for a watch message lasts: the stop flag is checked
/// this often.
const POLL: Duration = Duration::from_millis(200);

/// Feed health, as the metrics show it.
#[derive(Debug, Default)]
pub(crate) struct Health {
    pub connected: AtomicBool,
    /// The revision up to which every record was applied.
    pub revision: AtomicU64,
    /// The store's revision at the last answer (a linearizable read goes
    /// through the leader).
    pub leader_revision: AtomicU64,
    /// Records (keys) under the prefix written (put or deleted) after
    /// `revision`, at the last check: a key written twice counts once.
    pub lag: AtomicU64,
    pub applied: AtomicU64,
    pub stale: AtomicU64,
    pub refused: AtomicU64,
    pub reconnects: AtomicU64,
    pub full_reads: AtomicU64,
    pub last_error: Mutex<Option<String>>,
    pub last_refused: Mutex<Option<String>>,
}

/// What the metrics report about a cluster's feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedMetrics {
    /// `topology.feed`.
    pub url: String,
    /// A watch is open and answering.
    pub connected: bool,
    /// Every record up to this revision is applied.
    pub revision: u64,
    /// etcd's revision at the subscriber's last answer.
    pub leader_revision: u64,
    /// Records (keys) under the prefix written (put or deleted) after
    /// `revision` (at the last check): a key written several times counts
    /// once, each key of one transaction counts.
    pub lag: u64,
    /// Records that changed or confirmed this cluster's view.
    pub applied: u64,
    /// Records older than what the cluster had (no change).
    pub stale: u64,
    /// Records refused (malformed, unknown node): nothing changed.
    pub refused: u64,
    /// Watches re-opened after a failure.
    pub reconnects: u64,
    /// Whole-prefix reads (the first, and one after each compaction).
    pub full_reads: u64,
    /// The last failure to reach etcd, if the feed is not connected.
    pub last_error: Option<String>,
    /// Why the last refused record was refused.
    pub last_refused: Option<String>,
}

/// A cluster's subscription; dropping it (with the cluster) stops the thread.
pub(crate) struct Subscription {
    url: String,
    publisher: super::publish::Publisher,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
    /// What a forked child needs to start its own thread (the parent's is
    /// not in the child); registered in [`LIVE`].
    _restart: Arc<Restart>,
}

/// Everything a subscriber thread starts from.
pub(crate) struct Restart {
    cluster: Weak<Inner>,
    url: crate::feed::FeedUrl,
    timeout: Duration,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
}

/// Every live subscription of the process, for a forked child to restart.
static LIVE: Mutex<Vec<Weak<Restart>>> = Mutex::new(Vec::new());

/// Held across a fork (crate::fork), so the child finds [`LIVE`] unlocked.
pub(crate) fn lock_live() -> std::sync::MutexGuard<'static, Vec<Weak<Restart>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// In a forked child: the parent's subscriber threads are not there; each
/// live subscription starts a thread of its own, which reads the whole
/// prefix again (the records it applies again are stale: nothing changes).
pub(crate) fn restart_in_child() {
    let live: Vec<Arc<Restart>> = lock_live().iter().filter_map(Weak::upgrade).collect();
    for r in live {
        if r.stop.load(Ordering::Acquire) {
            continue;
        }
        r.health.connected.store(false, Ordering::Release);
        spawn(&r, None);
    }
}

fn spawn(r: &Restart, ready: Option<mpsc::Sender<()>>) -> bool {
    let worker = Worker {
        cluster: r.cluster.clone(),
        client: EtcdClient::new(r.url.endpoints.clone(), r.timeout),
        prefix: r.url.prefix.clone(),
        timeout: r.timeout,
        health: r.health.clone(),
        stop: r.stop.clone(),
        revision: 0,
        known: HashSet::new(),
        waiting: HashMap::new(),
        ready,
        was_live: false,
        sleep: Box::new(sleep_unless_stopped),
    };
    match std::thread::Builder::new().name("racaffinity-feed".into()).spawn(move || worker.run()) {
        Ok(_) => true,
        Err(e) => {
            *crate::fork::lock(&r.health.last_error) = Some(format!("no thread: {e}"));
            false
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Subscription {
    /// Starts the thread and waits up to the feed timeout for the first full
    /// read, so a process that starts while etcd answers routes by the
    /// fleet's view from its first call.
    pub(crate) fn start(cluster: &Cluster, cfg: &FeedConfig) -> Option<Subscription> {
        let url = cfg.url.clone()?;
        let health = Arc::new(Health::default());
        let stop = Arc::new(AtomicBool::new(false));
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let (ready_tx, ready_rx) = mpsc::channel();
        let restart = Arc::new(Restart {
            cluster: Arc::downgrade(&cluster.inner),
            url: url.clone(),
            timeout,
            health: health.clone(),
            stop: stop.clone(),
        });
        {
            let mut live = lock_live();
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&restart));
        }
        if spawn(&restart, Some(ready_tx)) {
            let _ = ready_rx.recv_timeout(timeout + POLL);
        }
        let publisher = super::publish::Publisher {
            client: EtcdClient::new(url.endpoints.clone(), timeout),
            prefix: url.prefix.clone(),
        };
        Some(Subscription { url: url.to_string(), publisher, health, stop, _restart: restart })
    }

    pub(crate) fn metrics(&self) -> FeedMetrics {
        let h = &self.health;
        let connected = h.connected.load(Ordering::Acquire);
        FeedMetrics {
            url: self.url.clone(),
            connected,
            revision: h.revision.load(Ordering::Acquire),
            leader_revision: h.leader_revision.load(Ordering::Relaxed),
            lag: h.lag.load(Ordering::Relaxed),
            applied: h.applied.load(Ordering::Relaxed),
            stale: h.stale.load(Ordering::Relaxed),
            refused: h.refused.load(Ordering::Relaxed),
            reconnects: h.reconnects.load(Ordering::Relaxed),
            full_reads: h.full_reads.load(Ordering::Relaxed),
            last_error: if connected { None } else { crate::fork::lock(&h.last_error).clone() },
            last_refused: crate::fork::lock(&h.last_refused).clone(),
        }
    }

    pub(crate) fn publisher(&self) -> &super::publish::Publisher {
        &self.publisher
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

struct Worker {
    cluster: Weak<Inner>,
    client: EtcdClient,
    prefix: String,
    timeout: Duration,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
    /// Every record up to this revision is applied (0: nothing read yet).
    revision: u64,
    /// Keys (relative) present at `revision`, the tools' own (`_…`) too: a
    /// deletion since shows only as one of them missing (lost to a
    /// compaction, or not brought by a silent watch).
    known: HashSet<String>,
    /// Records refused for a node not added yet, by key (relative): the
    /// latest of each, applied again after each batch that applied anything.
    waiting: HashMap<String, KeyValue>,
    ready: Option<mpsc::Sender<()>>,
    /// The current watch was created (the feed answered since the last failure).
    was_live: bool,
    /// Spends a back-off pause; false when stopped meanwhile. Tests record
    /// the pauses instead of sleeping them.
    sleep: Box<Sleep>,
}

/// A back-off pause's length and a "stopped?" check; false when stopped.
type Sleep = dyn FnMut(Duration, &dyn Fn() -> bool) -> bool + Send;

/// A back-off pause in slices of [`POLL`], so a stopped subscription ends
/// within one.
fn sleep_unless_stopped(pause: Duration, stopped: &dyn Fn() -> bool) -> bool {
    let until = Instant::now() + pause;
    while Instant::now() < until {
        if stopped() {
            return false;
        }
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
    !stopped()
}

/// Why a watch ended.
enum Ended {
    Stopped,
    Compacted,
    Failed(String),
}

impl Worker {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.cluster.strong_count() == 0
    }

    fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        let mut need_read = true;
        // The revision of the last full read: a watch from just after it
        // cannot be compacted away unless a compaction came in between.
        let mut read_at = None;
        loop {
            if self.stopped() {
                break;
            }
            if need_read {
                match self.full_read() {
                    Ok(()) => {
                        need_read = false;
                        read_at = Some(self.revision);
                    }
                    Err(e) => {
                        // A member that answered with an error (one cut off
                        // from its leader times the read out) would
                        // otherwise be asked again, and again.
                        if !matches!(e, EtcdError::Unreachable(_) | EtcdError::Unanswered(_)) {
                            self.client.move_on();
                        }
                        self.failed(e.to_string());
                        if !self.pause(&mut backoff) {
                            break;
                        }
                        continue;
                    }
                }
            }
            match self.follow() {
                Ended::Stopped => break,
                Ended::Compacted => {
                    need_read = true;
                    // Compacted again with nothing applied since the read: a
                    // member answering so every time gets the back-off, not
                    // a read and a watch as fast as the network goes.
                    if read_at == Some(self.revision) {
                        if !self.pause(&mut backoff) {
                            break;
                        }
                        continue;
                    }
                }
                Ended::Failed(e) => {
                    // A watch that was live fails over at once; back-off
                    // is for a feed that keeps failing.
                    if std::mem::take(&mut self.was_live) {
                        backoff = Duration::from_millis(100);
                    }
                    self.failed(e);
                    if !self.pause(&mut backoff) {
                        break;
                    }
                    self.health.reconnects.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            backoff = Duration::from_millis(100);
        }
        self.health.connected.store(false, Ordering::Release);
    }

    fn failed(&mut self, error: String) {
        self.health.connected.store(false, Ordering::Release);
        *crate::fork::lock(&self.health.last_error) = Some(error);
        // The first attempt failed: start with the local view.
        if let Some(r) = self.ready.take() {
            let _ = r.send(());
        }
    }

    /// Sleeps for the back-off (doubling it), watching the stop flag; false
    /// when stopped.
    fn pause(&mut self, backoff: &mut Duration) -> bool {
        let pause = *backoff;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        let (stop, cluster) = (self.stop.clone(), self.cluster.clone());
        (self.sleep)(pause, &|| stop.load(Ordering::Acquire) || cluster.strong_count() == 0)
    }

    fn full_read(&mut self) -> Result<(), EtcdError> {
        let (rev, kvs) = self.client.range_prefix(&self.prefix)?;
        let Some(inner) = self.cluster.upgrade() else { return Ok(()) };
        let cluster = Cluster { inner };
        let mut present = HashSet::with_capacity(kvs.len());
        // In revision order, as a watch brings them (etcd sorts a range by key).
        let mut kvs = kvs;
        kvs.sort_by_key(|kv| kv.mod_revision);
        for kv in &kvs {
            present.insert(kv.key.strip_prefix(&self.prefix).unwrap_or(&kv.key).to_string());
            self.apply(&cluster, kv);
        }
        // Deleted while this process was not watching, and compacted since.
        let gone: Vec<String> = self.known.iter().filter(|k| !present.contains(*k)).cloned().collect();
        for key in gone {
            let kv = KeyValue { key: format!("{}{key}", self.prefix), value: None, mod_revision: rev, lease: 0 };
            self.apply(&cluster, &kv);
        }
        self.apply_waiting(&cluster);
        self.revision = self.revision.max(rev);
        self.health.revision.store(self.revision, Ordering::Release);
        self.health.leader_revision.fetch_max(rev, Ordering::Relaxed);
        self.health.lag.store(0, Ordering::Relaxed);
        self.health.full_reads.fetch_add(1, Ordering::Relaxed);
        self.health.connected.store(true, Ordering::Release);
        if let Some(r) = self.ready.take() {
            let _ = r.send(());
        }
        Ok(())
    }

    /// Watches from the revision after the last applied one until the watch
    /// fails, is compacted away, or the subscription stops.
    fn follow(&mut self) -> Ended {
        let mut watch = match self.client.watch(&self.prefix, self.revision + 1) {
            Ok(w) => w,
            Err(e) => return Ended::Failed(e.to_string()),
        };
        let ended = self.follow_watch(&mut watch);
        if matches!(ended, Ended::Failed(_)) {
            // A member that still answers (with an error, or a watch that
            // brings nothing) would otherwise get the watch again: the
            // client keeps to the last member that answered.
            self.client.move_past(watch.endpoint());
        }
        ended
    }

    /// Applies what `watch` brings until it fails, is compacted away, or
    /// the subscription stops.
    fn follow_watch(&mut self, watch: &mut Watch) -> Ended {
        // When the watch last brought a record: only that shows it is not
        // stuck. Any message would not do: a member can keep sending
        // messages with no event (progress messages at a revision that
        // stands still) while records wait.
        let mut heard = Instant::now();
        // Lag seen by the previous check with no record brought since: the
        // watch is stuck (a member cut off from the leader keeps its
        // clients' streams open but silent).
        let mut lagging = false;
        loop {
            if self.stopped() {
                return Ended::Stopped;
            }
            match watch.next(POLL) {
                Ok(Some(batch)) => {
                    self.health.leader_revision.fetch_max(batch.header_revision, Ordering::Relaxed);
                    if batch.canceled {
                        if batch.compact_revision > 0 {
                            return Ended::Compacted;
                        }
                        return Ended::Failed(format!("{}: etcd cancelled the watch", watch.endpoint()));
                    }
                    if batch.created {
                        self.health.connected.store(true, Ordering::Release);
                        self.was_live = true;
                    }
                    if !batch.events.is_empty() {
                        let Some(inner) = self.cluster.upgrade() else { return Ended::Stopped };
                        let cluster = Cluster { inner };
                        for kv in &batch.events {
                            // A re-opened watch may repeat the revision it
                            // started from on some members: applied once.
                            if kv.mod_revision > self.revision {
                                self.apply(&cluster, kv);
                            }
                        }
                        self.apply_waiting(&cluster);
                        let last = batch.events.iter().map(|e| e.mod_revision).max().unwrap_or(0);
                        if last > self.revision {
                            self.revision = last;
                            heard = Instant::now();
                            lagging = false;
                        }
                        self.health.revision.store(self.revision, Ordering::Release);
                    }
                }
                Ok(None) => {}
                Err(e) => return Ended::Failed(e.to_string()),
            }
            if heard.elapsed() < self.timeout {
                continue;
            }
            heard = Instant::now();
            let present = self.known.iter().map(|k| format!("{}{k}", self.prefix));
            match self.client.count_newer(&self.prefix, self.revision, present) {
                Ok((newer, rev)) => {
                    self.health.connected.store(true, Ordering::Release);
                    self.health.leader_revision.fetch_max(rev, Ordering::Relaxed);
                    self.health.lag.store(newer, Ordering::Relaxed);
                    if newer > 0 && lagging {
                        return Ended::Failed(format!(
                            "{}: the watch is {newer} record(s) behind and brings none",
                            watch.endpoint()
                        ));
                    }
                    lagging = newer > 0;
                }
                Err(e) => return Ended::Failed(e.to_string()),
            }
        }
    }

    fn apply(&mut self, cluster: &Cluster, kv: &KeyValue) {
        let Some(key) = kv.key.strip_prefix(&self.prefix) else { return };
        // Every key, the tools' own too: the silence check counts deletions
        // against the number of keys under the prefix.
        match kv.value {
            Some(_) => self.known.insert(key.to_string()),
            None => self.known.remove(key),
        };
        // Reserved for the tools that write the feed (the monitors' election).
        if key.starts_with('_') {
            return;
        }
        // A newer record of the key replaces the one waiting for its node.
        self.waiting.remove(key);
        match cluster.apply_feed_record(kv.mod_revision, key, kv.value.as_deref()) {
            Ok(outcome) => self.counted(outcome),
            Err(e) if e.kind() == ErrorKind::UnknownNode => {
                // Refused for now (counted once), and applied if a record adds the node.
                self.refused(kv, &e);
                self.waiting.insert(key.to_string(), kv.clone());
            }
            Err(e) => self.refused(kv, &e),
        }
    }

    fn counted(&self, outcome: FeedOutcome) {
        match outcome {
            FeedOutcome::Applied => self.health.applied.fetch_add(1, Ordering::Relaxed),
            FeedOutcome::Stale => self.health.stale.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn refused(&self, kv: &KeyValue, e: &Error) {
        self.health.refused.fetch_add(1, Ordering::Relaxed);
        // The refusal repeats the record, which may be 256 KiB: every
        // metrics snapshot carries it.
        *crate::fork::lock(&self.health.last_refused) =
            Some(format!("revision {}: {}", kv.mod_revision, super::etcd::excerpt(&e.to_string())));
    }

    /// Applies again the records kept for a node not added yet, in revision
    /// order, pass after pass while a pass applies one.
    fn apply_waiting(&mut self, cluster: &Cluster) {
        while !self.waiting.is_empty() {
            let mut kept: Vec<(String, KeyValue)> = self.waiting.drain().collect();
            kept.sort_by_key(|(_, kv)| kv.mod_revision);
            let before = kept.len();
            for (key, kv) in kept {
                match cluster.apply_feed_record(kv.mod_revision, &key, kv.value.as_deref()) {
                    Ok(outcome) => self.counted(outcome),
                    Err(e) if e.kind() == ErrorKind::UnknownNode => {
                        self.waiting.insert(key, kv);
                    }
                    Err(e) => self.refused(&kv, &e),
                }
            }
            if self.waiting.len() == before {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::stand_in::{open_watch, respond, Gateway, Request};
    use std::io::Write;
    use std::net::TcpStream;

    /// A range answers an empty prefix at revision 5; the first `refused`
    /// watches answer HTTP 503 (a member that keeps failing), every later
    /// one is created and then ends (a live watch whose member goes away).
    fn gateway(refused: usize) -> String {
        let watch = move |s: &mut TcpStream, _: &Request, n: usize| {
            if n <= refused {
                respond(s, "503 Unavailable", r#"{"error":"unavailable","code":14}"#);
            } else if open_watch(s, 5) {
                let _ = s.write_all(b"0\r\n\r\n");
            }
        };
        Gateway::start(Arc::new(|_: &Request, _| r#"{"header":{"revision":"5"}}"#.to_string()), Arc::new(watch))
            .endpoint
    }

    #[test]
    fn a_live_watch_that_fails_fails_over_with_the_first_back_off() {
        let cluster = Cluster::from_config_text("nodes = A, B").unwrap();
        let endpoint = gateway(3);
        let pauses = Arc::new(Mutex::new(Vec::new()));
        let seen = pauses.clone();
        let worker = Worker {
            cluster: Arc::downgrade(&cluster.inner),
            client: EtcdClient::new(vec![endpoint], Duration::from_secs(5)),
            prefix: "t/".into(),
            timeout: Duration::from_secs(5),
            health: Arc::new(Health::default()),
            stop: Arc::new(AtomicBool::new(false)),
            revision: 0,
            known: HashSet::new(),
            waiting: HashMap::new(),
            ready: None,
            was_live: false,
            // Recorded, not slept; the subscriber stops at the fifth pause.
            sleep: Box::new(move |pause, _| {
                let mut p = seen.lock().unwrap();
                p.push(pause);
                p.len() < 5
            }),
        };
        worker.run();
        let ms: Vec<u128> = pauses.lock().unwrap().iter().map(Duration::as_millis).collect();
        // Three refused watches back off 0.1, 0.2, 0.4 s; the fourth watch
        // was live when it ended, so its failure starts again at 0.1 s
        // (then doubles, as the next watches are live again too).
        assert_eq!(ms, [100, 200, 400, 100, 100], "back-off pauses");
    }
}
