//! The Responses API's WebSocket mode (OpenAI's "WebSocket mode" guide and its WebSocket
//! events reference): `GET /v1/responses` upgraded to a WebSocket, Codex's beta header
//! `OpenAI-Beta: responses_websockets=…`; each turn is a text message `{"type":
//! "response.create", …}` whose other fields are those of `POST /v1/responses` ("`stream`
//! is implicit over WebSocket and should not be sent", "`background` is not supported"),
//! plus `stream_id`, "the WebSocket lane for this response. Requests with the same
//! `stream_id` are processed FIFO, and events for the response echo the same `stream_id`"
//! (openai-python `ResponsesClientEventResponseCreate`). The answer comes back as text
//! messages, each one event of the HTTP stream's JSON (`type` first). A request may name
//! `previous_response_id` of an answer on the same socket whatever its `store`: "the
//! server keeps the prior state in memory on the open socket".

use bytes::Bytes;

use crate::json::scan::Span;

use crate::error::ErrorKind;

/// The client event that starts a response.
pub const RESPONSE_CREATE: &str = "response.create";
/// Codex's beta header value names the mode's version after this (`responses_websockets=
/// 2026-02-06`, codex-rs `responses_websocket.rs`).
pub const BETA_PREFIX: &str = "responses_websockets=";
/// The ChatGPT backend's handshake answer carries this value, which pins the session;
/// Codex sends it back on its next handshakes of the turn (codex-rs
/// `X_CODEX_TURN_STATE_HEADER`).
pub const TURN_STATE_HEADER: &str = "x-codex-turn-state";
/// Fields of `POST /v1/responses` a socket's request does not take.
pub const TRANSPORT_FIELDS: [&str; 2] = ["stream", "background"];

/// Whether a WebSocket handshake asks for the mode: `GET /v1/responses` (the ChatGPT
/// backend's `/responses` is reached through the same client path).
pub fn serves(method: &http::Method, path: &str) -> bool {
    method == http::Method::GET && path.trim_end_matches('/') == "/v1/responses"
}

/// The `type` of a client or server event: read where OpenAI writes it, first, without
/// scanning the rest of the message; elsewhere, from the whole object.
pub fn event_type(message: &[u8]) -> Option<String> {
    let start = crate::json::scan::skip_ws(message, 0);
    let first = message
        .get(start..)
        .and_then(|m| m.strip_prefix(b"{\"type\":\""));
    if let Some(first) = first {
        if let Some(end) = first.iter().position(|&b| b == b'"' || b == b'\\') {
            if first[end] == b'"' {
                return std::str::from_utf8(&first[..end]).ok().map(str::to_string);
            }
        }
    }
    crate::json::scan::str_field(message, start, "type")
}

/// The `stream_id` a `response.create` names (the socket's default lane without one).
pub fn stream_id(message: &[u8]) -> Option<String> {
    let start = crate::json::scan::skip_ws(message, 0);
    crate::json::scan::str_field(message, start, "stream_id")
}

/// The `error` event the API sends on a socket for a request it refuses: the HTTP error
/// body's `error` with the `status` it would have had (`{"type": "error", "status": 400,
/// "error": {"type", "code", "message", "param"}}`; codex-rs reads `status` and
/// `error.code`, openai-python `ResponseErrorEvent`).
pub fn error_event(kind: ErrorKind, status: u16, message: &str) -> Bytes {
    error_event_with_code(kind, status, message, None)
}

/// [`error_event`] with an `error.code` of its own (`previous_response_not_found`).
pub fn error_event_with_code(
    kind: ErrorKind,
    status: u16,
    message: &str,
    code: Option<&str>,
) -> Bytes {
    let body = super::super::openai::error_body(kind, message);
    let mut error = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|mut v| v.get_mut("error").map(serde_json::Value::take))
        .unwrap_or_default();
    if let Some(code) = code {
        error["code"] = serde_json::json!(code);
    }
    let event = serde_json::json!({"type": "error", "status": status, "error": error});
    Bytes::from(event.to_string())
}

/// An answer a socket holds for the requests that continue it: its conversation (the
/// prompt's input items, then the answer's output items, as JSON text separated by commas)
/// under the answer's id, and the `stream_id` it was asked on.
pub struct HeldAnswer {
    pub id: String,
    pub stream_id: Option<String>,
    pub items: Vec<u8>,
}

/// How many answers a socket holds: the latest of each of its latest streams (Codex
/// continues only its latest answer, on one stream).
pub const HELD_ANSWERS: usize = 4;

/// Hold `answer` as its stream's latest, letting go of the oldest stream's past the limit.
pub fn hold(held: &mut std::collections::VecDeque<HeldAnswer>, answer: HeldAnswer) {
    held.retain(|h| h.stream_id != answer.stream_id);
    if held.len() == HELD_ANSWERS {
        held.pop_front();
    }
    held.push_back(answer);
}

/// `items` then `more`, as one comma-separated list of JSON values.
pub fn join_items(mut items: Vec<u8>, more: &[u8]) -> Vec<u8> {
    if !more.is_empty() {
        if !items.is_empty() {
            items.push(b',');
        }
        items.extend_from_slice(more);
    }
    items
}

/// The items of an array's JSON text, without its brackets.
fn array_items(b: &[u8], span: &Span) -> Option<Vec<u8>> {
    let raw = b.get(span.clone())?;
    let inner = raw.strip_prefix(b"[")?.strip_suffix(b"]")?;
    Some(inner.trim_ascii().to_vec())
}

/// A `response.create` as monitoring reads it: its prompt's input items (JSON text), whole
/// when it continues an answer `held` on the socket (`previous_response_id`: "the server
/// keeps the prior state in memory on the open socket"), and then the request it stands
/// for: the same fields, every byte kept, but the whole input and no
/// `previous_response_id`, as the same turn goes over HTTP. Read by spans, without building
/// a document. `None` for a message that is not a JSON object.
pub fn read_create(
    message: &[u8],
    held: &std::collections::VecDeque<HeldAnswer>,
) -> Option<(Vec<u8>, Option<Bytes>)> {
    use crate::json::scan;
    let start = scan::skip_ws(message, 0);
    let entries = scan::entries(message, start).ok()?;
    let named = |name: &str| entries.iter().find(|e| scan::key_is(message, &e.key, name));
    // A string input is one user message.
    let own = match named("input").map(|e| &e.value) {
        Some(v) if message.get(v.start) == Some(&b'"') => format!(
            r#"{{"role":"user","content":{}}}"#,
            String::from_utf8_lossy(&message[v.clone()])
        )
        .into_bytes(),
        Some(v) => array_items(message, v).unwrap_or_default(),
        None => Vec::new(),
    };
    let previous = named("previous_response_id").and_then(|e| scan::decode_str(message, &e.value));
    let Some(continued) = previous.and_then(|id| held.iter().find(|h| h.id == id)) else {
        return Some((own, None));
    };
    let items = join_items(continued.items.clone(), &own);
    let mut whole = Vec::with_capacity(message.len() + items.len() + 16);
    whole.push(b'{');
    for e in &entries {
        if ["input", "previous_response_id"]
            .iter()
            .any(|n| scan::key_is(message, &e.key, n))
        {
            continue;
        }
        whole.extend_from_slice(&message[e.key.clone()]);
        whole.push(b':');
        whole.extend_from_slice(&message[e.value.clone()]);
        whole.push(b',');
    }
    whole.extend_from_slice(b"\"input\":[");
    whole.extend_from_slice(&items);
    whole.extend_from_slice(b"]}");
    Some((items, Some(Bytes::from(whole))))
}

/// The id and output items (JSON text) of the response a `response.completed` event
/// carries, read by spans.
pub fn completed_answer(event: &[u8]) -> Option<(String, Vec<u8>)> {
    use crate::json::scan;
    if event_type(event).as_deref() != Some("response.completed") {
        return None;
    }
    let start = scan::skip_ws(event, 0);
    let response = scan::field(event, start, "response")?;
    let id = scan::str_field(event, response.start, "id")?;
    let output = scan::field(event, response.start, "output")?;
    Some((id, array_items(event, &output)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_is_read_first_or_found() {
        let first = br#"{"type":"response.create","model":"gpt-5.1-codex","input":[]}"#;
        assert_eq!(event_type(first).as_deref(), Some(RESPONSE_CREATE));
        let later = br#" {"model":"m","type":"response.completed"}"#;
        assert_eq!(event_type(later).as_deref(), Some("response.completed"));
        let escaped = br#"{"type":"response\u002ecreate"}"#;
        assert_eq!(event_type(escaped).as_deref(), Some(RESPONSE_CREATE));
        assert_eq!(event_type(b"[1]"), None);
        assert_eq!(event_type(b"not json"), None);
        let lane = br#"{"type":"response.create","stream_id":"fork-1","input":"x"}"#;
        assert_eq!(stream_id(lane).as_deref(), Some("fork-1"));
        assert_eq!(stream_id(first), None);
    }

    #[test]
    fn an_error_event_carries_the_status_and_the_http_error() {
        let event = error_event_with_code(
            ErrorKind::InvalidRequest,
            400,
            "Previous response with id 'resp_1' not found.",
            Some("previous_response_not_found"),
        );
        let v: serde_json::Value = serde_json::from_slice(&event).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["status"], 400);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "previous_response_not_found");
    }

    /// A request continuing an answer held on the socket reads as the whole conversation,
    /// without `previous_response_id`, its other fields byte for byte; one continuing an
    /// answer not held reads as sent.
    #[test]
    fn a_continued_request_reads_whole() {
        let mut held = std::collections::VecDeque::new();
        hold(
            &mut held,
            HeldAnswer {
                id: "resp_1".into(),
                stream_id: None,
                items: br#"{"role":"user","content":"a"},{"type":"message","role":"assistant","content":[]}"#.to_vec(),
            },
        );
        let next = br#"{"type":"response.create","model":"m", "previous_response_id":"resp_1","input":[ {"type":"function_call_output","call_id":"c","output":"x"} ]}"#;
        let (items, whole) = read_create(next, &held).unwrap();
        let items: serde_json::Value =
            serde_json::from_slice(&[b"[", &items[..], b"]"].concat()).unwrap();
        assert_eq!(items.as_array().unwrap().len(), 3);
        let whole: serde_json::Value = serde_json::from_slice(&whole.unwrap()).unwrap();
        assert!(whole.get("previous_response_id").is_none());
        assert_eq!(whole["input"], items);
        assert_eq!(
            (&whole["model"], &whole["type"]),
            (
                &serde_json::json!("m"),
                &serde_json::json!("response.create")
            )
        );
        let elsewhere = br#"{"type":"response.create","model":"m","previous_response_id":"resp_9","input":"b"}"#;
        let (items, whole) = read_create(elsewhere, &held).unwrap();
        assert_eq!(items, br#"{"role":"user","content":"b"}"#);
        assert!(whole.is_none());
        assert!(read_create(b"[1]", &held).is_none());
        let done = br#"{"type":"response.completed","response":{"id":"resp_2","output":[{"type":"message"}],"usage":{}}}"#;
        assert_eq!(
            completed_answer(done),
            Some(("resp_2".to_string(), br#"{"type":"message"}"#.to_vec()))
        );
    }
}
