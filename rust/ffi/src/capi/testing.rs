//! Test-only exports (cargo feature `testing`).

use super::result::{guard, racaffinity_result};

/// Panics inside the boundary, to prove the panic becomes a result code.
#[no_mangle]
pub extern "C" fn racaffinity_test_panic() -> racaffinity_result {
    guard(|| panic!("racaffinity_test_panic was called"))
}
