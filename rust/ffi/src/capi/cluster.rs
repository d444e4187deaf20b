//! Cluster lifecycle, nodes and settings.

use std::os::raw::c_char;

use racaffinity_core::Cluster;

use super::buffer::{out_arg, str_arg, write_opt};
use super::call::cluster_text;
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};
use super::types::{node_id, node_state_arg, racaffinity_node_state, racaffinity_recovery_scope, scope_arg};
use crate::ops;

/// The version of the header, for a compile-time check; at run time
/// `racaffinity_version()` gives the library's. Major, minor and patch follow
/// semantic versioning (docs/c.md, "Versions and ABI").
pub const RACAFFINITY_VERSION_MAJOR: u32 = 0;
/// See `RACAFFINITY_VERSION_MAJOR`.
pub const RACAFFINITY_VERSION_MINOR: u32 = 2;
/// See `RACAFFINITY_VERSION_MAJOR`.
pub const RACAFFINITY_VERSION_PATCH: u32 = 0;

// The header's numbers are literals (cbindgen cannot evaluate env!); the build
// fails when they drift from the workspace version in Cargo.toml, the one
// source (tools/version.py rewrites them). The string macro
// RACAFFINITY_VERSION comes from rust/ffi/cbindgen.toml (cbindgen drops &str
// constants), checked by tools/version.py.
const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}
const _: () = assert!(RACAFFINITY_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")));
const _: () = assert!(RACAFFINITY_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")));
const _: () = assert!(RACAFFINITY_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")));

/// The library version as a static NUL-terminated string. Never fails.
/// Compare it with `RACAFFINITY_VERSION` to tell which library was loaded.
#[no_mangle]
pub extern "C" fn racaffinity_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Builds a cluster from config text (the format in the README) and writes
/// its handle to `*out`. Free it with `racaffinity_cluster_free`.
///
/// # Safety
/// `config` must be NULL or a NUL-terminated string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_new(
    config: *const c_char,
    out: *mut *mut racaffinity_cluster,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, text) = unsafe { (out_arg(out, "out")?, str_arg(config, "config")?) };
        out.set(handle::insert(Cluster::from_config_text(text)?)?)
    })
}

/// Frees a cluster. NULL is accepted (OK); a stale or already freed handle
/// returns INVALID_HANDLE and changes nothing.
#[no_mangle]
pub extern "C" fn racaffinity_cluster_free(cluster: *mut racaffinity_cluster) -> racaffinity_result {
    guard(|| if cluster.is_null() { Ok(()) } else { handle::remove(cluster) })
}

/// Number of live nodes.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_node_count(
    cluster: *const racaffinity_cluster,
    out: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.node_ids().len() as u32))
    })
}

/// The heartbeat settings hosts schedule their probes by
/// (`heartbeat.interval` in milliseconds, `heartbeat.misses`).
///
/// # Safety
/// `out_interval_ms` and `out_misses` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_heartbeat(
    cluster: *const racaffinity_cluster,
    out_interval_ms: *mut u64,
    out_misses: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (interval, misses) =
            unsafe { (out_arg(out_interval_ms, "out_interval_ms")?, out_arg(out_misses, "out_misses")?) };
        handle::with(cluster, |c| {
            interval.set(c.heartbeat_interval_ms())?;
            misses.set(c.config().health.heartbeat_misses)
        })
    })
}

/// Whether the nodes are independent databases or instances of one
/// (`recovery.scope`): a host's recovery scan follows it.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_cluster_recovery_scope(
    cluster: *const racaffinity_cluster,
    out: *mut racaffinity_recovery_scope,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(c.recovery_scope().into()))
    })
}

/// Switches a scope (`racaffinity_scope`) between strict and soft at runtime.
#[no_mangle]
pub extern "C" fn racaffinity_cluster_set_strict(
    cluster: *const racaffinity_cluster,
    scope: u32,
    strict: bool,
) -> racaffinity_result {
    guard(|| {
        let scope = scope_arg(scope)?;
        handle::with(cluster, |c| {
            c.set_strict(scope, strict);
            Ok(())
        })
    })
}

/// Adds a node at runtime. `address` may be NULL; `weight` 0 means 1.
/// Writes the new node id to `*out_node` (may be NULL).
///
/// # Safety
/// `name` and non-NULL `address` must be NUL-terminated; `out_node` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_add(
    cluster: *const racaffinity_cluster,
    name: *const c_char,
    address: *const c_char,
    weight: u32,
    out_node: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let name = unsafe { str_arg(name, "name") }?;
        let address = if address.is_null() {
            None
        } else {
            // SAFETY: non-NULL and NUL-terminated per the contract.
            Some(unsafe { str_arg(address, "address") }?)
        };
        let id = handle::with(cluster, |c| ops::add_node(c, name, address, weight))?;
        // SAFETY: `out_node` is NULL or writable per the contract.
        unsafe { write_opt(out_node, id.0) };
        Ok(())
    })
}

/// Removes a node; affinities to it break as if it were down.
///
/// # Safety
/// `name` must be NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_remove(
    cluster: *const racaffinity_cluster,
    name: *const c_char,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let name = unsafe { str_arg(name, "name") }?;
        handle::with(cluster, |c| c.remove_node(name).map(|_| ()).map_err(Into::into))
    })
}

/// Sets a node's state (`racaffinity_node_state`) as an operator would.
///
/// # Safety
/// `name` must be NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_set_state(
    cluster: *const racaffinity_cluster,
    name: *const c_char,
    state: u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let name = unsafe { str_arg(name, "name") }?;
        let state = node_state_arg(state)?;
        handle::with(cluster, |c| c.set_node_state(name, state).map(|_| ()).map_err(Into::into))
    })
}

/// Reads a node's current state.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_get_state(
    cluster: *const racaffinity_cluster,
    node: u32,
    out: *mut racaffinity_node_state,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(ops::node_state(c, node_id(node))?.into()))
    })
}

/// Whether a node is Down at the end of a planned drain (its deadline
/// passed, or the operator's Down came while it drained; or it was removed
/// while it drained): a pool lets the connections in use on it finish their
/// requests. `false` while it is Up or Draining, and for a Down by a failure
/// (FAN failure, missed heartbeats, ejection, the operator's Down of a node
/// taking work), after which a pool aborts them. Ask the core rather than
/// infer it from states seen: a pool polling states may never see the
/// node Draining.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_down_is_planned(
    cluster: *const racaffinity_cluster,
    node: u32,
    out: *mut bool,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out, "out") }?;
        handle::with(cluster, |c| out.set(ops::node_down_is_planned(c, node_id(node))?))
    })
}

/// Looks a node up by name (case-insensitive).
///
/// # Safety
/// `name` must be NULL or NUL-terminated; `out_node` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_find(
    cluster: *const racaffinity_cluster,
    name: *const c_char,
    out_node: *mut u32,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let (out, name) = unsafe { (out_arg(out_node, "out_node")?, str_arg(name, "name")?) };
        out.set(handle::with(cluster, |c| Ok(c.node_by_name(name)?.id()))?.0)
    })
}

/// Writes a node's name into `buf` (NUL-terminated); `*out_len` gets the size
/// needed including the NUL.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_name(
    cluster: *const racaffinity_cluster,
    node: u32,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { cluster_text(cluster, buf, cap, out_len, |c| ops::node_name(c, node_id(node))) }
}

/// Writes a node's configured `host:port` into `buf` (NUL-terminated); an
/// empty string when the node has no address.
///
/// # Safety
/// `buf` must be NULL or valid for `cap` bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn racaffinity_node_address(
    cluster: *const racaffinity_cluster,
    node: u32,
    buf: *mut c_char,
    cap: usize,
    out_len: *mut usize,
) -> racaffinity_result {
    // SAFETY: per this function's contract.
    unsafe { cluster_text(cluster, buf, cap, out_len, |c| ops::node_address(c, node_id(node))) }
}
