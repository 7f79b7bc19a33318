//! Identifiers. A seeded source makes a world replay identically: the same seed and the same
//! commands give the same sandbox ids, Pod uids and job ids.

/// Where new identifiers come from.
pub trait IdSource: Send {
    /// 64 fresh random bits.
    fn next_u64(&mut self) -> u64;

    /// A sandbox id: 16 lowercase hex digits.
    fn sandbox_id(&mut self) -> String {
        format!("{:016x}", self.next_u64())
    }

    /// A Kubernetes uid in the 8-4-4-4-12 hex form.
    fn uid(&mut self) -> String {
        let high = self.next_u64();
        let low = self.next_u64();
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xffff,
            low >> 48,
            low & 0xffff_ffff_ffff
        )
    }

    /// A short lowercase suffix for generated names (`-x7k2p`).
    fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut bits = self.next_u64();
        (0..5)
            .map(|_| {
                let index = (bits % ALPHABET.len() as u64) as usize;
                bits /= ALPHABET.len() as u64;
                ALPHABET[index] as char
            })
            .collect()
    }
}

/// SplitMix64: tiny, fast and good enough for identifiers.
#[derive(Debug, Clone)]
pub struct SeededIds {
    state: u64,
}

impl SeededIds {
    /// A source that yields the same sequence for the same seed.
    pub fn new(seed: u64) -> SeededIds {
        SeededIds { state: seed }
    }
}

impl IdSource for SeededIds {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_ids() {
        let (mut a, mut b) = (SeededIds::new(7), SeededIds::new(7));
        assert_eq!(a.sandbox_id(), b.sandbox_id());
        assert_eq!(a.uid(), b.uid());
        assert_ne!(SeededIds::new(8).sandbox_id(), SeededIds::new(7).sandbox_id());
        assert_eq!(a.uid().len(), 36);
    }
}
