//! The usage tap: a stream wrapper that hands every upstream chunk to the client unchanged
//! and, on the side, decodes SSE events (or keeps a bounded copy of a JSON body) to read usage.
//! It fires its completion callback exactly once: at the end of the body, when the upstream
//! breaks off, or when the client goes away (drop).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use tokio::time::Sleep;

use crate::providers::Terminal;

use crate::providers::usage as read_usage;
use crate::providers::usage::StreamUsage;
use crate::route::Endpoint;
use crate::sse;
use crate::usage::Usage;

/// Largest non-streaming body copied for usage extraction; larger bodies pass untapped.
const MAX_JSON_COPY: usize = 16 * 1024 * 1024;

/// How the response body ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The body ended normally (for streams: with the provider's terminal event).
    Complete,
    /// The upstream broke off, or a stream ended without its terminal event.
    UpstreamCut(String),
    /// The provider ended the stream with an error event (e.g. `overloaded_error` after
    /// its 200): the client has it, but the answer is not complete.
    UpstreamError,
    /// No chunk arrived within the idle time-out.
    IdleTimeout,
    /// The client went away before the end; the upstream request is dropped with it.
    ClientGone,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::UpstreamCut(_) => "upstream_cut",
            Outcome::UpstreamError => "upstream_error",
            Outcome::IdleTimeout => "idle_timeout",
            Outcome::ClientGone => "client_gone",
        }
    }
}

/// What the tap saw, handed to the completion callback.
#[derive(Debug, Clone)]
pub struct TapResult {
    pub usage: Option<Usage>,
    /// The model the response names (the one that answered).
    pub model: Option<String>,
    /// The response's id.
    pub response_id: Option<String>,
    /// The provider's cache diagnostics, when the request asked for them.
    pub provider_diagnostics: Option<serde_json::Value>,
    pub outcome: Outcome,
    pub bytes: u64,
    pub events: u64,
    /// The whole body of a non-streaming JSON response (when it fitted the copy limit).
    pub json_body: Option<Bytes>,
    /// Every SSE event of a stream, when the caller asked to keep them (turn_end handlers).
    pub kept_events: Vec<(String, Bytes)>,
}

impl TapResult {
    /// A complete answer known only by its usage (a keep-warm's, read whole; a replayed
    /// request's, from the cache model).
    pub fn with_usage(usage: Option<Usage>) -> TapResult {
        TapResult {
            usage,
            model: None,
            response_id: None,
            provider_diagnostics: None,
            outcome: Outcome::Complete,
            bytes: 0,
            events: 0,
            json_body: None,
            kept_events: Vec::new(),
        }
    }
}

pub type OnFinish = Box<dyn FnOnce(TapResult) + Send>;

enum Reader {
    Sse {
        decoder: sse::Decoder,
        usage: Box<StreamUsage>,
        terminal: Option<Terminal>,
        keep_events: bool,
        kept: Vec<(String, Bytes)>,
    },
    Json {
        copy: Vec<u8>,
        overflow: bool,
    },
    /// An AWS event stream (Bedrock): its frames, each an event of `framed`'s API.
    Frames {
        reader: Box<crate::providers::bedrock::eventstream::Reader>,
        framed: Endpoint,
        usage: Box<StreamUsage>,
        terminal: Option<Terminal>,
        keep_events: bool,
        kept: Vec<(String, Bytes)>,
    },
    None,
}

/// The side of the tap that reads; separate from the stream plumbing so it can be tested alone.
pub struct Tap {
    endpoint: Endpoint,
    reader: Reader,
    bytes: u64,
}

impl Tap {
    /// A tap for a response; `sse` when the upstream answered `text/event-stream`.
    pub fn new(endpoint: Endpoint, sse: bool, keep_events: bool) -> Self {
        let reader = if !crate::providers::reads_whole(endpoint) {
            Reader::None
        } else if sse {
            Reader::Sse {
                decoder: sse::Decoder::default(),
                usage: Box::default(),
                terminal: None,
                keep_events,
                kept: Vec::new(),
            }
        } else {
            Reader::Json {
                copy: Vec::new(),
                overflow: false,
            }
        };
        Tap {
            // A compaction's usage is a response's.
            endpoint: endpoint.read_as(),
            reader,
            bytes: 0,
        }
    }

    /// A tap for an answer streamed as an AWS event stream (`application/
    /// vnd.amazon.eventstream`: Bedrock's InvokeModel and Converse streams).
    pub fn event_stream(endpoint: Endpoint, keep_events: bool) -> Self {
        let reader = match endpoint.is_billed() {
            true => Reader::Frames {
                reader: Box::default(),
                framed: endpoint,
                usage: Box::default(),
                terminal: None,
                keep_events,
                kept: Vec::new(),
            },
            false => Reader::None,
        };
        Tap {
            endpoint: endpoint.read_as(),
            reader,
            bytes: 0,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        let endpoint = self.endpoint;
        match &mut self.reader {
            Reader::Sse {
                decoder,
                usage,
                terminal,
                keep_events,
                kept,
            } => decoder.feed(chunk, |ev| {
                usage.on_event(endpoint, ev.event, ev.data);
                if let Some(t) = crate::providers::api(endpoint).terminal(ev.event, ev.data) {
                    terminal.get_or_insert(t);
                }
                if *keep_events {
                    kept.push((ev.event.to_string(), Bytes::copy_from_slice(ev.data)));
                }
            }),
            Reader::Frames {
                reader,
                framed,
                usage,
                terminal,
                keep_events,
                kept,
            } => reader.feed(chunk, |frame| {
                use crate::providers::bedrock::eventstream;
                let Some((event, data)) = eventstream::event_of(frame, *framed) else {
                    return;
                };
                usage.on_event(endpoint, &event, &data);
                if let Some(t) = crate::providers::api(endpoint).terminal(&event, &data) {
                    terminal.get_or_insert(t);
                }
                if *keep_events {
                    kept.push((event, data));
                }
            }),
            Reader::Json { copy, overflow } => {
                if copy.len() + chunk.len() > MAX_JSON_COPY {
                    *overflow = true;
                    copy.clear();
                } else if !*overflow {
                    copy.extend_from_slice(chunk);
                }
            }
            Reader::None => {}
        }
    }

    /// How a stream that ends now ended: `None` without its terminal event.
    pub fn terminal(&self) -> Option<Terminal> {
        match &self.reader {
            Reader::Sse { terminal, .. } | Reader::Frames { terminal, .. } => *terminal,
            _ => Some(Terminal::Done),
        }
    }

    pub fn finish(self, outcome: Outcome) -> TapResult {
        let endpoint = self.endpoint;
        let (facts, events, json_body, kept_events) = match self.reader {
            Reader::Sse {
                decoder,
                usage,
                kept,
                ..
            } => (usage.facts(), decoder.events, None, kept),
            Reader::Frames {
                reader,
                usage,
                kept,
                ..
            } => (usage.facts(), reader.frames, None, kept),
            Reader::Json { copy, overflow } if !overflow => {
                let facts = read_usage::read_response_body(endpoint, &copy);
                (facts, 0, Some(Bytes::from(copy)), Vec::new())
            }
            _ => (read_usage::ResponseFacts::default(), 0, None, Vec::new()),
        };
        TapResult {
            usage: facts.usage,
            model: facts.model,
            response_id: facts.id,
            provider_diagnostics: facts.diagnostics,
            outcome,
            bytes: self.bytes,
            events,
            json_body,
            kept_events,
        }
    }
}

/// The stream wrapper placed between the upstream body and the client.
pub struct TapStream<S> {
    inner: S,
    tap: Option<Tap>,
    on_finish: Option<OnFinish>,
    idle_timeout: Duration,
    /// Fires at the idle deadline, re-armed lazily: a chunk only records when it arrived,
    /// so the timer is touched once per time-out period rather than once per chunk.
    idle: Pin<Box<Sleep>>,
    last_chunk: tokio::time::Instant,
    sse: bool,
    endpoint: Endpoint,
    ended: bool,
    /// Bytes still to come when the upstream declared its body's length. hyper drops a body
    /// once the declared length is written, without asking for its end: a body dropped with
    /// nothing left to come ended whole.
    remaining: Option<u64>,
}

impl<S> TapStream<S> {
    pub fn new(inner: S, tap: Tap, sse: bool, idle_timeout: Duration, on_finish: OnFinish) -> Self {
        let endpoint = tap.endpoint;
        TapStream {
            inner,
            tap: Some(tap),
            on_finish: Some(on_finish),
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            last_chunk: tokio::time::Instant::now(),
            sse,
            endpoint,
            ended: false,
            remaining: None,
        }
    }

    /// The body ends after `length` bytes (the upstream's `content-length`, when the client
    /// is sent the same one).
    pub fn with_length(mut self, length: Option<u64>) -> Self {
        self.remaining = length;
        self
    }

    /// The upstream body ended where it should: finish with its outcome. `false` when an
    /// event stream stopped before its final event, which is a break.
    fn ended_whole(&mut self) -> bool {
        let terminal = self
            .tap
            .as_ref()
            .map_or(Some(Terminal::Done), Tap::terminal);
        let Some(terminal) = terminal else {
            return false;
        };
        self.finish(match terminal {
            Terminal::Done => Outcome::Complete,
            Terminal::Error => Outcome::UpstreamError,
        });
        self.ended = true;
        true
    }

    fn finish(&mut self, outcome: Outcome) {
        if let (Some(tap), Some(cb)) = (self.tap.take(), self.on_finish.take()) {
            cb(tap.finish(outcome));
        }
    }

    /// End the body after a break: an error event where the provider has one, else an error.
    fn broken(
        &mut self,
        outcome: Outcome,
        message: &str,
    ) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        self.finish(outcome);
        self.ended = true;
        match crate::providers::api(self.endpoint)
            .stream_break_event(message)
            .filter(|_| self.sse)
        {
            Some(event) => Poll::Ready(Some(Ok(event))),
            None => Poll::Ready(Some(Err(std::io::Error::other(message.to_string())))),
        }
    }
}

impl<S, E> Stream for TapStream<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.last_chunk = tokio::time::Instant::now();
                if let Some(tap) = this.tap.as_mut() {
                    tap.feed(&chunk);
                }
                if let Some(remaining) = this.remaining.as_mut() {
                    *remaining = remaining.saturating_sub(chunk.len() as u64);
                }
                // The declared length is reached: the client has the whole answer once this
                // chunk is written, and may name it in its next request at once, so the end
                // is recorded before the chunk goes (hyper drops such a body afterwards
                // without asking for its end). An event stream not yet at its final event
                // is left to end as it does.
                if this.remaining == Some(0) {
                    let _ = this.ended_whole();
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                let msg = format!("upstream stream broke off: {e}");
                tracing::warn!(endpoint = this.endpoint.label(), "{msg}");
                this.broken(Outcome::UpstreamCut(msg.clone()), &msg)
            }
            Poll::Ready(None) => {
                if this.ended_whole() {
                    Poll::Ready(None)
                } else {
                    let msg = "upstream stream ended before its final event".to_string();
                    tracing::warn!(endpoint = this.endpoint.label(), "{msg}");
                    this.broken(Outcome::UpstreamCut(msg.clone()), &msg)
                }
            }
            Poll::Pending => match this.idle.as_mut().poll(cx) {
                Poll::Ready(()) if this.last_chunk.elapsed() < this.idle_timeout => {
                    // Chunks arrived since the timer was set: move the deadline on.
                    let deadline = this.last_chunk + this.idle_timeout;
                    this.idle.as_mut().reset(deadline);
                    let _ = this.idle.as_mut().poll(cx);
                    Poll::Pending
                }
                Poll::Ready(()) => {
                    let msg = format!(
                        "upstream sent nothing for {} ms",
                        this.idle_timeout.as_millis()
                    );
                    tracing::warn!(endpoint = this.endpoint.label(), "{msg}");
                    this.broken(Outcome::IdleTimeout, &msg)
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S> Drop for TapStream<S> {
    fn drop(&mut self) {
        if self.remaining == Some(0) && self.ended_whole() {
            return;
        }
        self.finish(Outcome::ClientGone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::{Arc, Mutex};

    fn run(
        endpoint: Endpoint,
        chunks: Vec<Result<Bytes, String>>,
    ) -> (Vec<Result<Bytes, String>>, TapResult) {
        timer_runtime().block_on(async move {
            let slot = Arc::new(Mutex::new(None));
            let s2 = slot.clone();
            let stream = TapStream::new(
                futures_util::stream::iter(chunks),
                Tap::new(endpoint, true, false),
                true,
                Duration::from_secs(60),
                Box::new(move |r| *s2.lock().unwrap() = Some(r)),
            );
            let out: Vec<_> = stream.map(|r| r.map_err(|e| e.to_string())).collect().await;
            let result = slot.lock().unwrap().take().unwrap();
            (out, result)
        })
    }

    #[test]
    fn passes_bytes_unchanged_and_reads_usage() {
        let a = Bytes::from_static(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":9,\"output_tokens\":1}}}\n\nevent: mess");
        let b = Bytes::from_static(b"age_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        let (out, r) = run(Endpoint::Messages, vec![Ok(a.clone()), Ok(b.clone())]);
        assert_eq!(out, vec![Ok(a), Ok(b)]);
        assert_eq!(r.outcome, Outcome::Complete);
        assert_eq!(r.usage.unwrap().cache_read, 9);
        assert_eq!(r.events, 2);
    }

    type Slot = Arc<Mutex<Option<TapResult>>>;

    /// A runtime for the tap's idle timer.
    fn timer_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// `body` as an answer of declared length in two chunks, and where its result lands.
    fn declared_length(
        rt: &tokio::runtime::Runtime,
        endpoint: Endpoint,
        body: &'static [u8],
    ) -> (
        TapStream<impl Stream<Item = Result<Bytes, String>> + Unpin>,
        Slot,
    ) {
        let body = Bytes::from_static(body);
        let chunks: Vec<Result<Bytes, String>> = vec![Ok(body.slice(..10)), Ok(body.slice(10..))];
        let slot: Slot = Arc::new(Mutex::new(None));
        let s2 = slot.clone();
        let _runtime = rt.enter();
        let stream = TapStream::new(
            futures_util::stream::iter(chunks),
            Tap::new(endpoint, false, false),
            false,
            Duration::from_secs(60),
            Box::new(move |r| *s2.lock().unwrap() = Some(r)),
        )
        .with_length(Some(body.len() as u64));
        (stream, slot)
    }

    /// hyper writes a body of declared length and drops it without asking for its end.
    #[test]
    fn a_body_of_declared_length_ends_whole_at_its_last_byte() {
        let rt = timer_runtime();
        let body = b"{\"type\":\"message\",\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":9,\"output_tokens\":1}}";
        for (taken, outcome) in [(2, Outcome::Complete), (1, Outcome::ClientGone)] {
            let (mut stream, slot) = declared_length(&rt, Endpoint::Messages, body);
            rt.block_on(async {
                for _ in 0..taken {
                    stream.next().await.unwrap().unwrap();
                }
            });
            drop(stream);
            let result = slot.lock().unwrap().take().unwrap();
            assert_eq!(result.outcome, outcome, "after {taken} chunks");
            if outcome == Outcome::Complete {
                assert_eq!(result.usage.unwrap().cache_read, 9);
            }
        }
    }

    /// What the end of an answer records (the answer's id, which the client's next request
    /// may name in `previous_response_id`) is done before its last byte is handed on: a
    /// client reading a body of declared length has it all once that byte is written, and
    /// may send its next request before hyper drops the body.
    #[test]
    fn a_body_of_declared_length_finishes_before_its_last_byte_goes_out() {
        let rt = timer_runtime();
        let body = b"{\"id\":\"resp_1\",\"object\":\"response\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}";
        let (mut stream, slot) = declared_length(&rt, Endpoint::Responses, body);
        rt.block_on(async {
            stream.next().await.unwrap().unwrap();
            let finished = slot.lock().unwrap().is_some();
            assert!(!finished, "not finished before the end");
            stream.next().await.unwrap().unwrap();
        });
        let result = slot
            .lock()
            .unwrap()
            .take()
            .expect("finished with the last byte");
        assert_eq!(result.outcome, Outcome::Complete);
        assert_eq!(result.response_id.as_deref(), Some("resp_1"));
        drop(stream);
        assert!(slot.lock().unwrap().is_none(), "finished once");
    }

    #[test]
    fn anthropic_cut_ends_with_error_event() {
        let a = Bytes::from_static(b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
        let (out, r) = run(
            Endpoint::Messages,
            vec![Ok(a), Err("connection reset".into())],
        );
        assert_eq!(out.len(), 2);
        let last = out[1].as_ref().unwrap();
        assert!(last.starts_with(b"event: error\ndata: {\"type\":\"error\""));
        assert!(matches!(r.outcome, Outcome::UpstreamCut(_)));
    }

    #[test]
    fn stream_without_terminal_event_counts_as_cut() {
        let a = Bytes::from_static(b"data: {\"choices\":[]}\n\n");
        let (out, r) = run(Endpoint::Chat, vec![Ok(a)]);
        assert!(out.last().unwrap().is_err(), "chat streams are aborted");
        assert!(matches!(r.outcome, Outcome::UpstreamCut(_)));
    }
}
