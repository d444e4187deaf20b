//! Test-only exports (cargo feature `testing`).

use std::hint::black_box;

use super::buffer::out_arg;
use super::handle::{self, racaffinity_cluster};
use super::result::{guard, racaffinity_result};

/// Panics inside the boundary, to prove the panic becomes a result code.
#[no_mangle]
pub extern "C" fn racaffinity_test_panic() -> racaffinity_result {
    guard(|| panic!("racaffinity_test_panic was called"))
}

/// Runs `n` routes as a Rust caller of the core would, inside this library,
/// so the C bench can time the C ABI against the same Rust loop in the same
/// process (a ratio across two processes moved by 25 ns on this machine).
///
/// `kind`: 0 byte keys (`route_key`), 1 integer keys (`route_key_i64`),
/// 2 the calling thread's pinned route (`pick`). Keys cycle through `nkeys`
/// (a power of two) entries: byte key `i` is `lens[i]` bytes at
/// `keys + i * stride`. The sum of the routed node ids goes to `out_sum`.
///
/// # Safety
/// The key arrays must be valid for `nkeys` entries (NULL for kind 2).
#[no_mangle]
pub unsafe extern "C" fn racaffinity_test_route_loop(
    cluster: *const racaffinity_cluster,
    kind: u32,
    keys: *const u8,
    stride: usize,
    lens: *const usize,
    ints: *const i64,
    nkeys: usize,
    n: u64,
    out_sum: *mut u64,
) -> racaffinity_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let out = unsafe { out_arg(out_sum, "out_sum") }?;
        let mask = nkeys.saturating_sub(1);
        // SAFETY: per this function's contract, each array holds `nkeys` entries.
        let (lens, ints) = unsafe {
            match kind {
                0 => (std::slice::from_raw_parts(lens, nkeys), &[][..]),
                1 => (&[][..], std::slice::from_raw_parts(ints, nkeys)),
                _ => (&[][..], &[][..]),
            }
        };
        handle::with(cluster, |c| {
            let mut acc = 0u64;
            for i in 0..n {
                let k = (i as usize) & mask;
                let r = match kind {
                    0 => {
                        // SAFETY: entry `k` is `lens[k]` bytes at `keys + k * stride`.
                        let key = unsafe { std::slice::from_raw_parts(keys.add(k * stride), lens[k]) };
                        c.route_key(black_box(key))?
                    }
                    1 => c.route_key_i64(black_box(ints[k]))?,
                    _ => c.pick()?,
                };
                acc = acc.wrapping_add(u64::from(r.node.0));
            }
            out.set(acc)
        })
    })
}

/// Resolves `cluster` and returns, doing nothing with it: what every C ABI
/// call on a cluster pays over a no-op crossing (`racaffinity_version`). The
/// C bench times it as the floor of "C − Rust".
#[no_mangle]
pub extern "C" fn racaffinity_test_cluster_touch(cluster: *const racaffinity_cluster) -> racaffinity_result {
    guard(|| {
        handle::with(cluster, |c| {
            black_box(c);
            Ok(())
        })
    })
}
