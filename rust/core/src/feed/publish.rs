//! Operator calls through the feed: with `topology.feed` set, a plain
//! operator call (`set_node_state`, `set_node_weight`, `add_node`,
//! `remove_node`) is written to etcd as a record, so every subscribed
//! process gets it, and is applied here at once at the revision etcd gave
//! it (this process reads its own write; the watch later brings it again,
//! counted stale). When etcd does not take the write, the call fails with
//! [`Error::FeedUnavailable`] and nothing changes anywhere: an operator's
//! change that reached one process only is what the feed exists to prevent.

use super::etcd::{EtcdClient, IfModRevision};
use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// Where a cluster's operator calls are written.
#[derive(Debug)]
pub(crate) struct Publisher {
    pub client: EtcdClient,
    pub prefix: String,
}

impl Cluster {
    /// The topology feed this cluster subscribes to (`topology.feed`), if any.
    pub fn feed_url(&self) -> Option<&super::FeedUrl> {
        self.inner.config.feed.url.as_ref()
    }

    /// Writes `key` (relative to the prefix; `None`: delete it) and applies
    /// it here at the write's revision. `None` without a feed.
    pub(crate) fn publish(&self, key: &str, value: Option<&str>) -> Option<Result<u64>> {
        let p = self.inner.feed.get()?.publisher();
        let full = format!("{}{key}", p.prefix);
        let unavailable = |e: super::etcd::EtcdError| Error::FeedUnavailable(e.to_string());
        let written = match (value, member_of(key)) {
            (Some(v), Some(name)) => self.put_while_member(p, name, key, &full, v),
            (Some(v), None) => p.client.put(&full, v, 0).map_err(unavailable),
            (None, _) => p.client.delete(&full).map(|(rev, _)| rev).map_err(unavailable),
        };
        Some(written.and_then(|rev| self.apply_feed_record(rev, key, value).map(|_| rev)))
    }

    /// Writes a record about node `name` (its membership record
    /// `node/<NAME>`: an addition or a removal; or its `state` or `weight`)
    /// only while etcd's membership record is the one this process's check
    /// read: one transaction comparing `node/<NAME>`'s `mod_revision` with
    /// the version of this process's membership input (0: no record, a
    /// configured node). Between the check and the write another process
    /// may remove the node or add it; the record would then be refused by
    /// every subscriber, this one included, so it is not written. A record
    /// that merely moved on (re-put: still a member) is compared again at
    /// its new revision. An addition after a removal is compared with the
    /// removal's record.
    fn put_while_member(&self, p: &Publisher, name: &str, key: &str, full: &str, value: &str) -> Result<u64> {
        let adding = key.split('/').count() == 2 && !super::is_removal(value);
        let guard = format!("{}node/{name}", p.prefix);
        // An addition is guarded by the removal it follows, or by no record
        // at all; never by a record that adds the node: the caller found no
        // such node, so a present record read now arrived since (another
        // process added it), and comparing with it would overwrite that
        // addition. 0 then fails the compare: a duplicate.
        let mut expected =
            if adding { self.member_removal_version(name) } else { self.member_version(name) }.unwrap_or(0);
        let gone = || {
            Error::UnknownNode(format!(
                "{name}: removed through the topology feed since this process read it; nothing written"
            ))
        };
        // Each retry follows a write by another process; a few in a row
        // mean the record is being rewritten faster than it can be read.
        for _ in 0..4 {
            match p.client.put_if_mod_revision(&guard, expected, full, value) {
                Ok(IfModRevision::Written(rev)) => return Ok(rev),
                Ok(IfModRevision::Moved(Some(kv))) if kv.value.as_deref().is_some_and(super::is_removal) => {
                    if !adding {
                        return Err(gone());
                    }
                    expected = kv.mod_revision;
                }
                Ok(IfModRevision::Moved(Some(_))) if adding => return Err(Error::DuplicateNode(name.to_string())),
                Ok(IfModRevision::Moved(Some(kv))) => expected = kv.mod_revision,
                Ok(IfModRevision::Moved(None)) if adding => expected = 0,
                Ok(IfModRevision::Moved(None)) => return Err(gone()),
                Err(e) => return Err(Error::FeedUnavailable(e.to_string())),
            }
        }
        Err(Error::FeedUnavailable(format!("`node/{name}` kept changing in etcd; nothing written")))
    }
}

/// The node a record's validity depends on: `node/<NAME>`,
/// `node/<NAME>/state`, `node/<NAME>/weight`.
fn member_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("node/")?;
    let name = rest.split('/').next()?;
    (!name.is_empty()).then_some(name)
}

impl Cluster {
    /// Relays one FAN or RLB line into the topology feed (an ONS relay: the
    /// one process that receives Oracle's events hands them to the whole
    /// fleet) and applies it here at the record's revision, which replaces
    /// the line's `timestamp=` as its version. The record's key keeps the
    /// latest event per resource ([`fan_record_id`]).
    ///
    /// # Errors
    /// What applying the line here would refuse, before anything is
    /// written: its parse errors ([`Error::EventParse`]), a foreign database
    /// or service ([`Error::ForeignEvent`]), an instance or host this
    /// cluster does not have ([`Error::UnknownNode`]; a record every
    /// subscriber would refuse alike); [`Error::FeedUnavailable`] without
    /// `topology.feed` or when etcd does not take the write.
    pub fn publish_event(&self, line: &str) -> Result<u64> {
        let event = crate::event::parse_event(line)?;
        self.check_event(&event)?;
        let key = format!("fan/{}", fan_record_id(&event));
        match self.publish(&key, Some(line)) {
            Some(r) => r,
            None => Err(Error::FeedUnavailable("this cluster has no topology.feed to publish to".into())),
        }
    }
}

/// The id of a FAN or RLB line's feed record (`fan/<id>`): one record per
/// resource, so the latest event about each survives a compaction and a
/// full re-read: `servicemember-<SERVICE>.<INSTANCE>`, `instance-<INSTANCE>`,
/// `node-<HOST>`, `service-<SERVICE>`, `database-<DATABASE>`,
/// `rlb-<SERVICE>` (upper-cased; `ALL` for a missing name). Every publisher
/// (`Cluster::publish_event`, the operator tool) keys records this way.
pub fn fan_record_id(event: &crate::event::Event) -> String {
    use crate::event::{Event, FanEventType};
    let up = |v: Option<&str>| v.unwrap_or("all").to_ascii_uppercase();
    match event {
        Event::Fan(ev) => {
            let resource = match ev.event_type {
                FanEventType::ServiceMember | FanEventType::SrvPreconnect => match &ev.service {
                    Some(svc) => format!("{}.{}", svc.to_ascii_uppercase(), up(ev.instance.as_deref())),
                    None => up(ev.instance.as_deref()),
                },
                FanEventType::Instance => up(ev.instance.as_deref()),
                FanEventType::Node => up(ev.host.as_deref()),
                FanEventType::Service => up(ev.service.as_deref()),
                FanEventType::Database => up(ev.database.as_deref()),
            };
            format!("{}-{resource}", ev.event_type.as_str())
        }
        Event::Rlb(adv) => format!("rlb-{}", up(adv.service.as_deref())),
    }
}
