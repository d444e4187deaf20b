//! The config text format and the builder.

mod common;

use racaffinity::{
    Cluster, Config, DataConfig, ErrorKind, NodeSpec, PanicPolicy, Placement, Policy, Scope, SessionMode,
};

const FULL: &str = "
# every key, as documented in the README
name = orcl
database = orcl
service = svc
nodes = MYDB1, MYDB2, MYDB3
node.MYDB1.address = dbhost1:1522
node.MYDB1.weight = 2
node.MYDB2.address = [::1]:1521
policy = weighted
panic = fail
thread.strict = true
thread.auto_pin = true
transaction.strict = true
transaction.placement = balanced
session.strict = true
session.placement = rendezvous
session.mode = stateless
session.idle_ttl = 15m
data.strict = true
data.placement = balanced
data.partitions = 128
data.partition.5 = MYDB3
health.eject_after_failures = 7
health.eject_backoff = 500ms
health.eject_backoff_max = 2m
heartbeat.interval = 5s
heartbeat.misses = 4
";

#[test]
fn every_documented_key_parses() {
    let c = Config::parse(FULL).unwrap();
    assert_eq!(c.name, "orcl");
    assert_eq!(c.database.as_deref(), Some("orcl"));
    assert_eq!(c.service.as_deref(), Some("svc"));
    assert_eq!(c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["MYDB1", "MYDB2", "MYDB3"]);
    assert_eq!(c.nodes[0], NodeSpec::new("MYDB1").address("dbhost1:1522").weight(2));
    assert_eq!(c.nodes[1].address.as_deref(), Some("[::1]:1521"));
    assert_eq!((c.policy, c.panic), (Policy::Weighted, PanicPolicy::Fail));
    assert!(c.thread.strict && c.thread.auto_pin);
    assert!(c.transaction.strict);
    assert_eq!(c.transaction.placement, Placement::Balanced);
    assert!(c.session.strict);
    assert_eq!(
        (c.session.placement, c.session.mode, c.session.idle_ttl_ms),
        (Placement::Rendezvous, SessionMode::Stateless, 900_000)
    );
    assert_eq!(
        c.data,
        DataConfig { strict: true, placement: Placement::Balanced, partitions: 128, map: vec![(5, "MYDB3".into())] }
    );
    let h = c.health;
    assert_eq!((h.eject_after_failures, h.eject_base_ms, h.eject_max_ms), (7, 500, 120_000));
    assert_eq!((h.heartbeat_interval_ms, h.heartbeat_misses), (5_000, 4));
    // The text form round-trips.
    assert_eq!(Config::parse(&c.to_text()).unwrap(), c);
    let cluster = Cluster::new(c).unwrap();
    assert!(cluster.is_strict(Scope::Session));
}

#[test]
fn defaults_are_documented_ones() {
    let c = Config::parse("nodes = A").unwrap();
    assert_eq!(c.policy, Policy::LeastOutstanding);
    assert_eq!(c.panic, PanicPolicy::TryAll);
    assert_eq!(c.transaction.placement, Placement::Rendezvous);
    assert_eq!(c.session.placement, Placement::Balanced);
    assert_eq!(c.data.placement, Placement::Rendezvous);
    assert_eq!(c.data.partitions, 4096);
    assert_eq!(c.session.idle_ttl_ms, 30 * 60_000);
    assert_eq!((c.health.heartbeat_interval_ms, c.health.heartbeat_misses), (10_000, 3));
    assert!(!c.thread.strict && !c.transaction.strict && !c.session.strict && !c.data.strict);
}

#[test]
fn semicolons_separate_entries_too_and_node_keys_alone_declare_nodes() {
    let c = Config::parse("node.B.weight = 2; node.A.address = h:1; policy = random").unwrap();
    assert_eq!(c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["B", "A"]);
}

#[test]
fn the_nodes_list_spelling_wins_because_names_seed_placement() {
    let c = Config::parse("nodes = mydb1, mydb2\nnode.MYDB2.weight = 2").unwrap();
    assert_eq!(c.nodes[1], NodeSpec::new("mydb2").weight(2));
}

#[test]
fn bad_config_names_the_offending_key() {
    let cases = [
        ("nodes = A\npolicy = fastest", "policy"),
        ("nodes = A\npolcy = random", "polcy"),
        ("nodes = A\nnodes = B", "nodes"),
        ("nodes = A, A", "nodes"),
        ("nodes = A\nnode.B.weight = 2", "node.B"),
        ("nodes = A\nnode.A.weight = 0", "node.A.weight"),
        ("nodes = A\nnode.A.colour = red", "node.A.colour"),
        ("nodes = A\nnode.A.address = h:99999", "node.A"),
        ("nodes = A\nnode.A.address = h)(x", "node.A"),
        ("nodes = A\nsession.idle_ttl = 30", "session.idle_ttl"),
        ("nodes = A\nsession.idle_ttl = 3 weeks", "session.idle_ttl"),
        ("nodes = A\nthread.strict = maybe", "thread.strict"),
        ("nodes = A\ndata.partitions = 0", "data.partitions"),
        ("nodes = A\ndata.partitions = 4\ndata.partition.4 = A", "data.partition.4"),
        ("nodes = A\ndata.partition.1 = B", "data.partition.1"),
        ("nodes = A\nhealth.eject_backoff = 10s\nhealth.eject_backoff_max = 1s", "health.eject_backoff_max"),
        ("nodes = A, B C", "nodes"),
        ("nodes = A\njust text", "just text"),
        ("nodes = A\nheartbeat.interval = 0s", "heartbeat.interval"),
        ("nodes = A\nnode.A.weight = 2\nnode.a.weight = 3", "node.a.weight"),
    ];
    for (text, key) in cases {
        match Config::parse(text) {
            Err(racaffinity::Error::Config { key: k, reason }) => {
                assert_eq!(k, key, "for {text:?}: {reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{text:?} should fail on `{key}`, got {other:?}"),
        }
    }
    let huge = "x".repeat(racaffinity::config::MAX_CONFIG_BYTES + 1);
    assert_eq!(Config::parse(&huge).unwrap_err().kind(), ErrorKind::Config);
}

#[test]
fn builder_builds_the_same_cluster_as_text() {
    let built = Cluster::builder()
        .name("orcl")
        .node(NodeSpec::new("MYDB1"))
        .node(NodeSpec::new("MYDB2").weight(2))
        .policy(Policy::RoundRobin)
        .strict(Scope::Transaction, true)
        .build()
        .unwrap();
    let text = Cluster::from_config_text(
        "name = orcl\nnodes = MYDB1, MYDB2\nnode.MYDB2.weight = 2\npolicy = round_robin\ntransaction.strict = true",
    )
    .unwrap();
    assert_eq!(built.config(), text.config());
    assert!(Cluster::builder().node(NodeSpec::new("X").weight(0)).build().is_err());
    assert!(Cluster::builder().node(NodeSpec::new("")).build().is_err());
}

/// A duration past its documented maximum (docs/configuration.md) is a
/// config error naming the key, from the text and from the builder alike:
/// `now + backoff` at the first ejection must never overflow.
#[test]
fn every_duration_and_count_is_bounded_and_a_bad_one_names_its_key() {
    let over = [
        ("health.eject_backoff", "18446744073709551615ms"),
        ("health.eject_backoff", "25h"),
        ("health.eject_backoff_max", "25h"),
        ("heartbeat.interval", "2h"),
        ("transaction.settle", "2h"),
        ("session.idle_ttl", "721h"),
        ("health.eject_after_failures", "1000001"),
        ("heartbeat.misses", "1000001"),
        ("locality.spill_percent", "1000001"),
    ];
    for (key, value) in over {
        let text = format!("nodes = A\n{key} = {value}");
        match Config::parse(&text) {
            Err(racaffinity::Error::Config { key: k, reason }) => {
                assert_eq!(k, key, "for {text:?}: {reason}");
                assert!(reason.contains("at most"), "the message says the limit: {reason}");
            }
            other => panic!("{text:?} should fail on `{key}`, got {other:?}"),
        }
    }
    // Each maximum itself is accepted.
    let at_max = "nodes = A\nhealth.eject_backoff = 24h\nhealth.eject_backoff_max = 24h\nheartbeat.interval = 1h\n\
                  transaction.settle = 1h\nsession.idle_ttl = 720h\nhealth.eject_after_failures = 1000000\n\
                  heartbeat.misses = 1000000";
    Config::parse(at_max).unwrap();
    // The builder goes through the same bounds.
    let health = racaffinity::HealthConfig { eject_base_ms: u64::MAX, eject_max_ms: u64::MAX, ..Default::default() };
    let e = Cluster::builder().node(NodeSpec::new("A")).health(health).build().unwrap_err();
    assert!(matches!(&e, racaffinity::Error::Config { key, .. } if key == "health.eject_backoff"), "{e:?}");
}

/// With the longest back-off allowed, the first ejection keeps the node out
/// (no wrap of `now + backoff`) and it comes back after exactly that long.
#[test]
fn the_longest_allowed_eject_backoff_ejects_without_overflow() {
    let clock = racaffinity::ManualClock::new(u64::MAX / 2);
    let c = Cluster::builder()
        .node(NodeSpec::new("A"))
        .node(NodeSpec::new("B"))
        .clock(clock.clone())
        .health(racaffinity::HealthConfig {
            eject_after_failures: 1,
            eject_base_ms: 24 * 3_600_000,
            eject_max_ms: 24 * 3_600_000,
            ..Default::default()
        })
        .build()
        .unwrap();
    let a = c.node_by_name("A").unwrap();
    c.report_outcome(a.id(), false).unwrap().expect("one failure ejects");
    assert_eq!(a.ejected_for_ms(&clock), 24 * 3_600_000);
    for _ in 0..20 {
        assert_ne!(c.pick().unwrap().node, a.id(), "ejected: no picks");
    }
}

/// Session tokens name a node by a 32-bit id of its name: two names with
/// one id would send a healthy session elsewhere, so they are refused where
/// nodes are configured or added, naming both.
#[test]
fn names_that_share_a_token_id_are_refused_where_nodes_are_configured_or_added() {
    assert_eq!(racaffinity::node_token_id("N6403"), racaffinity::node_token_id("N15384"));
    let e = Config::parse("nodes = A, N6403, N15384").unwrap_err();
    let text = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Config, "{text}");
    assert!(text.contains("N6403") && text.contains("N15384"), "{text}");
    let e = Cluster::builder().node(NodeSpec::new("n6403")).node(NodeSpec::new("N15384")).build().unwrap_err();
    assert!(e.to_string().contains("n6403") && e.to_string().contains("N15384"), "{e}");
    let c = Cluster::from_config_text("nodes = A, N6403").unwrap();
    let e = c.add_node(NodeSpec::new("N15384")).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("N6403") && text.contains("N15384"), "{text}");
    assert!(c.node_by_name("N15384").is_err(), "a refused node is not added");
    // Once the other is removed, the name is free to use.
    c.remove_node("N6403").unwrap();
    c.add_node(NodeSpec::new("N15384")).unwrap();
}

/// A cluster with no node could only fail every pick, with a message about
/// down nodes and the panic policy: it is refused where it is built.
#[test]
fn an_empty_node_list_is_refused_where_the_cluster_is_built() {
    for text in ["nodes = ", "", "name = x\npolicy = random"] {
        match Config::parse(text) {
            Err(racaffinity::Error::Config { key, reason }) => {
                assert_eq!(key, "nodes", "{text:?}");
                assert!(reason.contains("at least one node"), "{text:?}: {reason}");
            }
            other => panic!("{text:?} should be refused, got {other:?}"),
        }
    }
    let e = Cluster::builder().build().unwrap_err();
    assert!(e.to_string().contains("at least one node"), "{e}");
}

/// A mistyped key says where the keys are documented and which one was
/// probably meant.
#[test]
fn an_unknown_key_points_to_the_config_page_and_the_nearest_key() {
    let reason = |text: &str| match Config::parse(text) {
        Err(racaffinity::Error::Config { reason, .. }) => reason,
        other => panic!("{text:?} should fail, got {other:?}"),
    };
    let r = reason("nodes = A\ntransaction.strit = true");
    assert!(r.contains("docs/configuration.md") && !r.contains("README"), "{r}");
    assert!(r.contains("did you mean `transaction.strict`?"), "{r}");
    assert!(reason("nodes = A\nPolicy = random").contains("did you mean `policy`?"));
    assert!(reason("nodes = A\nhealth.eject_backof = 1s").contains("did you mean `health.eject_backoff`?"));
    let far = reason("nodes = A\nbogus = 1");
    assert!(!far.contains("did you mean"), "no guess for a key far from every known one: {far}");
}

/// An unknown node's message lists the cluster's nodes, so a typo shows
/// at once; a large cluster's list is cut short.
#[test]
fn an_unknown_node_lists_the_known_names_within_a_bound() {
    let c = Cluster::from_config_text("nodes = MYDB1, MYDB2").unwrap();
    let e = c.node_by_name("MYDB3").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownNode);
    let text = e.to_string();
    assert!(text.contains("`MYDB3`") && text.contains("MYDB1, MYDB2"), "{text}");
    let e = c.set_node_state("mydb9", racaffinity::NodeState::Down).unwrap_err();
    assert!(e.to_string().contains("MYDB1, MYDB2"), "{e}");
    let names: Vec<String> = (0..500).map(|i| format!("NODE_WITH_A_LONG_NAME_{i}")).collect();
    let c = Cluster::from_config_text(&format!("nodes = {}", names.join(", "))).unwrap();
    let text = c.remove_node("X").unwrap_err().to_string();
    assert!(text.len() < 400, "bounded: {} bytes: {text}", text.len());
    assert!(text.contains("NODE_WITH_A_LONG_NAME_0") && text.contains("more"), "{text}");
}

/// The cluster name labels every metric, in JSON and Prometheus text alike,
/// written there unescaped: the builder refuses a name the text refuses.
#[test]
fn the_builder_refuses_a_cluster_name_the_text_format_refuses() {
    let quoted = "orcl\",\"epoch\":0";
    assert_eq!(Config::parse(&format!("name = {quoted}\nnodes = A")).unwrap_err().kind(), ErrorKind::Config);
    let built = Cluster::builder().name(quoted).node(NodeSpec::new("A")).build();
    assert_eq!(
        built.as_ref().map(|c| c.metrics().to_json()).map_err(|e| e.kind()),
        Err(ErrorKind::Config),
        "a name that breaks the metrics was taken"
    );
}
