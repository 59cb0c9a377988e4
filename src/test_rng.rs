//! A small deterministic generator for the unit tests (xorshift64*), so that a
//! failing seed reproduces. Compiled for tests only.

/// xorshift64*: seeded, never zero after a non-zero seed; a zero seed (which
/// xorshift would keep at zero for ever: the driver's stress test made one of
/// `seed ^ 1` with seed 1) starts from a fixed non-zero state instead.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next 64 bits.
    pub(crate) fn next(&mut self) -> u64 {
        if self.0 == 0 {
            self.0 = 0x9E37_79B9_7F4A_7C15;
        }
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_zero_seed_does_not_stick_at_zero() {
        let mut rng = Rng(0);
        let draws: Vec<usize> = (0..64).map(|_| rng.below(16)).collect();
        assert!(draws.iter().any(|&d| d != 0), "{draws:?}");
    }
}
