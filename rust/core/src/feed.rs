//! Feed records: the shared inputs of a fleet as key/value records with a
//! fleet-wide version (issue [fleet-feed]: an etcd key prefix, the record's
//! `mod_revision` as its version; docs/operations.md, "Feed records").
//!
//! A subscriber (or any host that reads such a log itself) hands each record
//! to [`Cluster::apply_feed_record`]; the record joins the node's shared
//! layer like any versioned input (`agreement.rs`), so records applied
//! in any order, twice, or after a full re-read end in the same state.
//!
//! | key (under the prefix) | value | deleted |
//! |---|---|---|
//! | `node/<NAME>` | `present`, optionally `weight=<w>` (a versioned weight at the record's version, as `node/<NAME>/weight`, whether the node is configured or added by the record) and `address=<host:port>` (the newest such record's address is the node's, also for a node that is already there; none: the configured one); or `removed`: the node is removed (configured or not), and stays removed for a process that starts later | the node is removed (a record written by an older publisher) |
//! | `node/<NAME>/state` | `up`, `down`, `draining`, `draining timeout=<duration> [since=<unix s>]` | `up` |
//! | `node/<NAME>/weight` | a weight `1..=1000000` | the configured weight |
//! | `partition_map` | `<p>=<NAME>` entries separated by `,` (may be empty) | the empty map |
//! | `fan/<id>` (any non-empty id) | a FAN or RLB line; the record's version replaces its `timestamp=` | nothing |

pub mod etcd;
mod http;
mod publish;

pub use publish::fan_record_id;
pub(crate) mod subscriber;
mod url;

/// The etcd gateway stand-in the integration tests use too.
#[cfg(test)]
#[path = "../tests/support/gateway.rs"]
pub(crate) mod stand_in;

pub use subscriber::FeedMetrics;
pub(crate) use subscriber::Subscription;
pub use url::{FeedUrl, MAX_FEED_ENDPOINTS};

use crate::cluster::Cluster;
use crate::config::{parse_digits, parse_duration_ms};
use crate::error::{Error, Result};
use crate::event::{parse_event, Event};
use crate::node::{check_weight, validate_node_name, NodeSpec, NodeState};

/// Longest record value accepted (a partition map of a few thousand entries).
pub const MAX_FEED_VALUE_BYTES: usize = 256 * 1024;

/// What a record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedOutcome {
    /// It was newer than what the cluster had and changed it (or confirmed it).
    Applied,
    /// An input with a higher version about the same thing was already in:
    /// nothing changed (a record seen twice, or out of order).
    Stale,
}

impl Cluster {
    /// Applies one feed record: `key` relative to the feed's prefix, `value`
    /// (`None`: the key was deleted), `version` its fleet-wide order (etcd's
    /// `mod_revision` for a put, the delete's revision for a deletion). See
    /// the module docs of `feed.rs` (docs/operations.md) for the keys.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key or value of no known form;
    /// [`Error::UnknownNode`] for a record about a node this cluster does
    /// not have; an event's own errors for a `fan/` record. A refused record
    /// changes nothing.
    pub fn apply_feed_record(&self, version: u64, key: &str, value: Option<&str>) -> Result<FeedOutcome> {
        if let Some(v) = value {
            if v.len() > MAX_FEED_VALUE_BYTES {
                return Err(Error::InvalidArgument(format!(
                    "feed record `{}`: value of {} bytes exceeds {MAX_FEED_VALUE_BYTES}",
                    key.escape_debug(),
                    v.len()
                )));
            }
        }
        let bad = |why: &str| Error::InvalidArgument(format!("feed record `{}`: {why}", key.escape_debug()));
        let parts: Vec<&str> = key.split('/').collect();
        let applied = |changed: bool| if changed { FeedOutcome::Applied } else { FeedOutcome::Stale };
        match parts.as_slice() {
            ["node", name] => {
                validate_node_name(name)?;
                match value {
                    None => Ok(applied(self.remove_node_at(name, version)?)),
                    Some(v) if is_removal(v) => Ok(applied(self.remove_node_at(name, version)?)),
                    Some(v) => {
                        let spec = parse_member(name, v).map_err(|e| bad(&e))?;
                        Ok(applied(self.add_node_at(spec, version)?))
                    }
                }
            }
            ["node", name, "state"] => {
                // A name no node can have is a key of no known form, not an unknown node.
                validate_node_name(name).map_err(|e| bad(&reason(e)))?;
                let (state, drain, since) = match value {
                    None => (NodeState::Up, None, None),
                    Some(v) => parse_state(v).map_err(|e| bad(&e))?,
                };
                Ok(applied(self.set_node_state_dated_at(name, state, version, drain, since)?))
            }
            ["node", name, "weight"] => {
                validate_node_name(name).map_err(|e| bad(&reason(e)))?;
                let weight = match value {
                    None => self.configured_weight(name)?,
                    Some(v) => {
                        let w = parse_digits::<u32>(v.trim())
                            .ok_or_else(|| bad(&format!("weight `{}` is not a number", v.escape_debug())))?;
                        check_weight(w).map_err(|e| bad(&reason(e)))?;
                        w
                    }
                };
                Ok(applied(self.set_node_weight_at(name, weight, version)?))
            }
            ["partition_map"] => {
                let text = value.unwrap_or("");
                let map = parse_map(text).map_err(|e| bad(&e))?;
                let refs: Vec<(u32, &str)> = map.iter().map(|(p, n)| (*p, n.as_str())).collect();
                Ok(applied(self.replace_partition_map_at(&refs, "feed", version)?))
            }
            // Any id, slashes included (`racaffinity-feed fan --id`), but one.
            ["fan", _, ..] if key != "fan/" => {
                let Some(line) = value else { return Ok(FeedOutcome::Stale) };
                match parse_event(line)? {
                    Event::Fan(ev) => {
                        let before = self.routing_epoch();
                        self.apply_fan_versioned(&ev, Some(version))?;
                        Ok(applied(self.routing_epoch() != before))
                    }
                    // Advice carries no version: it steers balancing only.
                    Event::Rlb(adv) => self.apply_rlb(&adv).map(|_| FeedOutcome::Applied),
                }
            }
            _ => Err(bad(
                "unknown key (expected node/<NAME>, node/<NAME>/state, node/<NAME>/weight, partition_map or fan/<id>)",
            )),
        }
    }

    /// What a deleted weight record leaves: the weight of the membership
    /// record that has `name` (`present weight=…`: the same in every process
    /// that has the record), else the configured weight (1 for a node added
    /// at runtime without one).
    fn configured_weight(&self, name: &str) -> Result<u32> {
        let node = self.node_by_name(name)?;
        if let Some(w) = self.member_weight(node.name()) {
            return Ok(w);
        }
        Ok(self.inner.config.nodes.iter().find(|s| s.name.eq_ignore_ascii_case(node.name())).map_or(1, |s| s.weight))
    }
}

/// An error's own words: the record's refusal says its kind once.
fn reason(e: Error) -> String {
    e.detail()
}

/// The value of a `node/<NAME>` record that removes the node. A removal is
/// a put, not a delete: deleting a key that does not exist (a configured
/// node never added by a record) writes nothing, so no other process would
/// see it, and a process reading the prefix later would keep the node.
pub const REMOVED: &str = "removed";

pub(crate) fn is_removal(value: &str) -> bool {
    value.trim() == REMOVED
}

fn parse_member(name: &str, value: &str) -> std::result::Result<NodeSpec, String> {
    let mut words = value.split_whitespace();
    if words.next() != Some("present") {
        return Err(format!("expected `present`, got `{}`", value.escape_debug()));
    }
    let mut spec = NodeSpec::new(name);
    let mut seen = Vec::new();
    for w in words {
        once(&mut seen, w)?;
        match w.split_once('=') {
            Some(("weight", v)) => {
                spec.weight = parse_digits(v).ok_or_else(|| format!("bad weight `{}`", v.escape_debug()))?;
            }
            Some(("address", v)) => spec.address = Some(v.to_string()),
            _ => return Err(format!("unknown attribute `{}`", w.escape_debug())),
        }
    }
    spec.validate().map_err(reason)?;
    Ok(spec)
}

/// Refuses an attribute of a record's value given twice: which one a
/// subscriber took would be the parser's choice, not the writer's (a FAN
/// line's repeated key is refused alike).
fn once<'a>(seen: &mut Vec<&'a str>, word: &'a str) -> std::result::Result<(), String> {
    let Some((attr, _)) = word.split_once('=') else { return Ok(()) };
    if seen.contains(&attr) {
        return Err(format!("`{}=` given twice", attr.escape_debug()));
    }
    seen.push(attr);
    Ok(())
}

/// A state record's state, drain timeout and `since=` (seconds since 1970
/// UTC: when its writer began the drain, which dates the timeout as a FAN
/// drain's `timestamp=` does).
fn parse_state(value: &str) -> std::result::Result<(NodeState, Option<u64>, Option<u64>), String> {
    let mut words = value.split_whitespace();
    let state: NodeState = words.next().unwrap_or("").parse().map_err(reason)?;
    let (mut drain, mut since) = (None, None);
    let mut seen = Vec::new();
    for w in words {
        once(&mut seen, w)?;
        match w.split_once('=') {
            Some(("timeout", v)) if state == NodeState::Draining => {
                drain = Some(parse_duration_ms("timeout", v).map_err(reason)?);
            }
            Some(("since", v)) if state == NodeState::Draining => {
                let s = parse_digits::<u64>(v)
                    .ok_or_else(|| format!("since `{}` is not a number of seconds since 1970 UTC", v.escape_debug()))?;
                since = Some(s);
            }
            _ => return Err(format!("unexpected `{}` after the state", w.escape_debug())),
        }
    }
    if since.is_some() && drain.is_none() {
        return Err("since= dates a drain's timeout: give timeout= with it".into());
    }
    Ok((state, drain, since))
}

fn parse_map(text: &str) -> std::result::Result<Vec<(u32, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (p, n) =
                e.split_once('=').ok_or_else(|| format!("entry `{}` is not <partition>=<node>", e.escape_debug()))?;
            let p = parse_digits::<u32>(p.trim())
                .ok_or_else(|| format!("partition `{}` is not a number", p.escape_debug()))?;
            Ok((p, n.trim().to_string()))
        })
        .collect()
}
