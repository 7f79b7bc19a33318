//! The main command's output: a bounded buffer addressed by byte offsets.
//!
//! Offsets count every byte the main command ever wrote in one log session, so a
//! client can resume a stream with `(session id, offset)`. When the buffer is full
//! the oldest bytes are dropped; asking for them reports a replay gap.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cwsandbox_sync::MutexUnpoisoned;
use tokio::sync::watch;

use crate::error::LogError;

/// One piece of output, as read from the main command's stdout/stderr pipe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogChunk {
    /// Offset of the first byte of `data` in the log session.
    pub offset: u64,
    /// When the executor read it.
    pub time: SystemTime,
    pub data: Bytes,
}

impl LogChunk {
    /// The offset just past this chunk.
    pub fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// A run of chunks and the offset to continue from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSlice {
    pub chunks: Vec<LogChunk>,
    pub next_offset: u64,
}

impl LogSlice {
    /// All the bytes, joined.
    pub fn bytes(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|chunk| chunk.data.iter().copied()).collect()
    }
}

#[derive(Debug)]
struct LogState {
    chunks: VecDeque<LogChunk>,
    /// Oldest offset still held.
    start: u64,
    /// Offset just past the newest byte.
    end: u64,
    held: usize,
    closed: bool,
}

#[derive(Debug)]
pub(crate) struct LogBuffer {
    session_id: String,
    capacity: usize,
    /// A panic while holding this lock cannot leave the state inconsistent in a way that matters
    /// more than losing the logs, so keep going.
    state: Mutex<LogState>,
    /// Bumped on every append and on close, to wake followers.
    changes: watch::Sender<u64>,
}

static SESSION_COUNTER: AtomicU64 = AtomicU64::new(0);

fn new_session_id() -> String {
    // Unique across restarts of a sandbox and, through the clock, across runs of
    // the emulator, so a stale resume token never matches a new session.
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos());
    let counter = SESSION_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{nanos:x}-{counter:x}")
}

impl LogBuffer {
    pub(crate) fn new(capacity: usize) -> LogBuffer {
        let (changes, _) = watch::channel(0);
        LogBuffer {
            session_id: new_session_id(),
            capacity: capacity.max(1),
            state: Mutex::new(LogState { chunks: VecDeque::new(), start: 0, end: 0, held: 0, closed: false }),
            changes,
        }
    }

    pub(crate) fn push(&self, data: Bytes, time: SystemTime) {
        if data.is_empty() {
            return;
        }
        {
            let mut state = self.state.lock_unpoisoned();
            if state.closed {
                return;
            }
            let offset = state.end;
            state.end += data.len() as u64;
            state.held += data.len();
            state.chunks.push_back(LogChunk { offset, time, data });
            while state.held > self.capacity {
                let excess = state.held - self.capacity;
                let Some(front) = state.chunks.front_mut() else {
                    break;
                };
                if front.data.len() <= excess {
                    let dropped = front.data.len();
                    state.chunks.pop_front();
                    state.held -= dropped;
                } else {
                    front.data = front.data.slice(excess..);
                    front.offset += excess as u64;
                    state.held -= excess;
                }
            }
            state.start = state.chunks.front().map_or(state.end, |chunk| chunk.offset);
        }
        self.changes.send_modify(|version| *version += 1);
    }

    pub(crate) fn close(&self) {
        self.state.lock_unpoisoned().closed = true;
        self.changes.send_modify(|version| *version += 1);
    }
}

/// Reads the output of a sandbox's main command (stdout and stderr interleaved as
/// written) for one log session. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LogReader {
    buffer: Arc<LogBuffer>,
}

impl LogReader {
    pub(crate) fn new(buffer: Arc<LogBuffer>) -> LogReader {
        LogReader { buffer }
    }

    /// Identifies this log session; a restarted sandbox gets a new one.
    pub fn session_id(&self) -> &str {
        &self.buffer.session_id
    }

    /// The oldest offset still held (earlier bytes were dropped).
    pub fn start_offset(&self) -> u64 {
        self.buffer.state.lock_unpoisoned().start
    }

    /// The offset just past the newest byte.
    pub fn end_offset(&self) -> u64 {
        self.buffer.state.lock_unpoisoned().end
    }

    /// Whether the session is over (the sandbox stopped): no more output will come.
    pub fn is_closed(&self) -> bool {
        self.buffer.state.lock_unpoisoned().closed
    }

    /// Everything from `offset` to the current end.
    pub fn read_from(&self, offset: u64) -> Result<LogSlice, LogError> {
        let state = self.buffer.state.lock_unpoisoned();
        check_offset(&state, offset)?;
        Ok(LogSlice { chunks: slice_from(&state, offset), next_offset: state.end })
    }

    /// The last `lines` lines (a final line without a newline counts as one).
    pub fn tail(&self, lines: usize) -> LogSlice {
        let state = self.buffer.state.lock_unpoisoned();
        let from = tail_start(&state, lines);
        LogSlice { chunks: slice_from(&state, from), next_offset: state.end }
    }

    /// Follows new output from the current end on.
    pub fn subscribe(&self) -> LogFollower {
        let next = self.buffer.state.lock_unpoisoned().end;
        LogFollower { buffer: self.buffer.clone(), next, changes: self.buffer.changes.subscribe() }
    }

    /// Follows output from `offset` on (resuming a stream).
    pub fn follow_from(&self, offset: u64) -> Result<LogFollower, LogError> {
        check_offset(&self.buffer.state.lock_unpoisoned(), offset)?;
        Ok(LogFollower { buffer: self.buffer.clone(), next: offset, changes: self.buffer.changes.subscribe() })
    }
}

fn check_offset(state: &LogState, offset: u64) -> Result<(), LogError> {
    if offset < state.start {
        return Err(LogError::ReplayGap { requested: offset, oldest: state.start });
    }
    if offset > state.end {
        return Err(LogError::InvalidOffset { requested: offset, end: state.end });
    }
    Ok(())
}

fn slice_from(state: &LogState, offset: u64) -> Vec<LogChunk> {
    state
        .chunks
        .iter()
        .filter(|chunk| chunk.end() > offset)
        .map(|chunk| {
            if chunk.offset >= offset {
                chunk.clone()
            } else {
                let skip = (offset - chunk.offset) as usize;
                LogChunk { offset, time: chunk.time, data: chunk.data.slice(skip..) }
            }
        })
        .collect()
}

/// The offset where the last `lines` lines begin.
fn tail_start(state: &LogState, lines: usize) -> u64 {
    if lines == 0 {
        return state.end;
    }
    // Walk backwards counting newlines; a newline that ends the log closes the last
    // line rather than starting an empty one.
    let mut newlines = 0;
    for chunk in state.chunks.iter().rev() {
        for (index, byte) in chunk.data.iter().enumerate().rev() {
            let at = chunk.offset + index as u64;
            if *byte == b'\n' && at + 1 != state.end {
                newlines += 1;
                if newlines == lines {
                    return at + 1;
                }
            }
        }
    }
    // Fewer lines than asked for: everything still held.
    state.start
}

/// Waits for new output of a log session.
#[derive(Debug)]
pub struct LogFollower {
    buffer: Arc<LogBuffer>,
    next: u64,
    changes: watch::Receiver<u64>,
}

impl LogFollower {
    /// The offset of the next byte this follower will return.
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// The next output, as soon as there is some. `None` once the session is over
    /// and everything was returned. If the follower fell behind and bytes it had
    /// not read were dropped, it reports the gap once and continues at the oldest
    /// byte still held.
    pub async fn next(&mut self) -> Option<Result<LogChunk, LogError>> {
        loop {
            // Mark the current version as seen before looking, so an append that
            // lands between the look and the wait still wakes us.
            self.changes.borrow_and_update();
            {
                let state = self.buffer.state.lock_unpoisoned();
                if self.next < state.start {
                    let requested = self.next;
                    self.next = state.start;
                    return Some(Err(LogError::ReplayGap { requested, oldest: state.start }));
                }
                if self.next < state.end {
                    let mut chunks = slice_from(&state, self.next);
                    if !chunks.is_empty() {
                        let chunk = chunks.swap_remove(0);
                        self.next = chunk.end();
                        return Some(Ok(chunk));
                    }
                }
                if state.closed {
                    return None;
                }
            }
            if self.changes.changed().await.is_err() {
                // The buffer is gone, so no more output can come.
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(capacity: usize, pieces: &[&str]) -> LogReader {
        let buffer = Arc::new(LogBuffer::new(capacity));
        for piece in pieces {
            buffer.push(Bytes::copy_from_slice(piece.as_bytes()), SystemTime::now());
        }
        LogReader::new(buffer)
    }

    fn text(slice: &LogSlice) -> String {
        String::from_utf8_lossy(&slice.bytes()).into_owned()
    }

    #[test]
    fn offsets_count_every_byte() {
        let reader = buffer(1024, &["ab", "cde", "f"]);
        assert_eq!(reader.end_offset(), 6);
        let slice = reader.read_from(3).unwrap();
        assert_eq!(text(&slice), "def");
        assert_eq!(slice.chunks[0].offset, 3);
        assert_eq!(slice.next_offset, 6);
        assert_eq!(text(&reader.read_from(6).unwrap()), "");
        assert_eq!(reader.read_from(7), Err(LogError::InvalidOffset { requested: 7, end: 6 }));
    }

    #[test]
    fn full_buffer_drops_oldest_bytes_and_reports_a_gap() {
        let reader = buffer(4, &["abc", "def"]);
        assert_eq!(reader.start_offset(), 2);
        assert_eq!(text(&reader.read_from(2).unwrap()), "cdef");
        assert_eq!(reader.read_from(1), Err(LogError::ReplayGap { requested: 1, oldest: 2 }));
        // A single chunk larger than the buffer keeps its newest bytes.
        let reader = buffer(3, &["abcdefg"]);
        assert_eq!(reader.start_offset(), 4);
        assert_eq!(text(&reader.read_from(4).unwrap()), "efg");
    }

    #[test]
    fn tail_counts_lines_across_chunks() {
        let reader = buffer(1024, &["one\ntw", "o\nthree\n"]);
        assert_eq!(text(&reader.tail(1)), "three\n");
        assert_eq!(text(&reader.tail(2)), "two\nthree\n");
        assert_eq!(text(&reader.tail(3)), "one\ntwo\nthree\n");
        assert_eq!(text(&reader.tail(10)), "one\ntwo\nthree\n");
        assert_eq!(text(&reader.tail(0)), "");
        let reader = buffer(1024, &["one\ntwo"]);
        assert_eq!(text(&reader.tail(1)), "two");
        assert_eq!(text(&reader.tail(2)), "one\ntwo");
    }

    #[tokio::test]
    async fn followers_get_new_output_and_end_on_close() {
        let buffer = Arc::new(LogBuffer::new(1024));
        let reader = LogReader::new(buffer.clone());
        buffer.push(Bytes::from_static(b"old"), SystemTime::now());
        let mut follower = reader.subscribe();
        let writer = buffer.clone();
        let task = tokio::spawn(async move {
            writer.push(Bytes::from_static(b"new"), SystemTime::now());
            writer.close();
        });
        let chunk = follower.next().await.unwrap().unwrap();
        assert_eq!((chunk.offset, &chunk.data[..]), (3, &b"new"[..]));
        assert!(follower.next().await.is_none());
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_slow_follower_is_told_about_the_gap() {
        let buffer = Arc::new(LogBuffer::new(4));
        let reader = LogReader::new(buffer.clone());
        let mut follower = reader.follow_from(0).unwrap();
        buffer.push(Bytes::from_static(b"abcdef"), SystemTime::now());
        assert_eq!(follower.next().await, Some(Err(LogError::ReplayGap { requested: 0, oldest: 2 })));
        assert_eq!(&follower.next().await.unwrap().unwrap().data[..], b"cdef");
    }
}
