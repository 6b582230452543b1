//! The randomness keel needs (jitter, the balancer's picks, unique names), without an RNG
//! crate: std's per-hasher random keys, and splitmix64 for a number fixed by a seed.

use std::hash::{BuildHasher, Hasher};

/// A random `u64`, different on each call: std's per-hasher random keys.
pub(crate) fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

/// `r` as a number in [0, 1).
pub(crate) fn unit(r: u64) -> f64 {
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// A number in [0, 1), different on each call.
pub(crate) fn unit_random() -> f64 {
    unit(random())
}

/// A number in [0, 1) fixed by `seed` (splitmix64): the same seed, the same number.
pub(crate) fn unit_from(seed: u64) -> f64 {
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    unit(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_in_range_and_seeded_ones_repeat() {
        for seed in 0..1000 {
            let u = unit_from(seed);
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u, unit_from(seed));
            assert!((0.0..1.0).contains(&unit_random()));
        }
        assert_ne!(unit_from(1), unit_from(2));
        assert!(unit(u64::MAX) < 1.0);
    }
}
