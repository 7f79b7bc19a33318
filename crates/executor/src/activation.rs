//! What the emulator tells a sandbox started ahead of need (a *warm* sandbox: namespaces,
//! root and init made, no command yet) when a start takes it: its hostname, the ids and
//! working directory of its main command, and that command. Sent once over a pipe to the
//! warm init, a fork of the single-threaded zygote's keeper and so free to allocate: a
//! length-prefixed encoding, decoded
//! with every length checked.

use std::ffi::CString;

/// The main command, as `execve` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MainCommand {
    /// Paths to try in order (the `PATH` search is done by the emulator).
    pub(crate) candidates: Vec<CString>,
    pub(crate) argv: Vec<CString>,
    pub(crate) envp: Vec<CString>,
    /// The program as the user wrote it, for the messages of a command that cannot start.
    pub(crate) display: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Activation {
    pub(crate) hostname: CString,
    /// The (uid, gid) of the user namespace the main command switches to, where it switches.
    pub(crate) main_ids: Option<(u32, u32)>,
    pub(crate) cwd: CString,
    /// `None` keeps the sandbox alive with an idle process.
    pub(crate) main: Option<MainCommand>,
}

const TAG: u8 = b'A';

impl MainCommand {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        for list in [&self.candidates, &self.argv, &self.envp] {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for item in list {
                put_bytes(out, item.as_bytes());
            }
        }
        put_bytes(out, self.display.as_bytes());
    }
}

impl Activation {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![TAG];
        put_bytes(&mut out, self.hostname.as_bytes());
        put_ids(&mut out, self.main_ids);
        put_bytes(&mut out, self.cwd.as_bytes());
        match &self.main {
            Some(main) => {
                out.push(1);
                main.encode(&mut out);
            }
            None => out.push(0),
        }
        out
    }

    /// `None` for anything but a whole, well-formed activation.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Activation> {
        let mut reader = Reader(bytes);
        if reader.byte()? != TAG {
            return None;
        }
        let hostname = reader.c_string()?;
        let main_ids = reader.ids()?;
        let cwd = reader.c_string()?;
        let main = match reader.byte()? {
            0 => None,
            1 => Some(reader.command()?),
            _ => return None,
        };
        reader.0.is_empty().then_some(Activation { hostname, main_ids, cwd, main })
    }
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

pub(crate) fn put_ids(out: &mut Vec<u8>, ids: Option<(u32, u32)>) {
    match ids {
        Some((uid, gid)) => {
            out.push(1);
            out.extend_from_slice(&uid.to_le_bytes());
            out.extend_from_slice(&gid.to_le_bytes());
        }
        None => out.push(0),
    }
}

/// Reads what `put_bytes` and the `encode` functions wrote; every read checks the length left.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        if self.0.len() < count {
            return None;
        }
        let (head, rest) = self.0.split_at(count);
        self.0 = rest;
        Some(head)
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|bytes| bytes[0])
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|bytes| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let count = self.u32()? as usize;
        self.take(count)
    }

    pub(crate) fn c_string(&mut self) -> Option<CString> {
        CString::new(self.bytes()?).ok()
    }

    /// What `put_ids` wrote: `Some(None)` for no ids, `None` for malformed bytes.
    pub(crate) fn ids(&mut self) -> Option<Option<(u32, u32)>> {
        match self.byte()? {
            0 => Some(None),
            1 => Some(Some((self.u32()?, self.u32()?))),
            _ => None,
        }
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Some(u64::from_le_bytes(array))
    }

    pub(crate) fn command(&mut self) -> Option<MainCommand> {
        let mut lists = [Vec::new(), Vec::new(), Vec::new()];
        for list in &mut lists {
            let count = self.u32()? as usize;
            // Each item takes at least its 4-byte length: a count the rest cannot hold is
            // malformed, and is refused before anything is reserved for it.
            if count > self.0.len() / 4 {
                return None;
            }
            list.reserve(count);
            for _ in 0..count {
                list.push(self.c_string()?);
            }
        }
        let display = String::from_utf8(self.bytes()?.to_vec()).ok()?;
        let [candidates, argv, envp] = lists;
        Some(MainCommand { candidates, argv, envp, display })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Activation {
        Activation {
            hostname: c"pod-1".to_owned(),
            main_ids: Some((1000, 100)),
            cwd: c"/work dir".to_owned(),
            main: Some(MainCommand {
                candidates: vec![c"/usr/bin/sh".to_owned(), c"/bin/sh".to_owned()],
                argv: vec![c"sh".to_owned(), c"-c".to_owned(), c"echo é".to_owned()],
                envp: vec![c"PATH=/usr/bin".to_owned(), c"EMPTY=".to_owned()],
                display: "sh".into(),
            }),
        }
    }

    #[test]
    fn activations_round_trip() {
        for activation in [sample(), Activation { main_ids: None, main: None, ..sample() }] {
            assert_eq!(Activation::decode(&activation.encode()), Some(activation));
        }
    }

    #[test]
    fn truncated_extended_or_corrupt_activations_are_refused() {
        let bytes = sample().encode();
        for length in 0..bytes.len() {
            assert_eq!(Activation::decode(&bytes[..length]), None, "truncated to {length}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Activation::decode(&longer), None);
        let mut nul = bytes.clone();
        // The hostname's first byte: a NUL inside a C string.
        nul[5] = 0;
        assert_eq!(Activation::decode(&nul), None);
        let mut huge_count = bytes.clone();
        // The candidates' count, made far larger than what follows.
        let offset = 1 + 4 + 5 + 1 + 8 + 4 + 9 + 1;
        huge_count[offset..offset + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Activation::decode(&huge_count), None);
    }
}
