//! The records the tool writes, each checked before anything is written by
//! the subscribers' own code: the record is applied to a scratch in-memory
//! cluster with `Cluster::apply_feed_record`, the call every subscriber
//! makes, so a value they would refuse for its form is refused here with
//! their message. What depends on each subscriber's configuration (which
//! nodes it has, its `data.partitions`) cannot be checked here: a record
//! naming a node a cluster does not have is refused and counted by that
//! cluster (docs/operations.md).

use racaffinity::config::MAX_PARTITIONS;
use racaffinity::event::parse_event;
use racaffinity::{validate_node_name, ClusterBuilder, Config, NodeSpec, MAX_FEED_VALUE_BYTES};

use crate::cli::Failure;

/// One record: its key relative to the prefix, and its value (`None`: the
/// key is deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: String,
    pub value: Option<String>,
}

impl Record {
    fn put(key: String, value: String) -> Record {
        Record { key, value: Some(value) }
    }

    fn delete(key: String) -> Record {
        Record { key, value: None }
    }
}

/// The core's message, without the kind's prefix the tool's own adds nothing to.
fn invalid(e: racaffinity::Error) -> Failure {
    match e {
        racaffinity::Error::InvalidArgument(m) => Failure::Invalid(m),
        other => Failure::Invalid(other.to_string()),
    }
}

fn node_name(name: &str) -> Result<(), Failure> {
    validate_node_name(name).map_err(invalid)
}

/// Applies `record` to a scratch cluster made of `nodes` (`partitions`
/// partitions): the subscribers' parsing and checks, nothing written.
fn dry_run(record: &Record, nodes: &[&str], partitions: u32) -> Result<(), Failure> {
    let mut config = Config::default();
    config.data.partitions = partitions;
    let mut builder = ClusterBuilder::from_config(config);
    for n in nodes {
        builder = builder.node(NodeSpec::new(*n));
    }
    let scratch = builder.build().map_err(invalid)?;
    let result = scratch.apply_feed_record(1, &record.key, record.value.as_deref());
    scratch.close();
    result.map(|_| ()).map_err(invalid)
}

/// `node/<N>/state`: `draining`, with `timeout=<t>` when given, and
/// `since=<s>` (seconds since 1970 UTC) when the drain is dated: every
/// subscriber then ends it at that instant plus the timeout, however late
/// it reads the record (subscribers before this release refuse `since=`).
pub fn drain(node: &str, timeout: Option<&str>, since: Option<u64>) -> Result<Record, Failure> {
    let mut value = match timeout {
        // One word: a space would splice fields of its own into the record
        // (`30s since=0`, a drain dated 1970 that ends at once everywhere).
        Some(t) if t.is_empty() || t.contains(char::is_whitespace) => {
            return Err(Failure::Invalid(format!("--timeout `{}` is empty or has spaces", t.escape_debug())))
        }
        Some(t) => format!("draining timeout={t}"),
        None => "draining".to_string(),
    };
    if let Some(s) = since {
        value.push_str(&format!(" since={s}"));
    }
    state(node, &value)
}

/// `node/<N>/state = <value>` (`up`, `down`, `draining …`).
pub fn state(node: &str, value: &str) -> Result<Record, Failure> {
    node_name(node)?;
    let r = Record::put(format!("node/{node}/state"), value.to_string());
    dry_run(&r, &[node], 1)?;
    Ok(r)
}

/// `node/<N>/weight = <w>`.
pub fn weight(node: &str, weight: &str) -> Result<Record, Failure> {
    node_name(node)?;
    let r = Record::put(format!("node/{node}/weight"), weight.trim().to_string());
    dry_run(&r, &[node], 1)?;
    Ok(r)
}

/// Deletes `node/<N>/weight`: back to each cluster's configured weight.
pub fn reset_weight(node: &str) -> Result<Record, Failure> {
    node_name(node)?;
    Ok(Record::delete(format!("node/{node}/weight")))
}

/// `partition_map`: entries `<p>=<NAME>` separated by commas or newlines
/// (a file may hold one per line), written comma-separated.
pub fn partition_map(text: &str, partitions: Option<u32>) -> Result<Record, Failure> {
    let entries: Vec<&str> = text.split([',', '\n', '\r']).map(str::trim).filter(|e| !e.is_empty()).collect();
    let value = entries.join(",");
    let mut names: Vec<&str> = entries.iter().filter_map(|e| e.split_once('=')).map(|(_, n)| n.trim()).collect();
    names.sort_unstable_by_key(|n| n.to_ascii_lowercase());
    names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
    for n in &names {
        node_name(n)?;
    }
    if names.is_empty() {
        // The scratch cluster needs a node; an empty map names none.
        names.push("scratch");
    }
    let r = Record::put("partition_map".into(), value);
    dry_run(&r, &names, partitions.unwrap_or(MAX_PARTITIONS))?;
    Ok(r)
}

/// `node/<N> = present[ weight=<w>][ address=<host:port>]`.
pub fn add(node: &str, weight: Option<&str>, address: Option<&str>) -> Result<Record, Failure> {
    node_name(node)?;
    let mut value = String::from("present");
    for (attr, v) in [("weight", weight), ("address", address)] {
        if let Some(v) = v {
            if v.is_empty() || v.contains(char::is_whitespace) {
                return Err(Failure::Invalid(format!("--{attr} `{}` is empty or has spaces", v.escape_debug())));
            }
            value.push_str(&format!(" {attr}={v}"));
        }
    }
    let r = Record::put(format!("node/{node}"), value);
    // The scratch cluster's own node must be another one: the record adds it.
    let other = if node.eq_ignore_ascii_case("scratch") { "scratch2" } else { "scratch" };
    dry_run(&r, &[other], 1)?;
    Ok(r)
}

/// `node/<N> = removed`: subscribers remove the node, configured or not,
/// and a process starting later reads the removal (a deleted key would be
/// no record at all for a configured node).
pub fn remove(node: &str) -> Result<Record, Failure> {
    node_name(node)?;
    Ok(Record::put(format!("node/{node}"), racaffinity::feed::REMOVED.to_string()))
}

/// `fan/<id> = <line>`; without `id`, the key `Cluster::publish_event` (the
/// core's relay) gives the same event, `<type>-<INSTANCE|HOST|SERVICE>` or
/// `rlb-<SERVICE>`, so both relays keep one record per resource: a later
/// event about it replaces the earlier one, and a full re-read still sees
/// the latest event about every resource.
pub fn fan(line: &str, id: Option<&str>) -> Result<Record, Failure> {
    let line = line.trim();
    if line.len() > MAX_FEED_VALUE_BYTES {
        return Err(Failure::Invalid(format!("the line is {} bytes; at most {MAX_FEED_VALUE_BYTES}", line.len())));
    }
    let event = parse_event(line).map_err(invalid)?;
    let id = match id {
        Some(id) => id.to_string(),
        None => racaffinity::feed::fan_record_id(&event),
    };
    if id.is_empty() || id.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(Failure::Invalid(format!("fan record id `{}` is empty or has spaces", id.escape_debug())));
    }
    Ok(Record::put(format!("fan/{id}"), line.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(r: Result<Record, Failure>) -> String {
        match r {
            Err(Failure::Invalid(m)) => m,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn builds_the_documented_values() {
        assert_eq!(drain("A", Some("30s"), None).unwrap().value.unwrap(), "draining timeout=30s");
        assert_eq!(drain("A", None, None).unwrap().value.unwrap(), "draining");
        let dated = drain("A", Some("30s"), Some(1_795_964_400)).unwrap();
        assert_eq!(dated.value.unwrap(), "draining timeout=30s since=1795964400");
        assert_eq!(state("A", "down").unwrap().key, "node/A/state");
        assert_eq!(weight("A", " 7 ").unwrap().value.unwrap(), "7");
        assert_eq!(reset_weight("A").unwrap(), Record { key: "node/A/weight".into(), value: None });
        let m = partition_map("0=A\n1 = B,\n", None).unwrap();
        assert_eq!((m.key.as_str(), m.value.unwrap().as_str()), ("partition_map", "0=A,1 = B"));
        assert_eq!(partition_map("", None).unwrap().value.unwrap(), "");
        assert_eq!(add("D", Some("3"), Some("db4:5432")).unwrap().value.unwrap(), "present weight=3 address=db4:5432");
        assert_eq!(add("scratch", None, None).unwrap().value.unwrap(), "present");
        assert_eq!(remove("D").unwrap(), Record { key: "node/D".into(), value: Some("removed".into()) });
    }

    #[test]
    fn refuses_what_subscribers_refuse() {
        assert!(invalid(weight("A", "0")).contains("weight must be 1..="));
        assert!(invalid(weight("A", "x")).contains("not a number"));
        assert!(invalid(weight("A", "1000001")).contains("weight"));
        assert!(invalid(drain("A", Some("30"), None)).contains("needs a unit"));
        assert!(invalid(drain("A", Some("3w"), None)).contains("unknown duration unit"));
        assert!(invalid(drain("A", None, Some(1_795_964_400))).contains("give timeout="));
        assert!(invalid(drain("A", Some("30s since=0"), None)).contains("has spaces"));
        assert!(invalid(state("bad name", "down")).contains("contains ` `"));
        assert!(invalid(partition_map("0=A,0=B", None)).contains("mapped twice"));
        assert!(invalid(partition_map("x=A", None)).contains("not a number"));
        assert!(invalid(partition_map("0A", None)).contains("not <partition>=<node>"));
        assert!(invalid(partition_map("5=A", Some(4))).contains("out of range"));
        assert!(invalid(add("D", Some("0"), None)).contains("weight"));
        assert!(invalid(add("D", Some(""), None)).contains("empty"));
        assert!(invalid(fan("not an event", None)).len() > 5);
    }

    #[test]
    fn fan_records_are_keyed_by_subject() {
        let line = "INSTANCE VERSION=1.0 service=orcl database=orcl instance=A host=h1 status=down reason=FAILURE";
        let r = fan(line, None).unwrap();
        assert_eq!((r.key.as_str(), r.value.as_deref()), ("fan/instance-A", Some(line)));
        let sm = "SERVICEMEMBER VERSION=1.0 service=svc database=orcl instance=A host=h2 status=down reason=FAILURE";
        assert_eq!(fan(sm, None).unwrap().key, "fan/servicemember-SVC.A");
        // Two services on one instance are two resources: a full re-read
        // must see both members' latest events.
        let other = sm.replace("service=svc", "service=batch");
        assert_ne!(fan(&other, None).unwrap().key, fan(sm, None).unwrap().key);
        assert_eq!(fan(line, Some("x/1")).unwrap().key, "fan/x/1");
        assert!(matches!(fan(line, Some("a b")), Err(Failure::Invalid(_))));
    }
}
