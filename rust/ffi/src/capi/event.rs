//! Failover inputs: FAN/RLB lines, probes and outcomes.

use std::os::raw::c_char;

use super::buffer::{str_arg, write_opt};
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};
use super::types::node_id;

/// Applies one FAN event or RLB advisory line. Malformed text, an unknown
/// instance or a foreign database/service is an error and changes nothing.
/// `*out_changes` (may be NULL) gets the number of node state changes.
///
/// # Safety
/// `line` must be NULL or NUL-terminated; `out_changes` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_event_apply(
    cluster: *const racaffinity_cluster,
    line: *const c_char,
    out_changes: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let line = unsafe { str_arg(line, "line") }?;
        let effect = handle::with(cluster, |c| Ok(c.apply_event(line)?))?;
        // SAFETY: `out_changes` is NULL or writable per the contract.
        unsafe { write_opt(out_changes, effect.changes.len() as u32) };
        Ok(())
    })
}

/// Applies one record of a fleet feed (docs/operations.md, "Feed records"):
/// `key` relative to the feed's prefix (`node/<NAME>/state`, ...), `value`
/// the record's value or NULL when the key was deleted, `version` its
/// fleet-wide order (the log's revision). The versioned path every binding
/// has for shared operator inputs: records applied in any order end alike.
/// `*out_applied` (may be NULL) is false when an input with a higher
/// version was already in (nothing changed). A record of no known form is
/// `INVALID_ARGUMENT`, one about an unknown node `UNKNOWN_NODE`; a refused
/// record changes nothing.
///
/// # Safety
/// `key` must be NULL or NUL-terminated; `value` NULL or NUL-terminated;
/// `out_applied` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_feed_record_apply(
    cluster: *const racaffinity_cluster,
    version: u64,
    key: *const c_char,
    value: *const c_char,
    out_applied: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let key = unsafe { str_arg(key, "key") }?;
        // SAFETY: per this function's contract; NULL is a deletion.
        let value = if value.is_null() { None } else { Some(unsafe { str_arg(value, "value") }?) };
        let outcome = handle::with(cluster, |c| Ok(c.apply_feed_record(version, key, value)?))?;
        // SAFETY: `out_applied` is NULL or writable per the contract.
        unsafe { write_opt(out_applied, outcome == racaffinity_core::FeedOutcome::Applied) };
        Ok(())
    })
}

/// Relays one FAN or RLB line into the cluster's topology feed
/// (`topology.feed`): an ONS relay, so every subscribed process of the fleet
/// gets the event. Applied here too, at the record's revision (written to
/// `*out_revision`, may be NULL). A malformed or foreign line, or one about
/// an instance or host the cluster does not have, is refused before anything
/// is written (`EVENT_PARSE`, `FOREIGN_EVENT`, `UNKNOWN_NODE`); no feed, or
/// etcd not taking the write, is `FEED_UNAVAILABLE`.
///
/// # Safety
/// `line` must be NULL or NUL-terminated; `out_revision` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_feed_event_publish(
    cluster: *const racaffinity_cluster,
    line: *const c_char,
    out_revision: *mut u64,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let line = unsafe { str_arg(line, "line") }?;
        let revision = handle::with(cluster, |c| Ok(c.publish_event(line)?))?;
        // SAFETY: `out_revision` is NULL or writable per the contract.
        unsafe { write_opt(out_revision, revision) };
        Ok(())
    })
}

/// Reports a heartbeat probe of `node` (`ok` = it answered). A removed
/// node's id is `OK` and changes nothing: a probe begun before the removal
/// and reported after it is a normal race. `UNKNOWN_NODE` for an id the
/// cluster never had.
#[no_mangle]
pub extern "C" fn racaffinity_probe_report(
    cluster: *const racaffinity_cluster,
    node: u32,
    ok: bool,
) -> racaffinity_result {
    guard(|| handle::with(cluster, |c| c.report_probe(node_id(node), ok).map(|_| ()).map_err(Into::into)))
}

/// Reports a node-level success or failure outside a lease. As
/// `racaffinity_probe_report`: a removed node's id is `OK` and changes
/// nothing, an id the cluster never had is `UNKNOWN_NODE`.
#[no_mangle]
pub extern "C" fn racaffinity_outcome_report(
    cluster: *const racaffinity_cluster,
    node: u32,
    ok: bool,
) -> racaffinity_result {
    guard(|| handle::with(cluster, |c| c.report_outcome(node_id(node), ok).map(|_| ()).map_err(Into::into)))
}
