//! The feed subscriber against an etcd JSON gateway stand-in (no etcd): the
//! order a full read applies records in, and answers no etcd member gives
//! (oversized, trickling, impossible revisions, a stuck watch). Each test
//! failed before its fix (reviews of 2026-12-05), but the one that says it
//! is coverage.

#[path = "support/gateway.rs"]
mod gateway;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::{
    chunk, deletion, events, kv, member, range_of, raw_events, read_request, respond, silent, Gateway, Request,
};
use racaffinity::{Cluster, ErrorKind, NodeState};

fn subscribed(endpoint: &str) -> Cluster {
    subscribed_every(endpoint, "1s")
}

/// A cluster subscribed to `endpoint`'s prefix `p/` with the silence check
/// every `feed_timeout` (`300ms`, …).
fn subscribed_every(endpoint: &str, feed_timeout: &str) -> Cluster {
    Cluster::from_config_text(&format!(
        "nodes = A, B\ntopology.feed = etcd://{endpoint}/p\ntopology.feed_timeout = {feed_timeout}"
    ))
    .unwrap()
}

/// An empty prefix at revision 7: every range answers it, every watch is
/// created at 7 and then runs `then` (with how many watches were opened).
fn empty_at_7(then: impl Fn(&mut TcpStream, usize) + Send + Sync + 'static) -> Gateway {
    Gateway::fixed(r#"{"header":{"revision":"7"}}"#.to_string(), 7, then)
}

/// A record written once the first watch is open, which that watch never
/// brings: a range answers `before` at revision 5 until the first watch is
/// opened, `after` at 6 from then on; the first watch is created at 5 and
/// then runs `stuck` (silent, chattering, …); every later watch is created
/// at 6, brings `event` (a whole event, `{"kv":…}` or a [`deletion`]) and
/// stays silent. `starts` collects each watch's `start_revision`.
fn missed_write(
    before: &'static [(&'static str, &'static str, u64)],
    after: &'static [(&'static str, &'static str, u64)],
    stuck: fn(&mut TcpStream),
    event: String,
    starts: Arc<std::sync::Mutex<Vec<String>>>,
) -> Gateway {
    let written = Arc::new(AtomicBool::new(false));
    let seen = written.clone();
    let range = move |req: &Request, _| {
        if seen.load(Ordering::SeqCst) {
            range_of(req, 6, after)
        } else {
            range_of(req, 5, before)
        }
    };
    let watch = move |s: &mut TcpStream, req: &Request, n: usize| {
        let start = req.body["create_request"]["start_revision"].as_str().unwrap_or("").to_string();
        starts.lock().unwrap().push(start);
        if n == 1 {
            // The write happens once this watch is open; it never tells.
            written.store(true, Ordering::SeqCst);
            if gateway::open_watch(s, 5) {
                stuck(s);
            }
        } else if gateway::open_watch(s, 6) {
            let _ = s.write_all(&chunk(&raw_events(6, std::slice::from_ref(&event))));
            silent(s);
        }
    };
    Gateway::start(Arc::new(range), Arc::new(watch))
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(10), "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const FAN_DOWN_E: &str =
    "INSTANCE VERSION=1.0 service=orcl database=orcl instance=E host=hostE status=down reason=FAILURE";

/// The fleet's log: node E added at revision 5, then a FAN `down` about E at
/// revision 7. A process that watched both has E down. One that starts later
/// reads the prefix, which etcd returns sorted by key: `fan/instance-E`
/// before `node/E`. Before, that process refused the FAN record (no node E
/// yet) and kept E up: two processes at the same revision disagreed.
#[test]
fn a_full_read_ends_where_the_log_in_revision_order_ends() {
    let watcher = Cluster::from_config_text("nodes = A, B").unwrap();
    watcher.apply_feed_record(5, "node/E", Some("present")).unwrap();
    watcher.apply_feed_record(7, "fan/instance-E", Some(FAN_DOWN_E)).unwrap();
    assert_eq!(watcher.node_by_name("E").unwrap().state(), NodeState::Down);

    let body = format!(
        r#"{{"header":{{"revision":"7"}},"kvs":[{},{}],"count":"2"}}"#,
        kv("p/fan/instance-E", FAN_DOWN_E, 7),
        kv("p/node/E", "present", 5)
    );
    let gw = Gateway::fixed(body, 7, |s, _| silent(s));
    let late = subscribed(&gw.endpoint);
    wait_for("the first full read", || late.metrics().feed.is_some_and(|m| m.full_reads >= 1));
    let m = late.metrics().feed.unwrap();
    assert_eq!(late.node_by_name("E").unwrap().state(), NodeState::Down, "{m:?}");
    assert_eq!((m.refused, m.revision), (0, 7), "{m:?}");
}

/// A watch that brings a record about a node a later record adds: the
/// watcher keeps it and applies it once the node is there, as a full read of
/// the same log does.
#[test]
fn a_watched_record_about_a_node_not_yet_added_applies_once_it_is() {
    let body = r#"{"header":{"revision":"4"}}"#.to_string();
    let script = |s: &mut TcpStream, n: usize| {
        if n == 1 {
            let _ = s.write_all(&chunk(&events(5, &[kv("p/fan/instance-E", FAN_DOWN_E, 5)])));
            std::thread::sleep(Duration::from_millis(100));
            let _ = s.write_all(&chunk(&events(7, &[kv("p/node/E", "present", 7)])));
        }
        silent(s);
    };
    let gw = Gateway::fixed(body, 4, script);
    let c = subscribed(&gw.endpoint);
    wait_for("revision 7", || c.metrics().feed.is_some_and(|m| m.revision == 7));
    let full = Cluster::from_config_text("nodes = A, B").unwrap();
    full.apply_feed_record(7, "node/E", Some("present")).unwrap();
    full.apply_feed_record(5, "fan/instance-E", Some(FAN_DOWN_E)).unwrap();
    assert_eq!(c.node_by_name("E").unwrap().state(), full.node_by_name("E").unwrap().state());
    assert_eq!(c.node_by_name("E").unwrap().state(), NodeState::Down, "{:?}", c.metrics().feed);
}

/// A chunked answer is capped in total, as a sized one is (8 MiB: no etcd
/// answer of this feed is larger). Before, only each chunk was: a member
/// could hand the process as much memory as it liked within the deadline.
#[test]
fn a_chunked_answer_past_the_cap_is_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = l.local_addr().unwrap().to_string();
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    // Every request answered so: a page asked again for fewer keys too.
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let counted = counted.clone();
            std::thread::spawn(move || answer_64_mib(&mut s, &counted));
        }
    });
    fn answer_64_mib(s: &mut TcpStream, counted: &AtomicUsize) {
        read_request(s);
        let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        out.extend(chunk(r#"{"header":{"revision":"1"},"pad":""#));
        let _ = s.write_all(&out);
        let mut framed = format!("{:x}\r\n", 1 << 20).into_bytes();
        framed.extend(vec![b'x'; 1 << 20]);
        framed.extend_from_slice(b"\r\n");
        for _ in 0..64 {
            if s.write_all(&framed).is_err() {
                return;
            }
            counted.fetch_add(1, Ordering::SeqCst);
        }
        let _ = s.write_all(b"3\r\n\"}\n\r\n0\r\n\r\n");
    }
    let client = racaffinity::feed::etcd::EtcdClient::new(vec![ep], Duration::from_secs(30));
    let r = client.range_prefix("p/");
    assert!(r.is_err(), "a 64 MiB answer was read whole and accepted: {:?}", r.map(|(rev, kvs)| (rev, kvs.len())));
    let e = r.unwrap_err().to_string();
    assert!(e.contains("MiB") || e.contains("bytes"), "says why: {e}");
}

/// A watch that sends blank lines forever (never a message) no longer holds
/// the subscriber: it stops with its cluster. Before, `next` kept reading as
/// long as bytes came, and the thread outlived its cluster.
#[test]
fn a_trickling_watch_does_not_outlive_its_cluster() {
    let closed = Arc::new(AtomicBool::new(false));
    let seen = closed.clone();
    let script = move |s: &mut TcpStream, _| loop {
        std::thread::sleep(Duration::from_millis(50));
        if s.write_all(b"1\r\n\n\r\n").is_err() {
            seen.store(true, Ordering::SeqCst);
            return;
        }
    };
    let gw = empty_at_7(script);
    let c = subscribed(&gw.endpoint);
    wait_for("the watch", || c.metrics().feed.is_some_and(|m| m.connected));
    std::thread::sleep(Duration::from_millis(300));
    drop(c);
    wait_for("the trickling watch closed by the client", || closed.load(Ordering::SeqCst));
}

/// An event past its own message's revision (here u64::MAX) is no etcd
/// answer: the watch is dropped and opened again, and later records apply.
/// Before, the `+ 1` of the next watch overflowed (the thread died in a debug
/// build) or every later record was taken for old (release).
#[test]
fn an_event_past_its_header_revision_is_refused_and_the_feed_goes_on() {
    let script = |s: &mut TcpStream, n: usize| {
        let ev = if n == 1 {
            events(8, &[kv("p/node/A/state", "down", u64::MAX)])
        } else {
            events(8, &[kv("p/node/B/state", "down", 8)])
        };
        let _ = s.write_all(&chunk(&ev));
        silent(s);
    };
    let gw = empty_at_7(script);
    let c = subscribed(&gw.endpoint);
    wait_for("B down by the second watch", || c.node_by_name("B").unwrap().state() == NodeState::Down);
    let m = c.metrics().feed.unwrap();
    assert_eq!(c.node_by_name("A").unwrap().state(), NodeState::Up, "{m:?}");
    assert_eq!(m.revision, 8, "{m:?}");
    assert_eq!((m.reconnects, m.refused), (1, 0), "the first watch dropped, no record refused: {m:?}");
}

/// `publish_event` about an instance this cluster does not have refuses
/// before anything is written. Before, the record went to etcd (every
/// subscriber got it) and then the call failed with UnknownNode.
#[test]
fn publish_event_about_an_unknown_instance_writes_nothing() {
    let gw = empty_at_7(|s, _| silent(s));
    let c = subscribed(&gw.endpoint);
    let unknown = FAN_DOWN_E.replace("instance=E", "instance=Z");
    let e = c.publish_event(&unknown).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownNode, "{e}");
    let host = "NODE VERSION=1.0 host=nohost status=nodedown";
    assert_eq!(c.publish_event(host).unwrap_err().kind(), ErrorKind::UnknownNode);
    assert_eq!(gw.puts.load(Ordering::SeqCst), 0, "nothing written");
    // A known instance is written (the control).
    c.publish_event(&FAN_DOWN_E.replace("instance=E", "instance=A")).unwrap();
    assert_eq!(gw.puts.load(Ordering::SeqCst), 1);
}

/// A member that answers every watch "compacted" (no etcd member does so
/// right after a read at a newer revision) gets the back-off, not a full read
/// and a watch as fast as the network allows. Before, each such answer led
/// straight to the next full read.
#[test]
fn a_watch_compacted_again_at_once_backs_off() {
    let script = |s: &mut TcpStream, _| {
        let msg = "{\"result\":{\"header\":{\"revision\":\"7\"},\"canceled\":true,\"compact_revision\":\"7\"}}\n";
        let _ = s.write_all(&chunk(msg));
        let _ = s.write_all(b"0\r\n\r\n");
    };
    let gw = empty_at_7(script);
    let c = subscribed(&gw.endpoint);
    std::thread::sleep(Duration::from_millis(1500));
    let reads = gw.ranges.load(Ordering::SeqCst);
    drop(c);
    // Back-off 0.1, 0.2, 0.4, 0.8 s: at most 5 reads in 1.5 s.
    assert!((2..=5).contains(&reads), "full reads in 1.5 s: {reads}");
}

/// A watch left open but silent (its member cut off from the leader) while
/// the one record written since is a deletion: `node/B/state` (B down at
/// revision 4) deleted at 6, so B is up again. The silence check counted
/// the keys put after the applied revision, and a range holds no deletion:
/// it saw none missing (`lag: 0`), kept the stuck watch, and B stayed down
/// in this process for good.
#[test]
fn a_deletion_a_silent_watch_missed_is_found_by_the_silence_check() {
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gw = missed_write(
        &[("p/node/A/weight", "3", 3), ("p/node/B/state", "down", 4)],
        &[("p/node/A/weight", "3", 3)],
        silent,
        deletion("p/node/B/state", 6),
        starts.clone(),
    );
    let c = subscribed_every(&gw.endpoint, "300ms");
    assert_eq!(c.node_by_name("B").unwrap().state(), NodeState::Down, "the full read: {:?}", c.metrics().feed);
    let t = Instant::now();
    while c.node_by_name("B").unwrap().state() != NodeState::Up {
        assert!(t.elapsed() < Duration::from_secs(10), "B still down after 10 s: {:?}", c.metrics().feed);
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = c.metrics().feed.unwrap();
    assert_eq!((m.revision, m.reconnects), (6, 1), "{m:?}");
    assert_eq!(*starts.lock().unwrap(), ["6", "6"], "each watch from the revision after the applied one");
}

/// A full read holding a record past its own answer's revision (here the
/// largest revision etcd could have) is refused whole, as such a watch
/// event is: applied, its revision would outrun every later record's. The
/// subscriber reads again after its back-off and applies the next answer.
/// Coverage: it passed the first time (the guard was there, untested).
#[test]
fn a_full_read_with_a_record_past_its_revision_is_refused_whole() {
    let bad = format!(
        r#"{{"header":{{"revision":"7"}},"kvs":[{},{}]}}"#,
        kv("p/node/A/state", "down", i64::MAX as u64),
        kv("p/node/B/weight", "5", 6)
    );
    let good = format!(r#"{{"header":{{"revision":"8"}},"kvs":[{}]}}"#, kv("p/node/B/state", "down", 8));
    let range = move |_: &Request, n: usize| if n == 1 { bad.clone() } else { good.clone() };
    let gw = Gateway::start(Arc::new(range), Arc::new(|s: &mut TcpStream, _: &Request, _| silent(s)));

    let client = racaffinity::feed::etcd::EtcdClient::new(vec![gw.endpoint.clone()], Duration::from_secs(5));
    let e = client.range_prefix("p/").unwrap_err().to_string();
    assert!(e.contains("past the answer's revision 7"), "{e}");
    gw.ranges.store(0, Ordering::SeqCst);

    let c = subscribed(&gw.endpoint);
    wait_for("B down by the second read", || c.node_by_name("B").unwrap().state() == NodeState::Down);
    let m = c.metrics().feed.unwrap();
    assert_eq!(c.node_by_name("A").unwrap().state(), NodeState::Up, "{m:?}");
    assert_eq!(c.node_by_name("B").unwrap().weight(), 1, "nothing of the refused answer applied: {m:?}");
    assert_eq!((m.revision, m.full_reads, m.applied), (8, 1, 1), "{m:?}");
}

/// An error answer (read whole: 8 MiB at most, as any answer) whose
/// message is megabytes long: the error, which an operator call returns
/// and the subscriber keeps as `last_error` in the metrics, says its code
/// and the start of the message.
#[test]
fn a_megabyte_error_message_is_cut_short() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        read_request(&mut s);
        let words = "etcdserver: ".to_string() + &"x".repeat(2 << 20);
        respond(&mut s, "500 Internal Server Error", &format!(r#"{{"error":"{words}","code":2,"message":"{words}"}}"#));
    });
    let client = racaffinity::feed::etcd::EtcdClient::new(vec![ep], Duration::from_secs(30));
    let e = client.range_prefix("p/").unwrap_err().to_string();
    assert!(e.starts_with("etcd refused the call (code 2): etcdserver: xxx"), "{}", &e[..e.len().min(200)]);
    assert!(e.len() <= 2048, "an error of {} bytes", e.len());
}

/// The same for an answer that is not etcd's, echoed in the error: a
/// revision of two megabytes of digits.
#[test]
fn a_megabyte_bad_field_is_cut_short_in_the_error() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        read_request(&mut s);
        respond(&mut s, "200 OK", &format!(r#"{{"header":{{"revision":"{}"}}}}"#, "9".repeat(2 << 20)));
    });
    let client = racaffinity::feed::etcd::EtcdClient::new(vec![ep], Duration::from_secs(30));
    let e = client.range_prefix("p/").unwrap_err().to_string();
    assert!(e.starts_with("unexpected answer from etcd: bad integer `999"), "{}", &e[..e.len().min(200)]);
    assert!(e.len() <= 2048, "an error of {} bytes", e.len());
}

/// A refused record's value is repeated in the refusal; the subscriber
/// keeps the last one as `last_refused` in every metrics snapshot, so it
/// keeps its start only (a value may be 256 KiB).
#[test]
fn a_long_refused_record_is_cut_short_in_the_metrics() {
    let body =
        format!(r#"{{"header":{{"revision":"7"}},"kvs":[{}]}}"#, kv("p/node/A/state", &"x".repeat(200 << 10), 7));
    let gw = Gateway::fixed(body, 7, |s, _| silent(s));
    let c = subscribed(&gw.endpoint);
    wait_for("the first full read", || c.metrics().feed.is_some_and(|m| m.full_reads >= 1));
    let m = c.metrics().feed.unwrap();
    let why = m.last_refused.unwrap_or_default();
    assert!(why.starts_with("revision 7: "), "{}", &why[..why.len().min(200)]);
    assert!(why.len() <= 2048, "a refusal of {} bytes", why.len());
    assert_eq!(m.refused, 1);
}

/// A watch that keeps sending messages with no event (an empty progress
/// message every 100 ms, its revision standing still) while a record is
/// waiting: `node/B/state` put at 6 after the watch opened. Its messages
/// are no proof it is up to date, so the silence check still runs every
/// `topology.feed_timeout` and the watch is re-opened.
#[test]
fn a_watch_chattering_without_events_is_checked_all_the_same() {
    let chatter = |s: &mut TcpStream| {
        let progress = "{\"result\":{\"header\":{\"revision\":\"5\"}}}\n";
        while s.write_all(&chunk(progress)).is_ok() {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let written = &[("p/node/B/state", "down", 6)];
    let event = format!(r#"{{"kv":{}}}"#, kv("p/node/B/state", "down", 6));
    let gw = missed_write(&[], written, chatter, event, Arc::default());
    let c = subscribed_every(&gw.endpoint, "300ms");
    let t = Instant::now();
    while c.node_by_name("B").unwrap().state() != NodeState::Down {
        assert!(t.elapsed() < Duration::from_secs(10), "B still up after 10 s: {:?}", c.metrics().feed);
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = c.metrics().feed.unwrap();
    assert_eq!((m.revision, m.reconnects), (6, 1), "{m:?}");
}

/// A prefix of 2,000 records and a quiet, healthy watch: the silence check
/// that runs every `topology.feed_timeout` asks only for what changed after
/// the applied revision (`min_mod_revision`, keys only) and reads the
/// prefix's size from the answer's `count`, so its answer is a few dozen
/// bytes whatever the prefix holds. Before, each check read every key of
/// the prefix (keys only): 2,000 keys, about 100 KB, every quiet period.
#[test]
fn the_silence_check_reads_only_what_changed() {
    let names: Vec<String> = (0..2000).map(|i| format!("p/fan/instance-{i:04}")).collect();
    let store: Vec<(String, u64)> = names.iter().enumerate().map(|(i, k)| (k.clone(), 3 + i as u64 % 3)).collect();
    let range = move |req: &Request, _| {
        let held: Vec<(&str, &str, u64)> = store.iter().map(|(k, r)| (k.as_str(), "x", *r)).collect();
        range_of(req, 5, &held)
    };
    let watch = |s: &mut TcpStream, _: &Request, _| {
        if gateway::open_watch(s, 5) {
            silent(s);
        }
    };
    let gw = Gateway::start(Arc::new(range), Arc::new(watch));
    let c = subscribed_every(&gw.endpoint, "200ms");
    wait_for("the full read and two silence checks", || gw.ranges.load(Ordering::SeqCst) >= 3);
    let log = gw.range_log.lock().unwrap().clone();
    drop(c);
    let m = (log[0].1, log.len());
    assert!(log[0].1 > 50_000, "the full read holds every record: {m:?}");
    for (req, size) in &log[1..] {
        assert!(*size < 200, "a silence check answered {size} bytes (asked {})", req.body);
        assert_eq!(req.body["min_mod_revision"].as_str(), Some("6"), "only records after revision 5: {}", req.body);
    }
}

/// The check's count of deletions counts every key under the prefix,
/// the tools' own (`_monitor/leader`) too: a deletion the silent watch
/// missed while the monitors' key stays is found all the same.
#[test]
fn a_missed_deletion_is_found_next_to_the_tools_own_key() {
    let gw = missed_write(
        &[("p/_monitor/leader", "m1", 2), ("p/node/A/weight", "3", 3), ("p/node/B/state", "down", 4)],
        &[("p/_monitor/leader", "m1", 2), ("p/node/A/weight", "3", 3)],
        silent,
        deletion("p/node/B/state", 6),
        Arc::default(),
    );
    let c = subscribed_every(&gw.endpoint, "300ms");
    assert_eq!(c.node_by_name("B").unwrap().state(), NodeState::Down, "the full read: {:?}", c.metrics().feed);
    wait_for("B up again", || c.node_by_name("B").unwrap().state() == NodeState::Up);
    let m = c.metrics().feed.unwrap();
    assert_eq!((m.revision, m.reconnects), (6, 1), "{m:?}");
}

/// `lease_keepalive` against a member that sends the answer's header at
/// 0.8 s and its one message at 1.6 s, with a 1 s timeout: the call fails
/// at its timeout. Before, opening the stream and waiting for the message
/// each had the whole timeout, so the call took 1.6 s and succeeded (up to
/// twice the timeout: a monitor's lease could run out meanwhile).
#[test]
fn a_keepalive_is_bounded_by_its_timeout_as_a_whole() {
    let keepalive = |s: &mut TcpStream, req: &Request, n: usize| {
        assert_eq!(req.path, "/v3/lease/keepalive");
        // The second call (the control) is answered at once.
        let pause = Duration::from_millis(if n == 1 { 800 } else { 0 });
        std::thread::sleep(pause);
        if s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").is_err() {
            return;
        }
        std::thread::sleep(pause);
        let _ = s.write_all(&chunk("{\"result\":{\"header\":{\"revision\":\"5\"},\"ID\":\"7\",\"TTL\":\"5\"}}\n"));
        silent(s);
    };
    let gw = Gateway::start_with(
        Arc::new(|_: &Request, _| r#"{"header":{"revision":"5"}}"#.to_string()),
        Arc::new(|s: &mut TcpStream, _: &Request, _| silent(s)),
        Arc::new(keepalive),
    );
    let client = racaffinity::feed::etcd::EtcdClient::new(vec![gw.endpoint.clone()], Duration::from_secs(1));
    let t = Instant::now();
    let r = client.lease_keepalive(7);
    let took = t.elapsed();
    assert!(r.is_err(), "answered {r:?} after {took:?}, past the 1 s timeout");
    assert!(took < Duration::from_millis(1400), "failed after {took:?}: {r:?}");
    assert_eq!(client.lease_keepalive(7).unwrap(), 5, "a member answering in time renews");
}

/// Two members. The first is cut off from its leader: its watch is created
/// and stays silent, and the linearizable count the silence check asks of
/// it answers etcd's own "request timed out" (HTTP 503, code 14: what a
/// member without a leader answers after its request timeout, 7 s by
/// default, when `topology.feed_timeout` is longer). The second has the
/// record written meanwhile, `node/A/state = down` at revision 6. The
/// stuck watch is to be "re-opened elsewhere" (docs/operations.md,
/// "Topology feed"): before, every reconnection opened it on the first
/// member again, since an answer, even an error, kept the client on it.
#[test]
fn a_watch_found_stuck_is_reopened_on_the_next_member() {
    let first_watches = Arc::new(AtomicUsize::new(0));
    let counted = first_watches.clone();
    let first_ep = member(move |s, req| match req.path.as_str() {
        "/v3/kv/range" if req.body.get("min_mod_revision").is_some() => {
            respond(s, "503 Service Unavailable", REQUEST_TIMED_OUT);
        }
        "/v3/kv/range" => {
            respond(s, "200 OK", r#"{"header":{"revision":"5"}}"#);
        }
        "/v3/watch" => {
            counted.fetch_add(1, Ordering::SeqCst);
            if gateway::open_watch(s, 5) {
                silent(s);
            }
        }
        _ => {
            respond(s, "404 Not Found", "");
        }
    });
    let second = a_down_at_6(true);
    a_goes_down_through_the_second_member(&first_ep, &second, || {
        format!(
            "{} watch(es) opened on the first member, {} on the second",
            first_watches.load(Ordering::SeqCst),
            second.watches.load(Ordering::SeqCst)
        )
    });
}

/// The same at the start: the first member answers every range with etcd's
/// "request timed out" (a member cut off from its leader, as above), the
/// second has `node/A/state = down` at revision 6. Before, every full read
/// went to the first member again, so the subscriber never read the
/// prefix: it kept retrying the member that answered, not the others.
#[test]
fn a_full_read_refused_by_one_member_is_read_from_the_next() {
    let first_ranges = Arc::new(AtomicUsize::new(0));
    let counted = first_ranges.clone();
    let first_ep = member(move |s, req| {
        if req.path == "/v3/kv/range" {
            counted.fetch_add(1, Ordering::SeqCst);
            respond(s, "503 Service Unavailable", REQUEST_TIMED_OUT);
        } else {
            respond(s, "404 Not Found", "");
        }
    });
    let second = a_down_at_6(false);
    a_goes_down_through_the_second_member(&first_ep, &second, || {
        format!(
            "{} range(s) asked of the first member, {} of the second",
            first_ranges.load(Ordering::SeqCst),
            second.ranges.load(Ordering::SeqCst)
        )
    });
}

/// etcd's answer from a member cut off from its leader (HTTP 503, code 14).
const REQUEST_TIMED_OUT: &str =
    r#"{"error":"etcdserver: request timed out","code":14,"message":"etcdserver: request timed out"}"#;

/// A member with `node/A/state = down` at revision 6: each range answers
/// it, each watch is created at 6, brings the record if `watch_brings_it`,
/// and stays silent.
fn a_down_at_6(watch_brings_it: bool) -> Gateway {
    Gateway::start(
        Arc::new(|req: &Request, _| range_of(req, 6, &[("p/node/A/state", "down", 6)])),
        Arc::new(move |s: &mut TcpStream, _: &Request, _| {
            if gateway::open_watch(s, 6) {
                if watch_brings_it {
                    let _ = s.write_all(&chunk(&events(6, &[kv("p/node/A/state", "down", 6)])));
                }
                silent(s);
            }
        }),
    )
}

/// A cluster on the members `first` and `second`, in that order, with the
/// silence check every 300 ms: `node/A/state = down` at revision 6, which
/// only `second` has, takes A down within 10 s (else the failure says
/// `counts`, what each member was asked) and the feed to revision 6.
fn a_goes_down_through_the_second_member(first: &str, second: &Gateway, counts: impl Fn() -> String) {
    let c = Cluster::from_config_text(&format!(
        "nodes = A, B\ntopology.feed = etcd://{first},{}/p\ntopology.feed_timeout = 300ms",
        second.endpoint
    ))
    .unwrap();
    let t = Instant::now();
    while c.node_by_name("A").unwrap().state() != NodeState::Down {
        assert!(t.elapsed() < Duration::from_secs(10), "A still up after 10 s; {}: {:?}", counts(), c.metrics().feed);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.metrics().feed.unwrap().revision, 6);
}

/// An operator call's write that a member answered 200 with a body that is
/// no etcd answer (a proxy's page, an answer cut by a load balancer), or
/// with one whose revision cannot be read: the member took the write and
/// may well have committed it, so the FEED_UNAVAILABLE message says so, as
/// for a write it took and never answered. Before, it said only
/// "unexpected answer from etcd", under "did not take the change".
#[test]
fn a_write_answered_200_unreadably_may_have_been_carried_out() {
    for answer in ["<html><body>OK</body></html>", r#"{"header":{"revision":"nine"},"succeeded":true}"#] {
        let writes = Arc::new(AtomicUsize::new(0));
        let counted = writes.clone();
        let ep = member(move |s, req| match req.path.as_str() {
            "/v3/kv/range" => {
                respond(s, "200 OK", &range_of(req, 7, &[]));
            }
            "/v3/watch" => {
                if gateway::open_watch(s, 7) {
                    silent(s);
                }
            }
            _ => {
                counted.fetch_add(1, Ordering::SeqCst);
                respond(s, "200 OK", answer);
            }
        });
        let c = subscribed(&ep);
        let node_record = c.set_node_state("B", NodeState::Down).unwrap_err();
        let fan_record = c.publish_event(&FAN_DOWN_E.replace("instance=E", "instance=A")).unwrap_err();
        for e in [node_record, fan_record] {
            assert_eq!(e.kind(), ErrorKind::FeedUnavailable, "{e}");
            assert!(e.to_string().contains("may have been carried out"), "{answer}: {e}");
        }
        assert_eq!(writes.load(Ordering::SeqCst), 2, "each write sent once");
        assert_eq!(c.node_by_name("B").unwrap().state(), NodeState::Up, "not applied here without its revision");
    }
}

/// Records whose answer together passes the 8 MiB cap of one answer: six
/// junk values of 2 MiB under the prefix (each refused, over 256 KiB) and
/// `node/A/state = down`. A member answers a range's `limit` and `more`, and
/// goes on from `key` as etcd does. The full read is taken in pages, made
/// smaller while a page's answer is over the cap: A goes down and the feed
/// connects. Before, the whole prefix was asked in one answer, refused as
/// too large on every try: no process could ever read the feed (checked on
/// a real etcd with seven 1000 KiB values: connected false, "chunk too
/// large", A up).
#[test]
fn a_prefix_past_one_answers_cap_is_read_in_pages() {
    let junk = "j".repeat(2 << 20);
    let mut store: Vec<(String, String)> = (0..6).map(|i| (format!("p/fan/junk-{i}"), junk.clone())).collect();
    store.push(("p/node/A/state".to_string(), "down".to_string()));
    store.sort();
    // Where a page starts: the prefix, or just past a key (key + NUL).
    let mut starts = std::collections::HashMap::new();
    starts.insert(gateway::b64(b"p/"), 0usize);
    for (i, (k, _)) in store.iter().enumerate() {
        starts.insert(gateway::b64(format!("{k}\0").as_bytes()), i + 1);
    }
    // Encoded once: the stand-in's base64 is slow in a debug build.
    let encoded: Vec<String> = store.iter().map(|(k, v)| kv(k, v, 3)).collect();
    let limits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = limits.clone();
    let range = move |req: &Request, _| {
        let from = starts[req.body["key"].as_str().unwrap()];
        let limit: usize = req.body.get("limit").and_then(|l| l.as_str()).map_or(0, |l| l.parse().unwrap());
        seen.lock().unwrap().push(limit);
        let n = if limit == 0 { store.len() - from } else { limit.min(store.len() - from) };
        let page = &encoded[from..from + n];
        let more = from + n < store.len();
        format!(r#"{{"header":{{"revision":"5"}},"kvs":[{}],"count":"{}","more":{more}}}"#, page.join(","), store.len())
    };
    let gw = Gateway::start(
        Arc::new(range),
        Arc::new(|s: &mut TcpStream, _: &Request, _| {
            if gateway::open_watch(s, 5) {
                silent(s);
            }
        }),
    );
    let c = subscribed(&gw.endpoint);
    wait_for("A down through the feed", || c.node_by_name("A").unwrap().state() == NodeState::Down);
    let f = c.metrics().feed.unwrap();
    assert!(f.connected && f.revision == 5 && f.refused == 6, "{f:?}");
    let limits = limits.lock().unwrap();
    assert!(limits.iter().all(|&l| l > 0), "every page is bounded: {limits:?}");
}
