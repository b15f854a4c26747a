//! The AWS event-stream framing Bedrock streams its answers in (`application/
//! vnd.amazon.eventstream`, not SSE): binary frames of a prelude (total and header lengths,
//! the prelude's CRC32), typed headers (`:message-type`, `:event-type`, `:exception-type`),
//! a payload and the frame's CRC32. The frames are read and written by
//! `aws-smithy-eventstream`, which checks both CRCs.
//!
//! `InvokeModelWithResponseStream` sends each Anthropic stream event as a `chunk` event whose
//! payload is `{"bytes": "<base64 of the event's JSON>"}`; `ConverseStream` sends its events
//! (`messageStart`, `contentBlockDelta`, ..., `metadata`) with their JSON as the payload. A
//! failure after the 200 is an `exception` message (`:exception-type`, e.g.
//! `throttlingException`) with `{"message": ...}`.

use aws_smithy_eventstream::frame::{write_message_to, DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine;
use bytes::{Bytes, BytesMut};

/// The content type of an event stream.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// The event `InvokeModelWithResponseStream` wraps each Anthropic event in.
pub const CHUNK_EVENT: &str = "chunk";

/// A frame is at most this long (the framing's own limit is 16 MiB); a longer one, or a
/// frame that fails its CRC, stops the reading (never the stream).
const MAX_BUFFERED: usize = 16 * 1024 * 1024;

/// One message of a stream, as cachet reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// An event: its `:event-type` and its payload.
    Event { kind: String, payload: Bytes },
    /// An `exception` (or `error`) message: its type and payload.
    Exception { kind: String, payload: Bytes },
}

/// Reads the frames of a stream from chunks split anywhere.
#[derive(Debug, Default)]
pub struct Reader {
    buffer: BytesMut,
    decoder: MessageFrameDecoder,
    /// A frame was malformed: nothing more is read.
    broken: bool,
    /// Frames read so far.
    pub frames: u64,
}

impl Reader {
    /// Feed a chunk; `on_frame` is called for every frame it completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_frame: impl FnMut(Frame)) {
        if self.broken {
            return;
        }
        self.buffer.extend_from_slice(chunk);
        loop {
            match self.decoder.decode_frame(&mut self.buffer) {
                Ok(DecodedFrame::Complete(message)) => {
                    self.frames += 1;
                    if let Some(frame) = frame_of(&message) {
                        on_frame(frame);
                    }
                }
                Ok(DecodedFrame::Incomplete) => break,
                Err(_) => {
                    self.broken = true;
                    self.buffer = BytesMut::new();
                    return;
                }
            }
        }
        if self.buffer.len() > MAX_BUFFERED {
            self.broken = true;
            self.buffer = BytesMut::new();
        }
    }
}

fn string_header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map(|s| s.as_str())
}

fn frame_of(message: &Message) -> Option<Frame> {
    let payload = message.payload().clone();
    match string_header(message, ":message-type")? {
        "event" => Some(Frame::Event {
            kind: string_header(message, ":event-type")?.to_string(),
            payload,
        }),
        "exception" => Some(Frame::Exception {
            kind: string_header(message, ":exception-type")
                .unwrap_or("exception")
                .to_string(),
            payload,
        }),
        "error" => Some(Frame::Exception {
            kind: string_header(message, ":error-code")
                .unwrap_or("error")
                .to_string(),
            payload,
        }),
        _ => None,
    }
}

/// The Anthropic event a `chunk` payload carries (`{"bytes": base64}`): its `type` and its
/// JSON.
pub fn chunk_event(payload: &[u8]) -> Option<(String, Bytes)> {
    #[derive(serde::Deserialize)]
    struct Chunk<'a> {
        #[serde(borrow)]
        bytes: std::borrow::Cow<'a, str>,
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: String,
    }
    let chunk: Chunk = serde_json::from_slice(payload).ok()?;
    let json = base64::engine::general_purpose::STANDARD
        .decode(chunk.bytes.as_bytes())
        .ok()?;
    let kind = serde_json::from_slice::<Typed>(&json).ok()?.kind;
    Some((kind, Bytes::from(json)))
}

/// The event a frame of an answer's stream carries, as (name, JSON): an InvokeModel
/// stream's `chunk` unwrapped into the Anthropic event it carries (named by its `type`), a
/// Converse stream's event as it is, an exception as `error` (the name that ends a
/// Messages stream in failure).
pub fn event_of(frame: Frame, endpoint: crate::route::Endpoint) -> Option<(String, Bytes)> {
    match frame {
        Frame::Event { kind, payload } if endpoint == crate::route::Endpoint::Invoke => (kind
            == CHUNK_EVENT)
            .then(|| chunk_event(&payload))
            .flatten(),
        Frame::Event { kind, payload } => Some((kind, payload)),
        Frame::Exception { payload, .. } => Some((EXCEPTION.to_string(), payload)),
    }
}

/// The name [`event_of`] gives an exception.
pub const EXCEPTION: &str = "error";

/// One event frame: `:message-type: event`, its `:event-type`, JSON content.
pub fn event_frame(kind: &str, payload: &[u8]) -> Bytes {
    encode(
        Message::new(Bytes::copy_from_slice(payload))
            .add_header(string(":event-type", kind))
            .add_header(string(":content-type", "application/json"))
            .add_header(string(":message-type", "event")),
    )
}

/// The `chunk` frame of one Anthropic event's JSON.
pub fn chunk_frame(event_json: &[u8]) -> Bytes {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event_json);
    let payload = serde_json::json!({ "bytes": bytes }).to_string();
    event_frame(CHUNK_EVENT, payload.as_bytes())
}

/// An exception frame (`throttlingException`, `modelStreamErrorException`, ...).
pub fn exception_frame(kind: &str, message: &str) -> Bytes {
    let payload = serde_json::json!({ "message": message }).to_string();
    encode(
        Message::new(Bytes::from(payload))
            .add_header(string(":exception-type", kind))
            .add_header(string(":content-type", "application/json"))
            .add_header(string(":message-type", "exception")),
    )
}

fn string(name: &'static str, value: &str) -> Header {
    Header::new(name, HeaderValue::String(value.to_string().into()))
}

fn encode(message: Message) -> Bytes {
    let mut out = Vec::new();
    // Writing to a Vec fails only past the framing's length limit, which no frame cachet
    // writes comes near.
    let _ = write_message_to(&message, &mut out);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of the AWS event-stream test suite (`aws-c-event-stream`, `encoded/positive/
    /// int32_header`): a header `event-type` of type int32 (40972), payload `{'foo':'bar'}`,
    /// prelude CRC 0x41c424b8, message CRC 0x36f480a0 (the CRCs a reader must check).
    const SUITE_INT32_HEADER: [u8; 45] = [
        0x00, 0x00, 0x00, 0x2d, 0x00, 0x00, 0x00, 0x10, 0x41, 0xc4, 0x24, 0xb8, 0x0a, 0x65, 0x76,
        0x65, 0x6e, 0x74, 0x2d, 0x74, 0x79, 0x70, 0x65, 0x04, 0x00, 0x00, 0xa0, 0x0c, 0x7b, 0x27,
        0x66, 0x6f, 0x6f, 0x27, 0x3a, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7d, 0x36, 0xf4, 0x80, 0xa0,
    ];

    #[test]
    fn frames_split_anywhere_are_read_whole() {
        let mut stream = Vec::new();
        let events = [
            br#"{"type":"message_start","message":{"usage":{"input_tokens":3}}}"#.as_slice(),
            br#"{"type":"message_stop"}"#.as_slice(),
        ];
        for e in events {
            stream.extend_from_slice(&chunk_frame(e));
        }
        stream.extend_from_slice(&exception_frame("throttlingException", "slow down"));
        for step in [1, 3, 7, stream.len()] {
            let mut reader = Reader::default();
            let mut seen = Vec::new();
            for piece in stream.chunks(step) {
                reader.feed(piece, |f| seen.push(f));
            }
            assert_eq!(seen.len(), 3, "chunks of {step}");
            let Frame::Event { kind, payload } = &seen[0] else {
                panic!("an event first")
            };
            assert_eq!(kind, CHUNK_EVENT);
            let (kind, json) = chunk_event(payload).unwrap();
            assert_eq!((kind.as_str(), &json[..]), ("message_start", events[0]));
            assert!(
                matches!(&seen[2], Frame::Exception { kind, .. } if kind == "throttlingException")
            );
        }
    }

    /// A frame whose CRC does not hold stops the reading, and nothing of it is taken.
    #[test]
    fn a_frame_that_fails_its_crc_is_not_read() {
        let mut good = chunk_frame(br#"{"type":"message_stop"}"#).to_vec();
        let last = good.len() - 1;
        good[last] ^= 0xff;
        let mut reader = Reader::default();
        let mut seen = 0;
        reader.feed(&good, |_| seen += 1);
        reader.feed(&chunk_frame(br#"{"type":"ping"}"#), |_| seen += 1);
        assert_eq!(seen, 0);
    }

    /// The suite's frame decodes (both CRCs hold); its only header is not a string, so it
    /// names no event cachet reads.
    #[test]
    fn the_suites_frame_passes_its_crcs() {
        let mut reader = Reader::default();
        let mut seen = 0;
        reader.feed(&SUITE_INT32_HEADER, |_| seen += 1);
        assert_eq!((reader.frames, seen, reader.broken), (1, 0, false));
        let mut bad = SUITE_INT32_HEADER;
        bad[10] ^= 1;
        let mut reader = Reader::default();
        reader.feed(&bad, |_| seen += 1);
        assert!(reader.broken);
    }
}
