//! Response bodies: whole JSON, or SSE events paced and cut as the faults ask.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;

use crate::http_serve::{full, ResponseBody};

/// One SSE frame. Anthropic and Responses name their events; Chat does not.
pub fn sse(event: Option<&str>, data: &Value) -> Bytes {
    let data = data.to_string();
    let mut out = String::with_capacity(data.len() + 40);
    if let Some(name) = event {
        out.push_str("event: ");
        out.push_str(name);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&data);
    out.push_str("\n\n");
    Bytes::from(out)
}

/// A body that sends `events` one frame at a time, waiting `delay` before each, and
/// drops the connection after `cut_after` events.
pub fn event_body(
    events: Vec<Bytes>,
    delay: Option<Duration>,
    cut_after: Option<usize>,
) -> ResponseBody {
    let state = (events.into_iter(), 0usize, false);
    let stream = futures_util::stream::unfold(state, move |(mut events, sent, cut)| async move {
        if cut {
            return None;
        }
        if cut_after.is_some_and(|n| sent >= n) {
            // Let the connection flush what was sent, then end the body with an error: hyper
            // drops the connection without the chunked terminator, so the client sees a cut.
            tokio::task::yield_now().await;
            return Some((Err(cut_error()), (events, sent, true)));
        }
        let next = events.next()?;
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        Some((Ok(Frame::data(next)), (events, sent + 1, false)))
    });
    StreamBody::new(stream).boxed_unsync()
}

/// A whole body, or its first `cut_after` bytes followed by a dropped connection.
pub fn whole_body(body: Bytes, cut_after: Option<usize>) -> ResponseBody {
    match cut_after {
        None => full(body),
        Some(n) => {
            let head = body.slice(..n.min(body.len()));
            event_body(vec![head], None, Some(1))
        }
    }
}

fn cut_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "stream cut by the emulator (fault cut:N)",
    )
}

/// Split reply text into small deltas (about three words each), deterministically.
pub fn text_deltas(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut words = 0;
    for piece in text.split_inclusive(' ') {
        current.push_str(piece);
        words += 1;
        if words == 3 {
            out.push(std::mem::take(&mut current));
            words = 0;
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_rejoin_to_the_text() {
        let t = "one two three four five";
        let d = text_deltas(t);
        assert_eq!(d.len(), 2);
        assert_eq!(d.concat(), t);
        assert_eq!(text_deltas(""), vec![String::new()]);
    }

    #[tokio::test]
    async fn cut_sends_n_events_then_fails() {
        let events = vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("c")];
        let mut body = event_body(events, None, Some(2));
        let mut got = Vec::new();
        let mut failed = false;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => got.push(f.into_data().unwrap_or_default()),
                Err(_) => failed = true,
            }
        }
        assert_eq!(got, vec![Bytes::from("a"), Bytes::from("b")]);
        assert!(failed);
    }
}
