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

/// Reports a heartbeat probe of `node` (`ok` = it answered).
#[no_mangle]
pub extern "C" fn racaffinity_probe_report(
    cluster: *const racaffinity_cluster,
    node: u32,
    ok: bool,
) -> racaffinity_result {
    guard(|| handle::with(cluster, |c| c.report_probe(node_id(node), ok).map(|_| ()).map_err(Into::into)))
}

/// Reports a node-level success or failure outside a lease.
#[no_mangle]
pub extern "C" fn racaffinity_outcome_report(
    cluster: *const racaffinity_cluster,
    node: u32,
    ok: bool,
) -> racaffinity_result {
    guard(|| handle::with(cluster, |c| c.report_outcome(node_id(node), ok).map(|_| ()).map_err(Into::into)))
}
