//! What the library's and the workspace's tests share (not an API: hidden
//! from the docs, no stability promised).

/// A fixed-seed xorshift64 sequence (shifts 13, 7, 17): junk bytes that are
/// the same at every run, for decoders fed garbage.
#[derive(Debug, Clone)]
pub struct Junk(pub u64);

impl Junk {
    /// The next state (also what [`Junk::bytes`] takes its bytes from).
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// `n` bytes: the low byte of each of the next `n` states.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Junk;

    /// The sequence the tests were written against (xorshift64 13/7/17
    /// from the seed), typed in.
    #[test]
    fn junk_is_xorshift64() {
        let mut g = Junk(1);
        assert_eq!(g.next_u64(), 0x4082_2041);
        assert_eq!(g.bytes(2), [0x41, 0x29]);
    }
}
