//! SplitMix64: deterministic inputs for the benches and examples without an
//! RNG dependency. Included by path (`#[path = "../support/splitmix.rs"]`).

/// The generator's state.
pub struct Mix(pub u64);

impl Mix {
    /// The next 64-bit value.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
