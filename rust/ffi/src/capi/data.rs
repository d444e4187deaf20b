//! Data (sharding key) affinity.

use super::buffer::{bytes_arg, out_arg};
use super::call::span_route;
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};
use super::types::racaffinity_route;

/// Routes a byte key (1..=1024 bytes) to its partition's node.
///
/// # Safety
/// `key` must be valid for `len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_key_route(
    cluster: *const racaffinity_cluster,
    key: *const u8,
    len: usize,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { span_route(cluster, key, len, "key", out, |c, k| c.route_key(k)) }
}

/// Routes an integer key to its partition's node.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_key_route_i64(
    cluster: *const racaffinity_cluster,
    key: i64,
    out: *mut racaffinity_route,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.route_key_i64(key)?.into()))
    })
}

/// The node that owns `partition` (explicit map, placement or rendezvous),
/// whatever its state.
///
/// # Safety
/// `out_node` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_partition_owner(
    cluster: *const racaffinity_cluster,
    partition: u32,
    out_node: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out_node, "out_node") }?;
        handle::with(cluster, |c| out.set(c.partition_owner(partition)?.0))
    })
}

/// The partition a byte key falls in.
///
/// # Safety
/// `key` must be valid for `len` bytes; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_key_partition(
    cluster: *const racaffinity_cluster,
    key: *const u8,
    len: usize,
    out: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, k) = unsafe { (out_arg(out, "out")?, bytes_arg(key, len, "key")?) };
        handle::with(cluster, |c| out.set(c.partition_of(racaffinity_core::DataKey::Bytes(k))?))
    })
}
