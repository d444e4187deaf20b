//! Agreement across processes (two or three clusters stand for processes)
//! for inputs whose value depends on how or when they arrive: FAN versions
//! written in different time zones, a membership record put again with
//! another address, a drain's deadline, and session tokens decoded where
//! token ids could collide. The same inputs in any order end in the same
//! state, fingerprint and placements.
mod common;

use common::cluster_with_clock;
use racaffinity::{Cluster, ManualClock, NodeState};

const CFG: &str = "nodes = orcl_1, orcl_2, orcl_3\ntransaction.strict = true\ntransaction.settle = 3s\n\
                   node.orcl_1.address = h1:1521\nnode.orcl_2.address = h2:1521\nnode.orcl_3.address = h3:1521";

fn procs(n: usize) -> (Vec<Cluster>, Vec<ManualClock>) {
    let clocks: Vec<_> = (0..n).map(|_| ManualClock::new(1_000_000)).collect();
    (clocks.iter().map(|c| cluster_with_clock(CFG, c)).collect(), clocks)
}

fn advance(clocks: &[ManualClock], ms: u64) {
    for c in clocks {
        c.advance_ms(ms);
    }
}

fn states(c: &Cluster) -> Vec<(String, NodeState, NodeState)> {
    let mut ids = c.node_ids();
    ids.sort();
    ids.into_iter()
        .map(|id| {
            let n = c.node(id).unwrap();
            (n.name().to_owned(), n.state(), n.shared_state())
        })
        .collect()
}

/// Gtrids two processes place differently (a refusal counts as a placement of its own).
fn split_gtrids(p: &Cluster, q: &Cluster, n: usize) -> Vec<String> {
    (0..n)
        .filter_map(|i| {
            let g = format!("g-{i}");
            let a = p.tx_begin(g.as_bytes()).map(|r| p.node_name(r.node).unwrap()).map_err(|e| e.kind());
            let b = q.tx_begin(g.as_bytes()).map(|r| q.node_name(r.node).unwrap()).map_err(|e| e.kind());
            let _ = p.tx_complete(g.as_bytes());
            let _ = q.tx_complete(g.as_bytes());
            (a != b).then(|| format!("{g}: {a:?} vs {b:?}"))
        })
        .collect()
}

fn assert_alike(cs: &[Cluster]) {
    for c in &cs[1..] {
        assert_eq!(states(&cs[0]), states(c), "same inputs, different node states");
        assert_eq!(cs[0].topology_fingerprint(), c.topology_fingerprint(), "same inputs, different fingerprints");
        let split = split_gtrids(&cs[0], c, 200);
        assert!(split.is_empty(), "{} of 200 gtrids placed apart: {:?}", split.len(), &split[..split.len().min(3)]);
    }
}

/// A `down` the simplefan adapter wrote in UTC, and an `up` Oracle wrote 5 s
/// later in local time (UTC-7, so its wall-clock reads 7 hours earlier).
const DOWN_UTC: &str = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=down reason=FAILURE \
                        timestamp=2026-11-29 15:00:00";
const UP_LOCAL_5S_LATER: &str = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=up \
                                 reason=BOOT timestamp=2026-11-29 08:00:05 timezone=-07:00 db_domain=example.com";
/// A `down` Oracle wrote in UTC+1 at the instant of `DOWN_UTC` (it reads an hour later).
const DOWN_LOCAL: &str = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=down \
                          reason=FAILURE timestamp=2026-11-29 16:00:00 timezone=+01:00";
/// A planned drain in UTC, 10 s after the down: the latest of a triple, though
/// it reads earlier than `DOWN_LOCAL`.
const DRAIN_UTC_10S_LATER: &str = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_2 host=h2 \
                                   status=down reason=USER card=2 timestamp=2026-11-29 15:00:10";

#[test]
fn fan_events_of_different_zones_arriving_up_first_order_by_the_instant() {
    let (cs, _clocks) = procs(1);
    cs[0].apply_event(UP_LOCAL_5S_LATER).unwrap();
    cs[0].apply_event(DOWN_UTC).unwrap();
    let n = cs[0].node_by_name("orcl_2").unwrap();
    assert_eq!(n.state(), NodeState::Up, "the down is 5 s older than the up, though it reads 7 hours later");
}

#[test]
fn fan_events_of_different_zones_in_opposite_orders_end_alike_in_two_processes() {
    let (cs, clocks) = procs(2);
    advance(&clocks, 10_000);
    cs[0].apply_event(DOWN_UTC).unwrap();
    cs[1].apply_event(UP_LOCAL_5S_LATER).unwrap();
    advance(&clocks, 500);
    cs[0].apply_event(UP_LOCAL_5S_LATER).unwrap();
    cs[1].apply_event(DOWN_UTC).unwrap();
    advance(&clocks, 10_000);
    assert_eq!(cs[0].node_by_name("orcl_2").unwrap().state(), NodeState::Up);
    assert_alike(&cs);
}

#[test]
fn a_mixed_triple_of_zones_in_every_order_ends_alike() {
    // Three zones: UTC+1, UTC-7 and UTC. Read as UTC, the first would be the latest.
    let events = [DOWN_LOCAL, UP_LOCAL_5S_LATER, DRAIN_UTC_10S_LATER];
    let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let (cs, clocks) = procs(orders.len());
    advance(&clocks, 10_000);
    for step in 0..3 {
        for (c, order) in cs.iter().zip(&orders) {
            c.apply_event(events[order[step]]).unwrap();
        }
        advance(&clocks, 300);
    }
    advance(&clocks, 10_000);
    for c in &cs {
        let n = c.node_by_name("orcl_2").unwrap();
        assert_eq!(n.state(), NodeState::Draining, "the drain in UTC is the latest");
    }
    assert_alike(&cs);
}

/// What a FAN `NODE` event naming `host` takes down, by node name.
fn nodedown(c: &Cluster, host: &str) -> Result<Vec<String>, racaffinity::ErrorKind> {
    let line = format!("NODE VERSION=1.0 host={host} incarnation=7 status=nodedown reason=member_leave");
    c.apply_event(&line)
        .map(|e| e.changes.iter().map(|ch| ch.name.to_ascii_uppercase()).collect())
        .map_err(|e| e.kind())
}

fn addresses(c: &Cluster) -> Vec<(String, Option<String>, Option<String>)> {
    let mut ids = c.node_ids();
    ids.sort();
    ids.into_iter()
        .map(|id| {
            let n = c.node(id).unwrap();
            (n.name().to_owned(), n.address(), n.machine())
        })
        .collect()
}

/// Membership records of a node added at runtime, put again with another
/// address: a watcher applies them in revision order, another process in
/// the opposite order, a third reads only the latest (the log after a
/// compaction). A FAN `NODE` event by host then reaches the same node in
/// all three.
#[test]
fn a_membership_record_put_again_with_another_address_moves_the_address_everywhere() {
    let (cs, clocks) = procs(3);
    advance(&clocks, 10_000);
    let recs = [(10, "present address=hA:1521"), (20, "present weight=2 address=hB:1521")];
    for (v, val) in recs {
        cs[0].apply_feed_record(v, "node/E", Some(val)).unwrap();
    }
    for (v, val) in recs.iter().rev() {
        cs[1].apply_feed_record(*v, "node/E", Some(val)).unwrap();
    }
    cs[2].apply_feed_record(20, "node/E", Some(recs[1].1)).unwrap();
    for c in &cs {
        assert_eq!(c.node_by_name("E").unwrap().address().as_deref(), Some("hB:1521"), "the newest record's address");
    }
    assert_eq!(addresses(&cs[0]), addresses(&cs[1]));
    assert_eq!(addresses(&cs[0]), addresses(&cs[2]));
    advance(&clocks, 10_000);
    for c in &cs {
        assert_eq!(nodedown(c, "hA"), Err(racaffinity::ErrorKind::UnknownNode), "no node is on hA any more");
        assert_eq!(nodedown(c, "hB"), Ok(vec!["E".to_owned()]));
    }
    advance(&clocks, 10_000);
    assert_alike(&cs);
}

/// The same with direct calls, for a configured node: `add_node_at` with
/// another address, two processes in opposite orders.
#[test]
fn add_node_at_with_another_address_in_opposite_orders_ends_alike() {
    let (cs, clocks) = procs(2);
    advance(&clocks, 10_000);
    let older = racaffinity::NodeSpec::new("orcl_2").address("h7:1521");
    let newer = racaffinity::NodeSpec::new("orcl_2").address("h8:1521");
    cs[0].add_node_at(older.clone(), 5).unwrap();
    cs[0].add_node_at(newer.clone(), 6).unwrap();
    cs[1].add_node_at(newer, 6).unwrap();
    cs[1].add_node_at(older, 5).unwrap();
    for c in &cs {
        assert_eq!(c.node_by_name("orcl_2").unwrap().host().as_deref(), Some("h8"));
    }
    assert_eq!(addresses(&cs[0]), addresses(&cs[1]));
    advance(&clocks, 10_000);
    for c in &cs {
        assert_eq!(nodedown(c, "h2"), Err(racaffinity::ErrorKind::UnknownNode));
        assert_eq!(nodedown(c, "h8"), Ok(vec!["ORCL_2".to_owned()]));
    }
    advance(&clocks, 10_000);
    assert_alike(&cs);
}

/// Two additions at one version with different addresses resolve alike in
/// either order (the tie rule), and a later record without an address
/// gives the configured address back, as a process that reads only that
/// record has it.
#[test]
fn addresses_at_one_version_resolve_alike_and_a_record_without_one_restores_the_configured() {
    let (cs, clocks) = procs(3);
    advance(&clocks, 10_000);
    let a = "present address=hA:1521";
    let b = "present address=hB:1521";
    cs[0].apply_feed_record(10, "node/orcl_3", Some(a)).unwrap();
    cs[0].apply_feed_record(10, "node/orcl_3", Some(b)).unwrap();
    cs[1].apply_feed_record(10, "node/orcl_3", Some(b)).unwrap();
    cs[1].apply_feed_record(10, "node/orcl_3", Some(a)).unwrap();
    assert_eq!(addresses(&cs[0]), addresses(&cs[1]), "a tie resolves alike in either order");
    for c in &cs[..2] {
        c.apply_feed_record(11, "node/orcl_3", Some("present weight=1")).unwrap();
    }
    cs[2].apply_feed_record(11, "node/orcl_3", Some("present weight=1")).unwrap();
    for c in &cs {
        assert_eq!(c.node_by_name("orcl_3").unwrap().address().as_deref(), Some("h3:1521"), "the configured address");
    }
    advance(&clocks, 10_000);
    assert_alike(&cs);
}

/// 2026-11-29 15:00:00 UTC in milliseconds since 1970.
const T0_UNIX_MS: u64 = 1_795_964_400_000;

/// A planned drain of orcl_2 at 15:00:00 UTC (written at UTC+1) with 60 s
/// for existing work.
const DRAIN_60S: &str = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_2 host=h2 status=down \
                         reason=USER card=2 drain_timeout=60 timestamp=2026-11-29 16:00:00 timezone=+01:00";

/// Processes whose wall clocks read `T0_UNIX_MS + skew_ms[i]` now (their
/// monotonic clocks start apart, as processes' do).
fn procs_at(skew_ms: &[i64]) -> (Vec<Cluster>, Vec<ManualClock>) {
    let clocks: Vec<_> = skew_ms
        .iter()
        .enumerate()
        .map(|(i, s)| ManualClock::new(1_000_000 * (i as u64 + 1)).with_unix_ms(T0_UNIX_MS.saturating_add_signed(*s)))
        .collect();
    (clocks.iter().map(|c| cluster_with_clock(CFG, c)).collect(), clocks)
}

/// A gtrid `c` places on `node`, begun now and left open.
fn open_gtrid_on(c: &Cluster, node: &str) -> String {
    (0..1000)
        .map(|i| format!("open-{i}"))
        .find(|g| {
            let r = c.tx_begin(g.as_bytes()).unwrap();
            let on = c.node_name(r.node).unwrap() == node;
            if !on {
                c.tx_complete(g.as_bytes()).unwrap();
            }
            on
        })
        .expect("some gtrid places on the node")
}

/// Whether `c` lets the open gtrid `g` go on (a later branch of it here).
fn continues(c: &Cluster, g: &str) -> Result<String, racaffinity::ErrorKind> {
    c.tx_begin(g.as_bytes()).map(|r| c.node_name(r.node).unwrap()).map_err(|e| e.kind())
}

/// A drain's deadline counts from the event's timestamp, not from when each
/// process got it: one that gets it 30 s late (a late relay, a process that
/// reads the feed later) ends the drain when the other does.
#[test]
fn a_fan_drain_delivered_late_ends_when_it_ends_everywhere() {
    let (cs, clocks) = procs_at(&[0, 0]);
    advance(&clocks, 10_000);
    let open: Vec<_> = cs.iter().map(|c| open_gtrid_on(c, "orcl_2")).collect();
    cs[0].apply_event(DRAIN_60S).unwrap();
    advance(&clocks, 30_000);
    // Through the feed: the record's version orders it, its timestamp dates it.
    cs[1].apply_feed_record(77, "fan/relay-1", Some(DRAIN_60S)).unwrap();
    for (c, g) in cs.iter().zip(&open) {
        assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Draining);
        assert_eq!(continues(c, g), Ok("orcl_2".to_owned()), "existing work runs on while the drain lasts");
    }
    advance(&clocks, 21_000); // 61 s after the event
    for (c, g) in cs.iter().zip(&open) {
        let n = c.node_by_name("orcl_2").unwrap();
        assert_eq!(n.state(), NodeState::Down, "60 s after the event, in every process");
        assert!(n.down_is_planned());
        assert_eq!(continues(c, g), Err(racaffinity::ErrorKind::StrictAffinity));
    }
    assert_eq!(cs[0].topology_fingerprint(), cs[1].topology_fingerprint());
}

/// The other order of the test above: the relay's record comes first, the
/// event itself 30 s late; and a process that reads the relay's record from
/// the log after a restart (a subscriber with a fresh clock) as well.
#[test]
fn a_fan_drain_through_the_feed_first_and_directly_late_ends_alike() {
    let (cs, clocks) = procs_at(&[0, 0, 0]);
    advance(&clocks, 10_000);
    let open: Vec<_> = cs.iter().map(|c| open_gtrid_on(c, "orcl_2")).collect();
    cs[0].apply_feed_record(77, "fan/relay-1", Some(DRAIN_60S)).unwrap();
    advance(&clocks, 30_000);
    cs[1].apply_event(DRAIN_60S).unwrap();
    advance(&clocks, 15_000);
    cs[2].apply_feed_record(77, "fan/relay-1", Some(DRAIN_60S)).unwrap();
    for (c, g) in cs.iter().zip(&open) {
        assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Draining, "55 s after the event");
        assert_eq!(continues(c, g), Ok("orcl_2".to_owned()));
    }
    advance(&clocks, 6_000);
    for (c, g) in cs.iter().zip(&open) {
        let n = c.node_by_name("orcl_2").unwrap();
        assert_eq!((n.state(), n.down_is_planned()), (NodeState::Down, true), "61 s after the event, everywhere");
        assert_eq!(continues(c, g), Err(racaffinity::ErrorKind::StrictAffinity));
    }
    assert_alike(&cs[..]);
}

/// The instance comes back 20 s into the drain, and two relays wrote the
/// drain and the `up` under keys of their own: a process that reads the `up`
/// first and the drain after it (a slower relay, a re-read of the log in
/// key order) ends where the one that read them in order does, Up, and stays
/// there past the drain's deadline.
#[test]
fn a_fan_drain_and_the_up_after_it_through_two_relays_in_opposite_orders_end_alike() {
    const UP_20S_LATER: &str = "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=up \
                                reason=BOOT timestamp=2026-11-29 15:00:20";
    let (cs, clocks) = procs_at(&[0, 0]);
    advance(&clocks, 20_000);
    cs[0].apply_feed_record(77, "fan/relay-b", Some(DRAIN_60S)).unwrap();
    cs[0].apply_feed_record(78, "fan/relay-a", Some(UP_20S_LATER)).unwrap();
    cs[1].apply_feed_record(78, "fan/relay-a", Some(UP_20S_LATER)).unwrap();
    cs[1].apply_feed_record(77, "fan/relay-b", Some(DRAIN_60S)).unwrap();
    for c in &cs {
        assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Up, "the later record wins");
    }
    assert_alike(&cs[..]);
    advance(&clocks, 50_000); // past the drain's deadline
    for c in &cs {
        assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Up, "an overtaken drain never ends in a Down");
    }
    assert_alike(&cs[..]);
}

/// A feed drain record dated by its writer (`since=`, seconds since 1970
/// UTC: `racaffinity-feed drain --dated`) ends where it ends everywhere, as
/// a dated FAN drain does: one process reads it at once, one 30 s late
/// (a reconnect), one after the deadline (a restart); and never later
/// than its timeout from receipt.
#[test]
fn a_feed_drain_record_dated_by_its_writer_ends_when_it_ends_everywhere() {
    let since = T0_UNIX_MS / 1000;
    let record = format!("draining timeout=60s since={since}");
    let (cs, clocks) = procs_at(&[0, 0, 0]);
    let open: Vec<_> = cs.iter().map(|c| open_gtrid_on(c, "orcl_2")).collect();
    cs[0].apply_feed_record(40, "node/orcl_2/state", Some(&record)).unwrap();
    advance(&clocks, 30_000);
    cs[1].apply_feed_record(40, "node/orcl_2/state", Some(&record)).unwrap();
    advance(&clocks, 29_000);
    for (c, g) in cs[..2].iter().zip(&open) {
        assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Draining, "59 s after its start");
        assert_eq!(continues(c, g), Ok("orcl_2".to_owned()));
    }
    advance(&clocks, 2_000);
    cs[2].apply_feed_record(40, "node/orcl_2/state", Some(&record)).unwrap();
    for (c, g) in cs.iter().zip(&open) {
        let n = c.node_by_name("orcl_2").unwrap();
        assert_eq!((n.state(), n.down_is_planned()), (NodeState::Down, true), "61 s after its start, everywhere");
        assert_eq!(continues(c, g), Err(racaffinity::ErrorKind::StrictAffinity));
    }
    // The restarted process learnt of the Down just now: its strict
    // placements settle (transaction.settle) before they agree.
    advance(&clocks, 5_000);
    assert_alike(&cs[..]);
    // Dated 10 s ahead of this process's wall clock: still 60 s from receipt at most.
    let (later, clocks) = procs_at(&[0]);
    let later = &later[0];
    later
        .apply_feed_record(41, "node/orcl_2/state", Some(&format!("draining timeout=60s since={}", since + 10)))
        .unwrap();
    clocks[0].advance_ms(60_000);
    assert_eq!(later.node_by_name("orcl_2").unwrap().state(), NodeState::Down, "never later than from receipt");
}

/// `since=` dates a drain's timeout: without a timeout, on another state, or
/// not a number of seconds, the record is refused and changes nothing.
#[test]
fn a_since_that_dates_nothing_is_refused() {
    let (cs, _) = procs_at(&[0]);
    for bad in [
        "draining since=1795964400",
        "down since=1795964400",
        "draining timeout=60s since=soon",
        "draining timeout=60s since=-5",
    ] {
        let e = cs[0].apply_feed_record(50, "node/orcl_2/state", Some(bad)).unwrap_err();
        assert_eq!(e.kind(), racaffinity::ErrorKind::InvalidArgument, "{bad}");
        assert_eq!(cs[0].node_by_name("orcl_2").unwrap().state(), NodeState::Up, "{bad} changed nothing");
    }
}

/// A drain that reaches a process after its deadline is a planned Down at
/// once; one whose timestamp is ahead of this process's wall clock (a
/// clock behind the server's) never lasts longer than its timeout from
/// receipt; a clock with no wall time counts from receipt.
#[test]
fn a_drain_deadline_from_the_timestamp_is_bounded_by_the_receipt() {
    let (cs, clocks) = procs_at(&[0, -20_000]);
    advance(&clocks, 70_000);
    cs[0].apply_event(DRAIN_60S).unwrap();
    let n = cs[0].node_by_name("orcl_2").unwrap();
    assert_eq!((n.state(), n.down_is_planned()), (NodeState::Down, true), "70 s after a 60 s drain");
    // cs[1]'s wall clock reads 50 s after the event: 10 s left by its clock.
    cs[1].apply_event(DRAIN_60S).unwrap();
    clocks[1].advance_ms(9_000);
    assert_eq!(cs[1].node_by_name("orcl_2").unwrap().state(), NodeState::Draining);
    clocks[1].advance_ms(1_000);
    assert_eq!(cs[1].node_by_name("orcl_2").unwrap().state(), NodeState::Down);

    let (ahead, clocks) = procs_at(&[-600_000]);
    ahead[0].apply_event(DRAIN_60S).unwrap();
    clocks[0].advance_ms(60_000);
    assert_eq!(ahead[0].node_by_name("orcl_2").unwrap().state(), NodeState::Down, "never past receipt + timeout");

    let plain = ManualClock::new(1_000_000);
    let c = cluster_with_clock(CFG, &plain);
    plain.advance_ms(100_000);
    c.apply_event(DRAIN_60S).unwrap();
    plain.advance_ms(59_000);
    assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Draining, "no wall clock: from receipt");
    plain.advance_ms(1_000);
    assert_eq!(c.node_by_name("orcl_2").unwrap().state(), NodeState::Down);
}

const CLASH: &str = "nodes = N6403, B\ntransaction.strict = true\ntransaction.settle = 3s\nsession.mode = stateless";

fn clash_procs(n: usize) -> (Vec<Cluster>, Vec<ManualClock>) {
    let clocks: Vec<_> = (0..n).map(|_| ManualClock::new(1_000_000)).collect();
    (clocks.iter().map(|c| cluster_with_clock(CLASH, c)).collect(), clocks)
}

fn live(c: &Cluster) -> Vec<String> {
    let mut v: Vec<_> = c.node_ids().into_iter().map(|id| c.node_name(id).unwrap().to_ascii_uppercase()).collect();
    v.sort();
    v
}

/// Which node each process decodes `token`'s primary to.
fn decoded(cs: &[Cluster], token: &str) -> Vec<Option<String>> {
    cs.iter().map(|c| c.decode_token(token).unwrap().primary.map(|id| c.node_name(id).unwrap())).collect()
}

/// A token minted by `c` whose primary is `node`.
fn token_on(c: &Cluster, node: &str) -> String {
    (0..1000)
        .map(|i| c.session_token(&format!("sid-{i}")).unwrap())
        .find(|t| c.decode_token(t).unwrap().primary.map(|id| c.node_name(id).unwrap()).as_deref() == Some(node))
        .expect("some session on the node")
}

/// N6403 and N15384 share a session-token id. Outside the feed, the
/// removal of one and the addition of the other reaching two processes in
/// opposite orders: the addition that came while the other was live was
/// refused and lost, so one process ended without N15384, and a token
/// naming the id decoded to N15384 in one process and to nothing in the
/// other. Every order must end with the same live nodes and decode alike.
#[test]
fn a_token_id_clash_in_opposite_orders_ends_with_the_same_nodes_and_decodes_alike() {
    let (cs, clocks) = clash_procs(2);
    advance(&clocks, 10_000);
    let old_token = token_on(&cs[0], "N6403");
    assert!(cs[0].add_node_at(racaffinity::NodeSpec::new("N15384"), 6).is_ok(), "a versioned addition is never lost");
    cs[0].remove_node_at("N6403", 5).unwrap();
    cs[1].remove_node_at("N6403", 5).unwrap();
    cs[1].add_node_at(racaffinity::NodeSpec::new("N15384"), 6).unwrap();
    assert_eq!(live(&cs[0]), live(&cs[1]));
    assert_eq!(live(&cs[0]), ["B", "N15384"]);
    let d = decoded(&cs, &old_token);
    assert_eq!(d[0], d[1], "one token, two nodes");
    advance(&clocks, 10_000);
    assert_alike(&cs);
}

/// Both names added by versioned inputs and neither removed: the one whose
/// input in force has the lower version holds the id (the other waits for
/// it to go), in every order, also for a process that reads only the
/// latest records, and after the holder's record is put again newer.
#[test]
fn two_names_of_one_token_id_hold_it_by_the_lower_version_in_every_order() {
    let (cs, clocks) = clash_procs(3);
    advance(&clocks, 10_000);
    for c in &cs {
        c.remove_node_at("N6403", 1).unwrap();
    }
    let a = racaffinity::NodeSpec::new("N6403");
    let b = racaffinity::NodeSpec::new("N15384");
    cs[0].add_node_at(a.clone(), 4).unwrap();
    cs[0].add_node_at(b.clone(), 6).unwrap();
    cs[1].add_node_at(b.clone(), 6).unwrap();
    cs[1].add_node_at(a.clone(), 4).unwrap();
    cs[2].add_node_at(a.clone(), 4).unwrap();
    cs[2].add_node_at(b.clone(), 6).unwrap();
    for c in &cs {
        assert_eq!(live(c), ["B", "N6403"], "the lower version holds the id");
    }
    // The holder put again newer (a re-put record): the other now holds it,
    // as in a process that reads only the latest records.
    cs[0].add_node_at(a.clone(), 9).unwrap();
    cs[1].add_node_at(a.clone(), 9).unwrap();
    let (late, late_clock) = clash_procs(1);
    late_clock[0].advance_ms(10_000);
    late[0].remove_node_at("N6403", 1).unwrap();
    late[0].add_node_at(a.clone(), 9).unwrap();
    late[0].add_node_at(b, 6).unwrap();
    for c in [&cs[0], &cs[1], &late[0]] {
        assert_eq!(live(c), ["B", "N15384"], "N15384's input (6) is now the lower");
    }
    advance(&clocks, 10_000);
    late_clock[0].advance_ms(10_000);
    assert_alike(&[cs[0].clone(), cs[1].clone(), late[0].clone()]);
}

/// A timestamp without seconds (a date, or hours and minutes) names a day
/// or a minute, not an instant: a drain it dates counts from receipt, or a
/// date-only event would end its drain at once (midnight plus the timeout
/// has long passed) and an `hh:mm` one up to a minute early.
#[test]
fn a_drain_dated_without_seconds_counts_from_receipt() {
    for stamp in ["2026-11-29", "2026-11-29 16:00"] {
        let line = DRAIN_60S.replace("2026-11-29 16:00:00", stamp);
        let (cs, clocks) = procs_at(&[30_000]);
        cs[0].apply_event(&line).unwrap();
        clocks[0].advance_ms(59_000);
        assert_eq!(cs[0].node_by_name("orcl_2").unwrap().state(), NodeState::Draining, "{stamp}: 59 s after receipt");
        clocks[0].advance_ms(1_000);
        assert_eq!(cs[0].node_by_name("orcl_2").unwrap().state(), NodeState::Down, "{stamp}: 60 s after receipt");
    }
}

/// A SERVICE or DATABASE event is about every node but joins each node's
/// own inputs: a wide `up` lifts only the nodes whose input in force is
/// older, never one a newer INSTANCE or NODE event downed. Six events
/// (per-instance, per-host and wide; up, down and drain) in all 720 orders
/// end alike, directly and as feed records at their revisions.
#[test]
fn wide_and_per_instance_fan_events_in_every_order_end_alike() {
    let events = [
        "INSTANCE VERSION=1.0 database=orcl instance=orcl_2 host=h2 status=down reason=FAILURE \
         timestamp=2026-11-29 15:00:10",
        "SERVICE VERSION=1.0 service=svc database=orcl status=up timestamp=2026-11-29 15:00:05",
        "DATABASE VERSION=1.0 database=orcl status=up timestamp=2026-11-29 15:00:09",
        "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=orcl_1 host=h1 status=down reason=USER \
         drain_timeout=30 timestamp=2026-11-29 15:00:11",
        "NODE VERSION=1.0 host=h3 status=nodedown timestamp=2026-11-29 15:00:03",
        "SERVICE VERSION=1.0 service=svc database=orcl status=down reason=USER timestamp=2026-11-29 15:00:07",
    ];
    fn orders(a: &mut [usize], k: usize, out: &mut Vec<Vec<usize>>) {
        if k == a.len() {
            out.push(a.to_vec());
        }
        for i in k..a.len() {
            a.swap(k, i);
            orders(a, k + 1, out);
            a.swap(k, i);
        }
    }
    let mut all = Vec::new();
    orders(&mut [0, 1, 2, 3, 4, 5], 0, &mut all);
    let end = |order: &[usize]| {
        let (direct, _c1) = procs(1);
        let (fed, _c2) = procs(1);
        for &i in order {
            direct[0].apply_event(events[i]).unwrap();
            fed[0].apply_feed_record(100 + i as u64, &format!("fan/e{i}"), Some(events[i])).unwrap();
        }
        (states(&direct[0]), states(&fed[0]))
    };
    let first = end(&all[0]);
    let state = |s: &[(String, NodeState, NodeState)], n: &str| s.iter().find(|(m, ..)| m == n).unwrap().1;
    let got: Vec<NodeState> = ["orcl_1", "orcl_2", "orcl_3"].iter().map(|n| state(&first.0, n)).collect();
    assert_eq!(
        got,
        [NodeState::Draining, NodeState::Down, NodeState::Up],
        "the wide up (15:00:09) lifts orcl_3 only: orcl_1's drain and orcl_2's down are newer"
    );
    for order in &all[1..] {
        assert_eq!(end(order), first, "order {order:?} against {:?}", all[0]);
    }
}
