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

    /// Moves what was noted to `into`, leaving this empty.
    pub(crate) fn take_into(&mut self, into: &mut Vec<K>) {
        into.append(&mut self.keys);
        self.trim();
    }

    /// Forgets what was noted.
    pub(crate) fn forget(&mut self) {
        self.keys.clear();
        self.trim();
    }

    /// Keeps a modest capacity between commands, so noting costs no allocation once warm, but
    /// not the peak of one tick that fired timers for thousands of sandboxes at once.
    fn trim(&mut self) {
        const KEPT: usize = 256;
        if self.keys.capacity() > KEPT {
            self.keys.shrink_to(KEPT);
        }
    }
}
