//! Seed 002 (UCP) parity: affinity contexts that follow a scope's rules, and
//! the partition map replaced as a whole.

use std::os::raw::c_char;

use super::buffer::{out_arg, str_arg};
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result, Failure};
use super::types::{racaffinity_route, scope_arg};

/// Pins (or deepens the pin of) context `context` by the rules of `scope`
/// (`racaffinity_scope`): UCP's connection affinity context.
/// `RACAFFINITY_SCOPE_TRANSACTION` obeys `transaction.strict`;
/// `RACAFFINITY_SCOPE_SESSION` obeys `session.strict`, prefers instances
/// advising affinity and is released by an `aff=FALSE` advisory;
/// `RACAFFINITY_SCOPE_THREAD` is `racaffinity_context_pin`; DATA is
/// INVALID_ARGUMENT. Route later work with `racaffinity_context_pick`.
///
/// # Safety
/// `out` must be NULL or writable (NULL is allowed).
#[no_mangle]
pub unsafe extern "C" fn racaffinity_context_pin_for(
    cluster: *const racaffinity_cluster,
    context: u64,
    scope: u32,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        let scope = scope_arg(scope)?;
        handle::with(cluster, |c| {
            let r = c.pin_context_for(racaffinity_core::ContextKey(context), scope)?;
            if !out.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { out.write(r.into()) };
            }
            Ok(())
        })
    })
}

/// Records that the host's partition-map loader `source` failed with
/// `error` (free text, e.g. the failed query's message): the map in force
/// stays, and the metrics count the failure and keep the last message
/// (`partition_map.load_failures` / `last_error`). INVALID_ARGUMENT for a
/// source `racaffinity_partition_map_replace` would refuse.
///
/// # Safety
/// `source` and `error` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_partition_map_load_failed(
    cluster: *const racaffinity_cluster,
    source: *const c_char,
    error: *const c_char,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (source, error) = unsafe { (str_arg(source, "source")?, str_arg(error, "error")?) };
        handle::with(cluster, |c| Ok(c.partition_map_load_failed(source, error)?))
    })
}

/// Replaces the whole explicit partition → node map in one step: entry `i`
/// maps `partitions[i]` to the node named `nodes[i]`. Routes see the old map
/// or the new one, never a mix; partitions left out fall back to placement.
/// Any bad entry (partition out of range or given twice, unknown node,
/// invalid UTF-8) changes nothing. `source` (1–64 bytes of letters, digits
/// and `_-.:/`) names who produced the map in the metrics. Writes the map's
/// new epoch to `*out_epoch`.
///
/// # Safety
/// `partitions` and `nodes` must each be valid for `len` elements (either
/// may be NULL when `len` is 0); every `nodes[i]` NULL or NUL-terminated;
/// `source` NULL or NUL-terminated; `out_epoch` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_partition_map_replace(
    cluster: *const racaffinity_cluster,
    partitions: *const u32,
    nodes: *const *const c_char,
    len: usize,
    source: *const c_char,
    out_epoch: *mut u64,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, source) = unsafe { (out_arg(out_epoch, "out_epoch")?, str_arg(source, "source")?) };
        crate::ops::partition_map_len(len)?;
        if len > 0 && (partitions.is_null() || nodes.is_null()) {
            return Err(Failure::null(if partitions.is_null() { "partitions" } else { "nodes" }));
        }
        let mut map = Vec::with_capacity(len);
        for i in 0..len {
            // SAFETY: both arrays hold `len` elements per the contract.
            let (p, n) = unsafe { (*partitions.add(i), *nodes.add(i)) };
            // SAFETY: each name is NULL or NUL-terminated per the contract.
            // Named by its index: the caller finds the bad entry by it.
            map.push((p, unsafe { str_arg(n, &format!("nodes[{i}]")) }?));
        }
        handle::with(cluster, |c| out.set(c.replace_partition_map(&map, source)?))
    })
}
