//! The JSON path (`sandbox.spec.containers[1].name`) at the place a JSON decoder stopped.
//!
//! connectrpc-axum decodes Connect JSON with serde_json, whose errors say where decoding stopped
//! (`… at line 1 column 62`) but not in which field; `serde_path_to_error` would need the request
//! type, which the transport does not know. Every decoder's error carries that position, so the
//! path is read back from the request's bytes: a small scanner follows the document up to that
//! byte, keeping the stack of objects (their current key) and arrays (their current index).

/// `(line, column)` from the end of a serde_json error message (`… at line 3 column 14`).
pub fn position(message: &str) -> Option<(usize, usize)> {
    let (_, tail) = message.rsplit_once(" at line ")?;
    let (line, column) = tail.split_once(" column ")?;
    Some((line.trim().parse().ok()?, column.trim().parse().ok()?))
}

/// The message without its trailing position.
pub fn without_position(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(head, _)| head)
}

/// The byte offset of a serde_json position: `column` counts bytes from the start of `line`
/// (1-based); serde_json reports the index just past the token it stopped at.
pub fn offset(json: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match json[start..].iter().position(|byte| *byte == b'\n') {
            Some(newline) => start += newline + 1,
            None => break,
        }
    }
    (start + column).min(json.len())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Before a key (object) or an element (array).
    Empty,
    /// A value has begun and not finished (or only its key is read).
    Open,
    /// The value is complete.
    Done,
}

#[derive(Debug)]
enum Frame {
    Object { key: Option<String>, slot: Slot },
    Array { index: usize, slot: Slot },
}

/// The path of the value being decoded when decoding stopped at byte `stop`. `eof` (the document
/// ended early) names the innermost unfinished value rather than the last complete one. Keys are
/// as the client wrote them; the top level is the empty path.
pub fn locate(json: &[u8], stop: usize, eof: bool) -> String {
    let mut frames: Vec<Frame> = Vec::new();
    let mut at = 0;
    let stop = stop.min(json.len());
    // Marks the innermost frame's slot.
    fn mark(frames: &mut [Frame], to: Slot) {
        match frames.last_mut() {
            Some(Frame::Object { slot, .. } | Frame::Array { slot, .. }) => *slot = to,
            None => {}
        }
    }
    while at < stop {
        match json[at] {
            b'{' => {
                mark(&mut frames, Slot::Open);
                frames.push(Frame::Object { key: None, slot: Slot::Empty });
                at += 1;
            }
            b'[' => {
                mark(&mut frames, Slot::Open);
                frames.push(Frame::Array { index: 0, slot: Slot::Empty });
                at += 1;
            }
            b'}' | b']' => {
                frames.pop();
                mark(&mut frames, Slot::Done);
                at += 1;
            }
            b',' => {
                match frames.last_mut() {
                    Some(Frame::Object { key, slot }) => {
                        *key = None;
                        *slot = Slot::Empty;
                    }
                    Some(Frame::Array { index, slot }) => {
                        *index += 1;
                        *slot = Slot::Empty;
                    }
                    None => {}
                }
                at += 1;
            }
            b'"' => {
                let (text, end, closed) = string(json, at + 1, stop);
                at = end;
                match frames.last_mut() {
                    Some(Frame::Object { key: key @ None, slot }) => {
                        *key = Some(text);
                        *slot = Slot::Open;
                    }
                    _ => mark(&mut frames, if closed { Slot::Done } else { Slot::Open }),
                }
            }
            byte if byte.is_ascii_whitespace() || byte == b':' => at += 1,
            _ => {
                // A number or a literal: up to the next delimiter.
                mark(&mut frames, Slot::Open);
                while at < stop && !matches!(json[at], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n' | b':') {
                    at += 1;
                }
                if at < stop || !eof {
                    mark(&mut frames, Slot::Done);
                }
            }
        }
    }
    let mut path = String::new();
    let last = frames.len().saturating_sub(1);
    for (depth, frame) in frames.iter().enumerate() {
        let (segment, slot) = match frame {
            Frame::Object { key: Some(key), slot } => (Segment::Key(key), *slot),
            Frame::Array { index, slot } => (Segment::Index(*index), *slot),
            Frame::Object { key: None, .. } => continue,
        };
        // The innermost value: named unless nothing of it is read yet, or it is complete and the
        // document ended after it (the fault is in the container, not in the value).
        if depth == last && (slot == Slot::Empty || (eof && slot == Slot::Done)) {
            continue;
        }
        match segment {
            Segment::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Segment::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// A string's text (lossy), where it ends, and whether its closing quote came before `stop`.
fn string(json: &[u8], mut at: usize, stop: usize) -> (String, usize, bool) {
    let begin = at;
    while at < stop {
        match json[at] {
            b'\\' => at += 2,
            b'"' => return (String::from_utf8_lossy(&json[begin..at]).into_owned(), at + 1, true),
            _ => at += 1,
        }
    }
    (String::from_utf8_lossy(&json[begin..stop.min(json.len())]).into_owned(), stop, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path serde_json's own error position leads to, for a document that fails to decode
    /// as `T`.
    fn path_of<T: serde::de::DeserializeOwned + std::fmt::Debug>(json: &str) -> String {
        let error = serde_json::from_str::<T>(json).unwrap_err();
        let message = error.to_string();
        let (line, column) = position(&message).unwrap_or_else(|| panic!("no position in {message}"));
        locate(json.as_bytes(), offset(json.as_bytes(), line, column), error.is_eof())
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
        #[serde(default)]
        sizes: Vec<i32>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        items: Vec<Inner>,
        #[serde(default)]
        count: u8,
    }

    #[test]
    fn the_path_of_each_kind_of_fault() {
        assert_eq!(path_of::<Outer>(r#"{"items": [{"name": "a"}, {"name": 5}]}"#), "items[1].name");
        assert_eq!(path_of::<Outer>(r#"{"items": [], "count": 300}"#), "count");
        assert_eq!(path_of::<Outer>(r#"{"items": [{"name": "a", "sizes": [1, "x"]}]}"#), "items[0].sizes[1]");
        assert_eq!(path_of::<Outer>(r#"{"items": [{"name": "a", "bogus": 1}]}"#), "items[0].bogus");
        assert_eq!(path_of::<Outer>(r#"{"items": [{"name": "a""#), "items[0]");
        assert_eq!(path_of::<Outer>(r#"{"items": [{"name": "a"#), "items[0].name");
        assert_eq!(path_of::<Outer>("{\"items\": [{\"name\": \"a\\x\"}]}"), "items[0].name");
        assert_eq!(path_of::<Outer>("{\n  \"items\": [\n    {\"name\": true}\n  ]\n}"), "items[0].name");
        assert_eq!(path_of::<Outer>(r#"{"items": [], "count": 1} x"#), "");
    }

    #[test]
    fn invalid_utf8_is_located_in_its_string() {
        let json = b"{\"items\": [{\"name\": \"ab\xff\"}]}";
        let error = serde_json::from_slice::<Outer>(json).unwrap_err();
        let (line, column) = position(&error.to_string()).unwrap();
        assert_eq!(locate(json, offset(json, line, column), error.is_eof()), "items[0].name");
    }
}
