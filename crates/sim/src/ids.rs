//! Identifiers. A seeded source makes a world replay identically: the same seed and the same
//! commands give the same sandbox ids, Pod uids and job ids.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// Where new identifiers come from. `Sync`, because the host lets many readers share the world
/// at once (only commands draw identifiers).
pub trait IdSource: Send + Sync {
    /// 64 fresh random bits.
    fn next_u64(&mut self) -> u64;

    /// A sandbox id: 16 lowercase hex digits.
    fn sandbox_id(&mut self) -> SharedStr {
        let mut id = [0u8; 16];
        write_hex(&mut id, self.next_u64());
        SharedStr::from_ascii(&id)
    }

    /// A Kubernetes uid in the 8-4-4-4-12 hex form.
    fn uid(&mut self) -> SharedStr {
        let high = self.next_u64();
        let low = self.next_u64();
        // Written on the stack and shared from there: one allocation, no growing.
        let mut uid = [b'-'; 36];
        write_hex(&mut uid[0..8], high >> 32);
        write_hex(&mut uid[9..13], (high >> 16) & 0xffff);
        write_hex(&mut uid[14..18], high & 0xffff);
        write_hex(&mut uid[19..23], low >> 48);
        write_hex(&mut uid[24..36], low & 0xffff_ffff_ffff);
        SharedStr::from_ascii(&uid)
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

/// Fills `out` with the low hex digits of `value`, zero-padded, lowercase.
fn write_hex(out: &mut [u8], value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut rest = value;
    for byte in out.iter_mut().rev() {
        *byte = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
    }
}

/// An immutable string shared by every object that names the same thing: a Pod's uid, name and
/// namespace, a sandbox id. Cloning it bumps a count instead of copying the text, so a Pod, its
/// job, its sandbox, its Events and the indexes over them hold one copy between them. Reads as a
/// `&str` (`Deref`), compares with `str` and `String`, and looks up `str`-keyed maps (`Borrow`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SharedStr(Arc<str>);

impl SharedStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The parts joined, built on the stack when short so the text is allocated once.
    pub fn concat(parts: &[&str]) -> SharedStr {
        let length: usize = parts.iter().map(|part| part.len()).sum();
        let mut buffer = [0u8; 128];
        if length > buffer.len() {
            return SharedStr::from(parts.concat());
        }
        let mut end = 0;
        for part in parts {
            buffer[end..end + part.len()].copy_from_slice(part.as_bytes());
            end += part.len();
        }
        // Whole `str`s laid end to end are UTF-8; the check cannot fail.
        SharedStr::from(std::str::from_utf8(&buffer[..end]).unwrap_or_default())
    }

    /// Text this module wrote as ASCII.
    fn from_ascii(bytes: &[u8]) -> SharedStr {
        SharedStr::from(std::str::from_utf8(bytes).unwrap_or_default())
    }
}

/// The parts joined into a string allocated once at its final size (`format!` starts small and
/// grows when the first piece is an argument).
pub fn joined(parts: &[&str]) -> String {
    let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        text.push_str(part);
    }
    text
}

impl std::ops::Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, formatter)
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, formatter)
    }
}

impl From<&str> for SharedStr {
    fn from(text: &str) -> SharedStr {
        SharedStr(Arc::from(text))
    }
}

impl From<String> for SharedStr {
    fn from(text: String) -> SharedStr {
        SharedStr(Arc::from(text))
    }
}

impl From<&String> for SharedStr {
    fn from(text: &String) -> SharedStr {
        SharedStr(Arc::from(text.as_str()))
    }
}

impl From<SharedStr> for String {
    fn from(text: SharedStr) -> String {
        text.0.to_string()
    }
}

impl From<&SharedStr> for String {
    fn from(text: &SharedStr) -> String {
        text.0.to_string()
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == &*other.0
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == *other.0
    }
}

/// A fast, deterministic hasher for maps keyed by the world's own ids and names (uids, sandbox
/// ids, node names): the Fx multiply-rotate scheme. The standard SipHash guards against keys
/// chosen to collide, which these are not (the world makes them), and costs several times more
/// on every Pod lookup.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher {
    hash: u64,
}

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// `HashMap` state for [`IdHasher`].
pub type IdHash = std::hash::BuildHasherDefault<IdHasher>;

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

    #[test]
    fn ids_keep_their_format() {
        let (mut ids, mut bits) = (SeededIds::new(42), SeededIds::new(42));
        for _ in 0..100 {
            assert_eq!(ids.sandbox_id(), format!("{:016x}", bits.next_u64()));
            let (high, low) = (bits.next_u64(), bits.next_u64());
            let expected = format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                high >> 32,
                (high >> 16) & 0xffff,
                high & 0xffff,
                low >> 48,
                low & 0xffff_ffff_ffff
            );
            assert_eq!(ids.uid(), expected);
        }
        assert_eq!(SharedStr::concat(&["sandbox-", "ab"]), "sandbox-ab");
        assert_eq!(SharedStr::concat(&["x"; 200]).len(), 200);
    }
}

#[cfg(test)]
mod shared_tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn shared_strings_read_and_compare_as_text() {
        let id = SharedStr::from("abc");
        let copy = id.clone();
        assert_eq!(id, "abc");
        assert_eq!(id, "abc".to_owned());
        assert_eq!("abc", id);
        assert_eq!(&*copy, "abc");
        assert_eq!(format!("{id}/{id:?}"), "abc/\"abc\"");
        let mut map: HashMap<SharedStr, u32, IdHash> = HashMap::default();
        map.insert(id, 1);
        assert_eq!(map.get("abc"), Some(&1));
    }
}
