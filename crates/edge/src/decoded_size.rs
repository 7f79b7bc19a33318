//! How much memory a request will take once decoded, estimated from its bytes before any decoder
//! runs, so the request guard can refuse what would not fit.
//!
//! Decoding amplifies: an empty element of a repeated string is 2 bytes on the wire and a
//! 24-byte `String` (plus its vector's spare room) in memory; an empty element of a repeated
//! message is 2 bytes and the whole struct (`Container`: 720 bytes). The wire size alone cannot
//! bound that, so the estimate walks the protobuf wire format with the message types of the
//! embedded descriptor set: each occurrence of a field costs what prost allocates for it (the
//! element's struct for repeated and map fields, a `String` or `Vec<u8>` and its bytes, 8 bytes
//! per repeated scalar), doubled for repeated fields (a vector grows by doubling). Struct sizes
//! are estimated from the descriptors too (24 bytes per string, bytes and repeated field, 48 per
//! map, 8 per scalar, nested messages inline), which errs on the large side. JSON is estimated
//! without types: every object as the largest message of the API, every string as a `String`.

use std::collections::HashMap;

use cwsandbox_surface::catalogue::{Catalogue, Field, FieldKind};

/// How far nested messages are followed (prost's own recursion limit).
const MAX_DEPTH: usize = 100;

#[derive(Debug, Default)]
struct MessageType {
    fields: HashMap<u32, Field>,
    /// The estimated size of the Rust struct.
    size: usize,
}

/// Estimates from the embedded descriptor set; built once per server.
#[derive(Debug)]
pub struct Estimator {
    messages: HashMap<String, MessageType>,
    largest: usize,
}

impl Estimator {
    /// The message types of the API ([`Catalogue`]).
    pub fn new() -> Estimator {
        let mut messages: HashMap<String, MessageType> = Catalogue::get()
            .messages()
            .map(|(name, message)| (name.to_owned(), MessageType { fields: message.fields.clone(), size: 0 }))
            .collect();
        let names: Vec<String> = messages.keys().cloned().collect();
        let mut sizes = HashMap::new();
        for name in &names {
            struct_size(&messages, name, &mut sizes, &mut Vec::new());
        }
        for (name, size) in &sizes {
            if let Some(message) = messages.get_mut(name) {
                message.size = *size;
            }
        }
        let largest = sizes.values().copied().max().unwrap_or(0);
        Estimator { messages, largest }
    }

    /// The estimated decoded size of `bytes` as a `message` (full name, `.pkg.Message`), struct
    /// included. Bytes that are not valid protobuf are estimated as far as they parse (the
    /// decoder refuses them anyway).
    pub fn protobuf(&self, message: &str, bytes: &[u8]) -> usize {
        let own = self.messages.get(message).map_or(0, |message| message.size);
        own.saturating_add(self.walk(message, bytes, 0))
    }

    /// The estimated decoded size of a JSON request of any type.
    pub fn json(&self, bytes: &[u8]) -> usize {
        let mut total: usize = 0;
        let mut at = 0;
        while at < bytes.len() {
            match bytes[at] {
                b'{' => {
                    total = total.saturating_add(2 * self.largest);
                    at += 1;
                }
                b'"' => {
                    let begin = at;
                    at += 1;
                    while at < bytes.len() && bytes[at] != b'"' {
                        at += if bytes[at] == b'\\' { 2 } else { 1 };
                    }
                    at += 1;
                    total = total.saturating_add(2 * 24 + (at - begin));
                }
                b'0'..=b'9' | b'-' | b't' | b'f' | b'n' => {
                    total = total.saturating_add(16);
                    while at < bytes.len() && !matches!(bytes[at], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        at += 1;
                    }
                }
                _ => at += 1,
            }
        }
        total
    }

    /// What decoding `bytes` as `message` allocates besides the struct itself.
    fn walk(&self, message: &str, mut bytes: &[u8], depth: usize) -> usize {
        let Some(shape) = self.messages.get(message) else { return 0 };
        if depth > MAX_DEPTH {
            return 0;
        }
        let mut total: usize = 0;
        while !bytes.is_empty() {
            let Some(key) = varint(&mut bytes) else { break };
            let (number, wire_type) = ((key >> 3) as u32, key & 7);
            let field = shape.fields.get(&number);
            let cost = match wire_type {
                0 => {
                    if varint(&mut bytes).is_none() {
                        break;
                    }
                    if field.is_some_and(|field| field.repeated) { 16 } else { 0 }
                }
                1 | 5 => {
                    let width = if wire_type == 1 { 8 } else { 4 };
                    if bytes.len() < width {
                        break;
                    }
                    bytes = &bytes[width..];
                    if field.is_some_and(|field| field.repeated) { 16 } else { 0 }
                }
                2 => {
                    let Some(length) = varint(&mut bytes).and_then(|length| usize::try_from(length).ok()) else {
                        break;
                    };
                    let Some((inner, rest)) = bytes.split_at_checked(length) else { break };
                    bytes = rest;
                    match field {
                        None => 0,
                        Some(Field { kind: FieldKind::Text, repeated, .. }) => {
                            length + if *repeated { 2 * 24 } else { 0 }
                        }
                        // Packed repeated numbers: at most one element per byte.
                        Some(Field { kind: FieldKind::Scalar, .. }) => 16 * length,
                        Some(Field { kind: FieldKind::Message(name), repeated, map, .. }) => {
                            let element = self.messages.get(name).map_or(0, |message| message.size);
                            let own = if *map {
                                element + 32
                            } else if *repeated {
                                2 * element
                            } else {
                                0
                            };
                            own.saturating_add(self.walk(name, inner, depth + 1))
                        }
                    }
                }
                // Groups and undefined wire types: prost refuses them.
                _ => break,
            };
            total = total.saturating_add(cost);
        }
        total
    }
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator::new()
    }
}

fn struct_size(
    messages: &HashMap<String, MessageType>,
    name: &str,
    sizes: &mut HashMap<String, usize>,
    visiting: &mut Vec<String>,
) -> usize {
    if let Some(size) = sizes.get(name) {
        return *size;
    }
    // A message that contains itself is boxed by prost: a pointer.
    if visiting.iter().any(|visited| visited == name) {
        return 8;
    }
    let Some(message) = messages.get(name) else { return 8 };
    visiting.push(name.to_owned());
    let mut size = 0;
    for field in message.fields.values() {
        size += match (&field.kind, field.repeated, field.map) {
            (_, true, true) => 48,
            (_, true, false) => 24,
            (FieldKind::Text, false, _) => 24,
            (FieldKind::Scalar, false, _) => 8,
            (FieldKind::Message(inner), false, _) => 8 + struct_size(messages, inner, sizes, visiting),
        };
    }
    visiting.pop();
    let size = size.max(8);
    sizes.insert(name.to_owned(), size);
    size
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for (index, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            *bytes = &bytes[index + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwsandbox_api::sandbox_v1 as pb;
    use prost::Message;

    #[test]
    fn estimates_cover_what_prost_allocates() {
        let estimator = Estimator::new();
        // The struct estimate is not below the real one.
        let container = estimator.messages[".coreweave.sandbox.v1.Container"].size;
        assert!(container >= std::mem::size_of::<pb::Container>(), "{container}");
        let tags = pb::ListSandboxesRequest { tags: vec![String::new(); 1000], ..Default::default() }.encode_to_vec();
        let estimate = estimator.protobuf(".coreweave.sandbox.v1.ListSandboxesRequest", &tags);
        assert!(estimate >= 1000 * std::mem::size_of::<String>(), "{estimate}");
        let containers = pb::CreateSandboxRequest {
            sandbox: Some(pb::Sandbox {
                spec: Some(pb::SandboxSpec { containers: vec![pb::Container::default(); 100], ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec();
        let estimate = estimator.protobuf(".coreweave.sandbox.v1.CreateSandboxRequest", &containers);
        assert!(
            estimate >= 100 * std::mem::size_of::<pb::Container>(),
            "{estimate} for {} wire bytes",
            containers.len()
        );
        // An ordinary request stays small.
        let get = pb::GetSandboxRequest { sandbox_id: "abc".to_owned() }.encode_to_vec();
        assert!(estimator.protobuf(".coreweave.sandbox.v1.GetSandboxRequest", &get) < 256);
        // JSON: every object as the largest message.
        assert!(estimator.json(br#"{"sandbox": {"spec": {"containers": [{}, {}]}}}"#) >= 4 * container);
        // Garbage costs what parses of it.
        assert!(estimator.protobuf(".coreweave.sandbox.v1.GetSandboxRequest", &[0xff; 16]) < 256);
    }
}
