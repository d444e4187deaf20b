//! The topology feed's subscriber against a real 3-member etcd cluster
//! (tests/cluster/etcdnodes, etcd 3.7.3): records reach a cluster in revision
//! order, a subscriber that was away resumes from its revision (or reads
//! everything again when that revision was compacted away), bad records are
//! refused and counted, and an unreachable etcd leaves the local view.
//!
//! One etcd cluster serves the whole file (one test, scenarios in turn, each
//! under its own key prefix), on its own ports and data root; it is
//! destroyed at the end, pass or fail.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/etcd.rs"]
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use racaffinity::{Cluster, ErrorKind, FeedMetrics, NodeSpec, NodeState};
use support::Etcd;

const BASE_PORT: u16 = 24890;

fn feed(c: &Cluster) -> FeedMetrics {
    c.metrics().feed.expect("a subscribed cluster reports its feed")
}

/// Polls `what` until it holds; the feed is asynchronous by nature.
fn eventually(what: &str, c: &Cluster, mut ok: impl FnMut(&Cluster) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok(c) {
        assert!(Instant::now() < deadline, "{what}: not within 30 s; feed: {:?}", feed(c));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn state(c: &Cluster, node: &str) -> NodeState {
    c.node_by_name(node).unwrap().state()
}

fn config(url: &str) -> String {
    format!("nodes = A, B, C\ntopology.feed = {url}\ntopology.feed_timeout = 1s")
}

#[test]
fn the_subscriber_over_a_real_etcd_cluster() {
    let etcd = Etcd::start(BASE_PORT, "rust-feed");
    records_in_revision_order(&etcd);
    bad_records_are_refused_and_counted(&etcd);
    an_unreachable_feed_leaves_the_local_view();
    a_quiet_watch_is_left_alone(&etcd);
    the_silence_check_counts_deletions(&etcd);
    operator_calls_reach_the_whole_fleet(&etcd);
    a_record_is_written_only_while_its_node_is_a_member(&etcd);
    an_addition_racing_another_process_s_is_a_duplicate(&etcd);
    a_configured_node_removed_stays_removed_fleet_wide(&etcd);
    a_subscriber_away_resumes_or_reads_everything_again(&etcd);
    the_leader_killed_mid_stream_loses_nothing(&etcd);
    a_dated_drain_record_ends_when_its_writer_said(&etcd);
}

fn records_in_revision_order(etcd: &Etcd) {
    let kv = etcd.client();
    // Written before the process starts: the first full read has them
    // before the cluster is handed out.
    kv.put("t1/node/A/state", "down", 0).unwrap();
    let c = Cluster::from_config_text(&config(&etcd.url("t1"))).unwrap();
    assert_eq!(state(&c, "A"), NodeState::Down, "the first full read happens before the cluster is returned");
    let f = feed(&c);
    assert!(f.connected && f.full_reads == 1 && f.applied == 1, "{f:?}");

    kv.put("t1/node/B/state", "draining timeout=30s", 0).unwrap();
    kv.put("t1/node/B/weight", "7", 0).unwrap();
    kv.put("t1/node/A/state", "up", 0).unwrap();
    // Later revisions win whatever the values: down after up stays down.
    kv.put("t1/node/C/state", "up", 0).unwrap();
    let last = kv.put("t1/node/C/state", "down", 0).unwrap();
    eventually("every record applied", &c, |c| feed(c).revision >= last);
    assert_eq!(state(&c, "A"), NodeState::Up);
    assert_eq!(state(&c, "B"), NodeState::Draining);
    assert_eq!(c.node_by_name("B").unwrap().weight(), 7);
    assert_eq!(state(&c, "C"), NodeState::Down);
    let f = feed(&c);
    assert_eq!((f.applied + f.stale, f.refused), (6, 0), "each record applied once: {f:?}");

    let (rev, _) = kv.delete("t1/node/C/state").unwrap();
    kv.delete("t1/node/B/weight").unwrap();
    eventually("the deletions applied", &c, |c| feed(c).revision > rev);
    assert_eq!(state(&c, "C"), NodeState::Up, "a deleted state is up");
    assert_eq!(c.node_by_name("B").unwrap().weight(), 1, "a deleted weight is the configured one");

    let text = c.metrics().to_prometheus();
    assert!(text.contains("racaffinity_feed_connected{cluster=\"default\"} 1"), "{text}");
    assert!(c.metrics().to_json().contains(r#""feed":{"url":"etcd://"#));
    c.close();
}

fn bad_records_are_refused_and_counted(etcd: &Etcd) {
    let kv = etcd.client();
    let c = Cluster::from_config_text(&config(&etcd.url("t2"))).unwrap();
    let before = c.topology_fingerprint();
    kv.put("t2/_monitor/leader", "m1", 0).unwrap();
    kv.put("t2/node/A/state", "sideways", 0).unwrap();
    kv.put("t2/node/ZZ/state", "down", 0).unwrap();
    let last = kv.put("t2/something/else", "x", 0).unwrap();
    eventually("the bad records seen", &c, |c| feed(c).revision >= last);
    let f = feed(&c);
    assert_eq!((f.refused, f.applied, f.stale), (3, 0, 0), "the tools' `_` keys are not records: {f:?}");
    assert!(f.last_refused.as_deref().unwrap_or("").contains("something/else"), "{f:?}");
    assert_eq!(c.topology_fingerprint(), before, "a refused record changes nothing");
    assert_eq!(state(&c, "A"), NodeState::Up);
}

fn an_unreachable_feed_leaves_the_local_view() {
    let started = Instant::now();
    let c = Cluster::from_config_text(&config("etcd://127.0.0.1:1/t3")).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "start waits at most about topology.feed_timeout");
    let f = feed(&c);
    assert!(!f.connected, "{f:?}");
    assert!(f.last_error.as_deref().unwrap_or("").contains("127.0.0.1:1"), "{f:?}");
    assert!(c.pick().is_ok(), "the local view routes");
    // An operator's change that only this process would get is refused.
    let e = c.set_node_state("B", NodeState::Down).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FeedUnavailable, "{e}");
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    assert_eq!(state(&c, "B"), NodeState::Up, "nothing changed");
    assert_eq!(c.set_node_weight("B", 3).unwrap_err().kind(), ErrorKind::FeedUnavailable);
    assert_eq!(c.node_by_name("B").unwrap().weight(), 1);
    assert_eq!(c.add_node(NodeSpec::new("D")).unwrap_err().kind(), ErrorKind::FeedUnavailable);
    assert_eq!(c.remove_node("C").unwrap_err().kind(), ErrorKind::FeedUnavailable);
    assert!(c.node_by_name("C").is_ok() && c.node_by_name("D").is_err());
}

fn a_quiet_watch_is_left_alone(etcd: &Etcd) {
    // Records under the prefix, then silence for several liveness checks
    // (topology.feed_timeout = 1s): a healthy watch is neither re-opened
    // nor reported lagging, and the next record arrives at once.
    let kv = etcd.client();
    for n in ["A", "B", "C"] {
        kv.put(&format!("t7/node/{n}/weight"), "2", 0).unwrap();
    }
    let c = Cluster::from_config_text(&config(&etcd.url("t7"))).unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    let f = feed(&c);
    assert_eq!((f.reconnects, f.lag, f.connected), (0, 0, true), "a quiet, healthy watch: {f:?}");
    let rev = kv.put("t7/node/A/state", "down", 0).unwrap();
    let t = Instant::now();
    eventually("the record after the silence", &c, |c| feed(c).revision >= rev);
    assert!(t.elapsed() < Duration::from_secs(1), "applied {:?} after the put", t.elapsed());
}

fn the_silence_check_counts_deletions(etcd: &Etcd) {
    // The check's count against etcd's own keys-only answer: a deletion is
    // in no range answer, so it shows as a key the reader holds that is gone.
    let kv = etcd.client();
    kv.put("t8/node/A/weight", "2", 0).unwrap();
    let read_at = kv.put("t8/node/B/state", "down", 0).unwrap();
    let held = ["t8/node/A/weight", "t8/node/B/state"];
    assert_eq!(kv.count_newer("t8/", read_at, held).unwrap(), (0, read_at), "nothing since");
    let (deleted_at, _) = kv.delete("t8/node/B/state").unwrap();
    assert_eq!(kv.count_newer("t8/", read_at, held).unwrap(), (1, deleted_at), "the deletion alone");
    let last = kv.put("t8/node/C/state", "down", 0).unwrap();
    kv.put("t8/_monitor/leader", "m1", 0).unwrap();
    let (n, rev) = kv.count_newer("t8/", read_at, held).unwrap();
    assert_eq!((n, rev > last), (3, true), "the deletion and two puts");
    let now = ["t8/node/A/weight", "t8/node/C/state", "t8/_monitor/leader"];
    assert_eq!(kv.count_newer("t8/", rev, now).unwrap(), (0, rev), "a reader up to date");
    // The lag is in records (keys), as the docs say: one transaction writing
    // three records counts three, and a record written twice counts once
    // (a prefix of its own: later scenarios read t8/).
    let read_at = kv.put("t8lag/node/A/weight", "2", 0).unwrap();
    let three = [("t8lag/node/A/weight", "3"), ("t8lag/node/B/weight", "3"), ("t8lag/node/C/weight", "3")];
    let txn_at = txn_put(&etcd.endpoints[0], &three);
    let held = ["t8lag/node/A/weight"];
    assert_eq!(kv.count_newer("t8lag/", read_at, held).unwrap(), (3, txn_at), "one transaction, three records");
    kv.put("t8lag/node/B/state", "down", 0).unwrap();
    let last = kv.put("t8lag/node/B/state", "draining", 0).unwrap();
    let held = ["t8lag/node/A/weight", "t8lag/node/B/weight", "t8lag/node/C/weight"];
    assert_eq!(kv.count_newer("t8lag/", txn_at, held).unwrap(), (1, last), "one record written twice");
}

/// Puts `pairs` in one etcd transaction (the gateway's `/v3/kv/txn`); its
/// revision.
fn txn_put(endpoint: &str, pairs: &[(&str, &str)]) -> u64 {
    use std::io::{Read, Write};
    let ops: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            format!(
                r#"{{"request_put":{{"key":"{}","value":"{}"}}}}"#,
                gateway::b64(k.as_bytes()),
                gateway::b64(v.as_bytes())
            )
        })
        .collect();
    let body = format!(r#"{{"success":[{}]}}"#, ops.join(","));
    let mut s = std::net::TcpStream::connect(endpoint).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /v3/kv/txn HTTP/1.1\r\nHost: {endpoint}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let json = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(v["succeeded"], serde_json::Value::Bool(true), "{answer}");
    v["header"]["revision"].as_str().unwrap().parse().unwrap()
}

fn operator_calls_reach_the_whole_fleet(etcd: &Etcd) {
    // Two processes of one fleet.
    let here = Cluster::from_config_text(&config(&etcd.url("t6"))).unwrap();
    let there = Cluster::from_config_text(&config(&etcd.url("t6"))).unwrap();
    assert_eq!(here.set_node_state("B", NodeState::Draining).unwrap(), NodeState::Up);
    assert_eq!(state(&here, "B"), NodeState::Draining, "the caller reads its own write at once");
    assert_eq!(here.node_by_name("B").unwrap().shared_state(), NodeState::Draining, "as a shared input");
    eventually("the drain elsewhere", &there, |c| state(c, "B") == NodeState::Draining);
    here.set_node_weight("C", 9).unwrap();
    eventually("the weight elsewhere", &there, |c| c.node_by_name("C").unwrap().weight() == 9);
    let d = here.add_node(NodeSpec::new("D").weight(2)).unwrap();
    assert_eq!(here.node_name(d).as_deref(), Some("D"));
    eventually("the new node elsewhere", &there, |c| c.node_by_name("D").is_ok_and(|n| n.weight() == 2));
    assert_eq!(here.add_node(NodeSpec::new("D")).unwrap_err().kind(), ErrorKind::DuplicateNode);
    here.remove_node("D").unwrap();
    assert!(here.node_by_name("D").is_err());
    eventually("the removal elsewhere", &there, |c| c.node_by_name("D").is_err());
    assert_eq!(here.set_node_state("ZZ", NodeState::Down).unwrap_err().kind(), ErrorKind::UnknownNode);
    there.set_node_state("B", NodeState::Up).unwrap();
    eventually("the undrain here", &here, |c| state(c, "B") == NodeState::Up);
    assert_eq!(here.topology_fingerprint(), there.topology_fingerprint(), "one view");
}

fn a_record_is_written_only_while_its_node_is_a_member(etcd: &Etcd) {
    let kv = etcd.client();
    let here = Cluster::from_config_text(&config(&etcd.url("t8"))).unwrap();
    let there = Cluster::from_config_text(&config(&etcd.url("t8"))).unwrap();
    // The window between an operator call's check and its write, held
    // open: this process has D from a membership record at `rev` that the
    // fleet has removed since (etcd no longer has `node/D`), and has not
    // applied the removal yet.
    let rev = etcd.revision();
    assert!(here.add_node_at(NodeSpec::new("D"), rev).unwrap());
    let before = etcd.revision();
    let e = here.set_node_state("D", NodeState::Down).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownNode, "{e}");
    assert!(e.to_string().contains("topology feed"), "says where the node went: {e}");
    assert_eq!(here.set_node_weight("D", 3).unwrap_err().kind(), ErrorKind::UnknownNode);
    assert_eq!(etcd.revision(), before, "nothing written that every subscriber would refuse");
    assert_eq!(state(&here, "D"), NodeState::Up, "nothing changed here either");
    assert_eq!(feed(&there).refused, 0);

    // A member whose record moved on since this process read it (re-put,
    // its weight changed) is still a member: the call goes through.
    let added = kv.put("t8/node/E", "present weight=2", 0).unwrap();
    eventually("E here", &here, |c| feed(c).revision >= added);
    kv.put("t8/node/E", "present weight=4", 0).unwrap();
    let rev = here.set_node_state("E", NodeState::Draining).map(|_| etcd.revision()).unwrap();
    assert_eq!(state(&here, "E"), NodeState::Draining);
    eventually("the drain of E elsewhere", &there, |c| feed(c).revision >= rev);
    assert_eq!(state(&there, "E"), NodeState::Draining);

    // Added elsewhere meanwhile: a duplicate, the other's record kept.
    kv.put("t8/node/F", "present weight=5", 0).unwrap();
    let e = here.add_node(NodeSpec::new("F").weight(9)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DuplicateNode, "{e}");
    let (_, kvs) = kv.range_prefix("t8/node/F").unwrap();
    assert_eq!(kvs[0].value.as_deref(), Some("present weight=5"));
    assert_eq!((feed(&here).refused, feed(&there).refused), (0, 0));
}

fn an_addition_racing_another_process_s_is_a_duplicate(etcd: &Etcd) {
    // Another process adds a node and this one adds the same name while the
    // other's record is on its way here: whatever this process has applied
    // by then, its addition must be refused as a duplicate and the other's
    // record kept. The delay after the other's write sweeps the moment the
    // record arrives across this call's check and its write (a CI run once
    // overwrote the record: the watch applied it between the two).
    let kv = etcd.client();
    let here = Cluster::from_config_text(&config(&etcd.url("t10"))).unwrap();
    let mut overwritten = Vec::new();
    for i in 0..300u64 {
        let name = format!("G{i}");
        kv.put(&format!("t10/node/{name}"), "present weight=5", 0).unwrap();
        let until = Instant::now() + Duration::from_micros(i * 10);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        match here.add_node(NodeSpec::new(&name).weight(9)) {
            Err(e) => assert_eq!(e.kind(), ErrorKind::DuplicateNode, "{name}: {e}"),
            Ok(_) => overwritten.push(name.clone()),
        }
        let (_, kvs) = kv.range_prefix(&format!("t10/node/{name}")).unwrap();
        if kvs[0].value.as_deref() != Some("present weight=5") {
            overwritten.push(format!("{name} record"));
        }
    }
    assert!(overwritten.is_empty(), "additions that overwrote another process's: {overwritten:?}");
    assert_eq!(feed(&here).refused, 0);
}

fn a_configured_node_removed_stays_removed_fleet_wide(etcd: &Etcd) {
    // C is in every process's config and has no `node/C` record: its
    // removal must still become a record that every process applies, and
    // that a process starting later reads.
    let kv = etcd.client();
    let here = Cluster::from_config_text(&config(&etcd.url("t9"))).unwrap();
    let there = Cluster::from_config_text(&config(&etcd.url("t9"))).unwrap();
    let before = etcd.revision();
    here.remove_node("C").unwrap();
    assert!(here.node_by_name("C").is_err());
    assert!(etcd.revision() > before, "the removal was written");
    eventually("the removal elsewhere", &there, |c| c.node_by_name("C").is_err());
    let later = Cluster::from_config_text(&config(&etcd.url("t9"))).unwrap();
    assert!(later.node_by_name("C").is_err(), "a process starting after the removal reads it");
    assert_eq!(here.set_node_state("C", NodeState::Down).unwrap_err().kind(), ErrorKind::UnknownNode);

    // Added back: a member again everywhere, and records about it go through.
    here.add_node(NodeSpec::new("C").weight(3)).unwrap();
    eventually("C back elsewhere", &there, |c| c.node_by_name("C").is_ok_and(|n| n.weight() == 3));
    here.set_node_state("C", NodeState::Draining).unwrap();
    eventually("C's drain elsewhere", &there, |c| c.node_by_name("C").is_ok_and(|n| n.state() == NodeState::Draining));
    eventually("C back in the later process", &later, |c| c.node_by_name("C").is_ok());
    assert_eq!(here.add_node(NodeSpec::new("C")).unwrap_err().kind(), ErrorKind::DuplicateNode);

    // A removal record read by a tool that deletes instead (older
    // publishers): a deleted `node/<NAME>` is a removal as before.
    let rev = kv.delete("t9/node/C").unwrap().0;
    eventually("the deletion elsewhere", &there, |c| feed(c).revision >= rev);
    assert!(there.node_by_name("C").is_err());
    for c in [&here, &there, &later] {
        eventually("one view", c, |c| feed(c).revision >= rev);
        assert_eq!(feed(c).refused, 0, "{:?}", feed(c));
    }
    assert_eq!(here.topology_fingerprint(), there.topology_fingerprint());
    assert_eq!(here.topology_fingerprint(), later.topology_fingerprint());
}

fn a_subscriber_away_resumes_or_reads_everything_again(etcd: &Etcd) {
    let kv = etcd.client();
    // Only member 3: when it is down, this subscriber is cut off.
    let url = format!("etcd://{}/t4", etcd.endpoints[2]);
    kv.put("t4/node/A/state", "draining", 0).unwrap();
    let c = Cluster::from_config_text(&config(&url)).unwrap();
    assert_eq!(state(&c, "A"), NodeState::Draining);

    // Away, nothing compacted: the watch resumes from its revision.
    etcd.nodes(&["kill", "3"]);
    eventually("the loss seen", &c, |c| !feed(c).connected);
    kv.put("t4/node/B/state", "down", 0).unwrap();
    let last = kv.put("t4/node/A/state", "up", 0).unwrap();
    etcd.nodes(&["restart", "3"]);
    eventually("the records missed while away", &c, |c| feed(c).revision >= last);
    let f = feed(&c);
    assert!(f.reconnects >= 1 && f.full_reads == 1, "resumed, not re-read: {f:?}");
    assert_eq!((state(&c, "A"), state(&c, "B")), (NodeState::Up, NodeState::Down));
    assert_eq!(f.applied + f.stale, 3, "nothing applied twice: {f:?}");

    // Away while etcd compacts past its revision: everything read again,
    // and a record deleted meanwhile is applied as deleted.
    etcd.nodes(&["kill", "3"]);
    eventually("the loss seen", &c, |c| !feed(c).connected);
    kv.delete("t4/node/B/state").unwrap();
    kv.put("t4/node/C/state", "down", 0).unwrap();
    let last = kv.put("t4/node/C/weight", "4", 0).unwrap();
    kv.compact(last).unwrap();
    etcd.nodes(&["restart", "3"]);
    eventually("the full read after the compaction", &c, |c| feed(c).revision >= last);
    let f = feed(&c);
    assert_eq!(f.full_reads, 2, "{f:?}");
    assert_eq!(state(&c, "B"), NodeState::Up, "deleted while away and compacted: applied as a deletion");
    assert_eq!(state(&c, "C"), NodeState::Down);
    assert_eq!(c.node_by_name("C").unwrap().weight(), 4);
}

fn the_leader_killed_mid_stream_loses_nothing(etcd: &Etcd) {
    let kv = etcd.client();
    let c = Cluster::from_config_text(&config(&etcd.url("t5"))).unwrap();
    let leader: usize = etcd.nodes(&["leader"]).trim().parse().expect("leader index");
    let mut last = 0;
    for i in 1..=40u32 {
        if i == 15 {
            etcd.nodes(&["kill", &leader.to_string()]);
        }
        // The weight of B counts the records: the last one wins.
        loop {
            match kv.put("t5/node/B/weight", &i.to_string(), 0) {
                Ok(rev) => {
                    last = rev;
                    break;
                }
                // No leader for a moment: retried, as an operator's tool does.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
    eventually("every record after the leader's death", &c, |c| feed(c).revision >= last);
    assert_eq!(c.node_by_name("B").unwrap().weight(), 40);
    let f = feed(&c);
    assert!(f.applied + f.stale >= 40 && f.refused == 0, "{f:?}");
    etcd.nodes(&["restart", &leader.to_string()]);
}

/// `racaffinity-feed drain NODE --timeout 30s --dated` writes `since=`: a
/// subscriber that reads the record late (here: 25 s after it was written)
/// ends the drain when every other subscriber does, at `since + timeout`,
/// not 30 s after its own receipt; an undated record still counts from
/// receipt. (agreement_inputs.rs holds the rule on a manual clock; this is
/// the same record through a real etcd, the subscriber and the wall clock.)
fn a_dated_drain_record_ends_when_its_writer_said(etcd: &Etcd) {
    let kv = etcd.client();
    let c = Cluster::from_config_text(&config(&etcd.url("t10"))).unwrap();
    let written = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() - 25;
    kv.put("t10/node/B/state", &format!("draining timeout=30s since={written}"), 0).unwrap();
    let last = kv.put("t10/node/C/state", "draining timeout=30s", 0).unwrap();
    let read = Instant::now();
    eventually("both drain records applied", &c, |c| feed(c).revision >= last);
    assert_eq!(state(&c, "C"), NodeState::Draining);
    eventually("the dated drain ended at since + timeout", &c, |c| state(c, "B") == NodeState::Down);
    assert!(read.elapsed() < Duration::from_secs(15), "ended {:?} after receipt, not about 5 s", read.elapsed());
    assert!(c.node_by_name("B").unwrap().down_is_planned(), "a drain's end is a planned Down");
    assert_eq!(state(&c, "C"), NodeState::Draining, "an undated record counts its 30 s from receipt");
    let f = feed(&c);
    assert_eq!(f.refused, 0, "{f:?}");
    c.close();
}
