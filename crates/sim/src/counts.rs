//! Counters of named transitions, read by tests to check which transitions ran.

/// How often each named transition ran. Reads like the map it replaced (`get(name)`, `iter()`
/// in name order); kept as a short vector because counting happens a dozen times per sandbox
/// and a string-keyed tree compared names on every one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransitionCounts {
    /// (name, count), in the order first counted.
    counts: Vec<(&'static str, u64)>,
}

impl TransitionCounts {
    /// Counts one run of `name`.
    pub fn add(&mut self, name: &'static str) {
        // A transition's name is one static string, so its slot is found by address; the text
        // comparison only guards against the same name stored twice in the binary.
        let slot = match self.counts.iter().position(|(counted, _)| std::ptr::eq(*counted, name)) {
            Some(index) => Some(index),
            None => self.counts.iter().position(|(counted, _)| *counted == name),
        };
        match slot {
            Some(index) => self.counts[index].1 += 1,
            None => self.counts.push((name, 1)),
        }
    }

    /// How often `name` ran, if ever.
    pub fn get(&self, name: &str) -> Option<&u64> {
        self.counts.iter().find(|(counted, _)| *counted == name).map(|(_, count)| count)
    }

    /// Every transition that ran, with its count, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        let mut counts = self.counts.clone();
        counts.sort_unstable();
        counts.into_iter()
    }

    /// How many distinct transitions ran.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether none ran.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_name() {
        let mut counts = TransitionCounts::default();
        counts.add("b");
        counts.add("a");
        counts.add("b");
        assert_eq!(counts.get("b"), Some(&2));
        assert_eq!(counts.get("c"), None);
        assert_eq!(counts.iter().collect::<Vec<_>>(), [("a", 1), ("b", 2)]);
    }
}
