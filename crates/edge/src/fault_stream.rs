//! The wire side of faults (`cwsandbox_surface::faults`): a response stream ended after N messages, and the
//! sandbox id a request names, read from its bytes without decoding the whole message.

use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;

/// The 5-byte prefix of every gRPC and Connect streaming message.
const ENVELOPE: usize = 5;
/// Connect's end-of-stream flag.
const END_STREAM: u8 = 0x02;

/// How a cut stream ends.
pub enum Tail {
    /// gRPC: trailers with the status.
    Grpc(http::HeaderMap),
    /// Connect streaming: the end-of-stream message with the error.
    Connect(Bytes),
}

/// A response body that lets `after` messages through, then ends with `tail`.
pub struct CutBody {
    body: Body,
    after: u32,
    passed: u32,
    header: [u8; ENVELOPE],
    have: usize,
    remaining: usize,
    /// The current message is Connect's end of stream (the handler ended first).
    ending: bool,
    tail: Option<Tail>,
    done: bool,
}

impl CutBody {
    /// Wraps `body`.
    pub fn new(body: Body, after: u32, tail: Tail) -> CutBody {
        CutBody {
            body,
            after,
            passed: 0,
            header: [0; ENVELOPE],
            have: 0,
            remaining: 0,
            ending: false,
            tail: Some(tail),
            done: false,
        }
    }

    /// How many bytes of `data` belong to the messages let through; `None`: all of them.
    fn keep(&mut self, data: &[u8]) -> Option<usize> {
        let mut at = 0;
        while at < data.len() {
            if self.passed >= self.after && !self.ending {
                return Some(at);
            }
            if self.remaining > 0 {
                let take = self.remaining.min(data.len() - at);
                self.remaining -= take;
                at += take;
                if self.remaining == 0 {
                    self.finish_message();
                }
                continue;
            }
            self.header[self.have] = data[at];
            self.have += 1;
            at += 1;
            if self.have == ENVELOPE {
                self.have = 0;
                self.ending = self.header[0] & END_STREAM != 0;
                self.remaining =
                    u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]) as usize;
                if self.remaining == 0 {
                    self.finish_message();
                }
            }
        }
        None
    }

    fn finish_message(&mut self) {
        if self.ending {
            // The handler's own end came first: nothing to cut.
            self.tail = None;
            self.ending = false;
        } else {
            self.passed += 1;
        }
    }

    fn end(&mut self) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        self.done = true;
        match self.tail.take() {
            Some(Tail::Grpc(trailers)) => Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers)))),
            Some(Tail::Connect(bytes)) => Poll::Ready(Some(Ok(http_body::Frame::data(bytes)))),
            None => Poll::Ready(None),
        }
    }
}

impl http_body::Body for CutBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.passed >= self.after && self.have == 0 && self.remaining == 0 && self.tail.is_some() {
            return self.end();
        }
        let frame = match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                self.done = true;
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        let frame = match frame.into_data() {
            Ok(data) => match self.keep(&data) {
                None => http_body::Frame::data(data),
                Some(length) => http_body::Frame::data(data.slice(..length)),
            },
            // The handler's trailers: it ended before the cut.
            Err(frame) => {
                self.done = true;
                return Poll::Ready(Some(Ok(frame)));
            }
        };
        Poll::Ready(Some(Ok(frame)))
    }
}

/// The string field `number` of a protobuf message's bytes, if present (the last occurrence
/// wins, as in decoding).
pub fn string_field(mut bytes: &[u8], number: u32) -> Option<String> {
    use prost::encoding::{WireType, decode_key, decode_varint};
    let mut found = None;
    while !bytes.is_empty() {
        let (field, wire_type) = decode_key(&mut bytes).ok()?;
        let skip = match wire_type {
            WireType::Varint => {
                decode_varint(&mut bytes).ok()?;
                0
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => {
                let length = usize::try_from(decode_varint(&mut bytes).ok()?).ok()?;
                if length > bytes.len() {
                    return None;
                }
                if field == number {
                    found = std::str::from_utf8(&bytes[..length]).ok().map(str::to_owned);
                }
                length
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        };
        if skip > bytes.len() {
            return None;
        }
        bytes = &bytes[skip..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut bytes = vec![flags];
        bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    async fn cut(chunks: Vec<Vec<u8>>, after: u32) -> Vec<u8> {
        let stream = futures::stream::iter(chunks.into_iter().map(|chunk| Ok::<_, std::io::Error>(Bytes::from(chunk))));
        let body = CutBody::new(Body::from_stream(stream), after, Tail::Connect(Bytes::from_static(b"END")));
        body.collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn the_stream_ends_after_the_nth_message_wherever_the_frames_split() {
        let messages: Vec<u8> = [envelope(0, b"one"), envelope(0, b"two"), envelope(0, b"three")].concat();
        let mut expected = [envelope(0, b"one"), envelope(0, b"two")].concat();
        expected.extend_from_slice(b"END");
        assert_eq!(cut(vec![messages.clone()], 2).await, expected);
        let bytewise: Vec<Vec<u8>> = messages.iter().map(|byte| vec![*byte]).collect();
        assert_eq!(cut(bytewise, 2).await, expected);
        assert_eq!(cut(vec![messages.clone()], 0).await, b"END");
    }

    #[tokio::test]
    async fn a_stream_that_ends_first_keeps_its_own_end() {
        let own = [envelope(0, b"one"), envelope(END_STREAM, b"{}")].concat();
        assert_eq!(cut(vec![own.clone()], 5).await, own);
    }

    #[test]
    fn a_string_field_is_found_among_others() {
        use prost::Message;
        let request = cwsandbox_api::sandbox_v1::ReadFileRequest {
            sandbox_id: "sb-1".to_owned(),
            path: "/x".to_owned(),
            container: "main".to_owned(),
        };
        let bytes = request.encode_to_vec();
        assert_eq!(string_field(&bytes, 1).as_deref(), Some("sb-1"));
        assert_eq!(string_field(&bytes, 3).as_deref(), Some("main"));
        assert_eq!(string_field(&bytes, 9), None);
        assert_eq!(string_field(&[0xff], 1), None);
    }
}
