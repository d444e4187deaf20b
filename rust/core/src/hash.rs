//! The versioned hash behind rendezvous (highest-random-weight) routing.
//!
//! Different processes, machines and language bindings must place the same key
//! on the same node with no shared state, so the function is fixed, seedless and
//! documented here (and in the README) well enough to re-implement:
//!
//! **racaffinity-hrw-v2**
//! 1. `h(bytes)` = FNV-1a 64 over the bytes (offset `0xcbf29ce484222325`,
//!    prime `0x100000001b3`), then the `fmix64` finaliser of MurmurHash3.
//! 2. A node's seed is `h(node name in ASCII upper case)`: names match
//!    case-insensitively, so `rac1` in one process and `RAC1` in another
//!    must place alike (v1 hashed names as spelled). A key's hash is `h(key bytes)`;
//!    an `i64` key is hashed as its 8 little-endian bytes.
//! 3. `score(node, key)` = `fmix64(key_hash ^ node_seed)`.
//! 4. With equal weights the node with the highest score wins; ties go to the
//!    lower upper-cased node name (bytewise). With unequal weights each score is mapped to
//!    `u = ((score >> 12) + 0.5) / 2^52`, which is exact in binary64 and
//!    strictly inside (0,1), and the winner maximises `weight / -ln(u)`
//!    (weighted rendezvous, Schindelhauer & Schomaker); ties again go to the
//!    lower upper-cased name. A node of weight 0 wins only when every eligible node has
//!    weight 0, and then by the equal-weight rule.
//! 5. A partition number `p` is routed as the key `p` as `i64` little-endian.
//! 6. Which weights: every rendezvous placement (transactions, partitions,
//!    stateless sessions) uses the static `node.<N>.weight` and node states
//!    only, never RLB advice, which reaches each process at its own time.
//!
//! Changing any of this changes placements and must bump the version.

/// Name of the hash scheme, reported in metrics so mismatched peers are visible.
pub const HASH_VERSION: &str = "racaffinity-hrw-v2";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// MurmurHash3's 64-bit finaliser: FNV alone mixes short keys poorly.
#[inline]
pub const fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// `h(bytes)` of racaffinity-hrw-v2.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    fmix64(h)
}

/// A node's seed: `h` of its name in ASCII upper case (step 2).
#[inline]
pub fn node_seed(name: &str) -> u64 {
    hash_bytes(name.to_ascii_uppercase().as_bytes())
}

/// Hash of an integer key (its little-endian bytes).
#[inline]
pub fn hash_i64(key: i64) -> u64 {
    hash_bytes(&key.to_le_bytes())
}

/// Rendezvous score of a key hash against a node seed.
#[inline]
pub fn score(key_hash: u64, node_seed: u64) -> u64 {
    fmix64(key_hash ^ node_seed)
}

/// Weighted score: larger wins. Only used when weights differ.
#[inline]
pub fn weighted_score(score: u64, weight: f64) -> f64 {
    // 52 bits + 0.5 is exact in binary64, so u never rounds up to 1.0 (where
    // -ln(u) = 0 would make the highest score rank last).
    let u = ((score >> 12) as f64 + 0.5) / (1u64 << 52) as f64;
    weight / -u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers_pin_the_v1_function() {
        // Pinned so a refactor cannot silently move every key in production.
        assert_eq!(hash_bytes(b""), fmix64(FNV_OFFSET));
        assert_eq!(hash_bytes(b"a"), fmix64(0xaf63_dc4c_8601_ec8c));
        assert_eq!(hash_i64(1), hash_bytes(&[1, 0, 0, 0, 0, 0, 0, 0]));
    }

    #[test]
    fn weighted_score_is_monotone_in_score_and_weight() {
        let lo = weighted_score(1 << 20, 1.0);
        let hi = weighted_score(u64::MAX - 5, 1.0);
        assert!(hi > lo);
        assert!(weighted_score(1 << 40, 2.0) > weighted_score(1 << 40, 1.0));
        assert!(weighted_score(u64::MAX, 1.0).is_finite() && weighted_score(u64::MAX, 1.0) > hi / 2.0);
        assert!(weighted_score(0, 1.0) > 0.0);
    }
}
