//! State identities: a fast 128-bit streaming hash, and hash maps keyed by such digests.
//!
//! The search keys its visited set, its crash images and its process cache by 128-bit digests
//! of canonical serializations. The hash is not cryptographic; a collision could only merge two
//! states, and at these sizes its probability is negligible (see [`Hash128`]).

use std::hash::{Hash, Hasher};

/// A fast 128-bit streaming hash for state identities: two lanes, each word mixed with the
/// splitmix64 finalizer. Not cryptographic; collisions only merge states, and at the sizes
/// explored here (≤ 10⁷ states) their probability is below 10⁻²⁴.
#[derive(Clone, Copy)]
pub struct Hash128 {
    a: u64,
    b: u64,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Default for Hash128 {
    fn default() -> Self {
        Hash128 {
            a: 0x243f_6a88_85a3_08d3,
            b: 0x1319_8a2e_0370_7344,
        }
    }
}

impl Hash128 {
    /// The 128-bit result.
    pub fn finish128(&self) -> u128 {
        (u128::from(mix(self.a ^ 0x9e37_79b9_7f4a_7c15)) << 64) | u128::from(mix(self.b))
    }
}

impl Hasher for Hash128 {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.write_u64(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        self.write_u64(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
    }
    fn write_u64(&mut self, x: u64) {
        self.a = mix(self.a ^ x).rotate_left(17);
        self.b = mix(self.b.wrapping_add(x) ^ 0x6a09_e667_f3bc_c909).rotate_left(29);
    }
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x) | 0x100);
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x) | 0x1_0000_0000);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

/// A digest of anything hashable.
pub fn digest<T: Hash + ?Sized>(value: &T) -> u128 {
    let mut hasher = Hash128::default();
    value.hash(&mut hasher);
    hasher.finish128()
}

/// Hash maps keyed by digests: the key is already a hash, so use it as is.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, x: u128) {
        self.0 ^= (x as u64) ^ ((x >> 64) as u64);
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = mix(self.0 ^ x);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `BuildHasher` for [`KeyHasher`].
pub type KeyBuild = std::hash::BuildHasherDefault<KeyHasher>;
