//! Which objects a command changed: the sandboxes, sandbox Pods and placeholder jobs it touched,
//! so a copy of the sandboxes kept outside the world (the host's published views, read without
//! the world's lock) is refreshed for those alone, not for every sandbox after every command.

/// Keys noted as changed since they were last taken, in the order noted, possibly repeated.
#[derive(Debug, Clone)]
pub(crate) struct Touched<K> {
    keys: Vec<K>,
}

impl<K> Default for Touched<K> {
    fn default() -> Touched<K> {
        Touched { keys: Vec::new() }
    }
}

impl<K> Touched<K> {
    /// Notes that the object `key` names may have changed.
    pub(crate) fn note(&mut self, key: K) {
        self.keys.push(key);
    }

    /// Takes what was noted; the capacity stays, so noting costs no allocation once warm.
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, K> {
        self.keys.drain(..)
    }
}
