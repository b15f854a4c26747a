//! Is a request body JSON of its API's shape? Answered before anything is forwarded, so that
//! a malformed body gets a clear 400 in the client's provider format.
//!
//! The common case takes the fast path: `json_check` validates the body and hands over the
//! top-level fields. Anything unusual there (an escaped key, a repeated field, a model that
//! is not a plain string) and every invalid body go through serde_json, which gives the
//! error its wording.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::envelope::{HistoryShape, Wire};
use crate::error::ApiError;
use crate::json::check::{self as json_check, Gathered};
use crate::route::Endpoint;

/// Check that a body is JSON of the API's shape; returns the model.
pub fn check(endpoint: Endpoint, body: &[u8]) -> Result<String, ApiError> {
    check_known(endpoint, body, None, None)
}

/// [`check`] of a body that repeats a remembered, checked body's first history messages:
/// the JSON check resumes after them (`known`, see `crate::known_prefix`). `gather`, when
/// given, receives what the check saw of the body's history.
pub fn check_known(
    endpoint: Endpoint,
    body: &[u8],
    known: Option<&json_check::Resume<'_>>,
    gather: Option<&mut Gathered>,
) -> Result<String, ApiError> {
    let wire = super::wire_or_refuse(endpoint)?;
    let head = if is_object(body) {
        fast_head(wire, body, known, gather)
    } else {
        None
    };
    match head {
        Some(head) => check_head(wire, head),
        None => check_with_serde(wire, body),
    }
}

/// Whether the body's first non-blank byte opens an object.
fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The fields cachet needs from a generation request, under every API's name for the
/// history; the rest is skipped unparsed.
#[derive(Deserialize)]
struct RequestHead<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    contents: Option<&'a RawValue>,
}

impl<'a> RequestHead<'a> {
    /// The history under the wire's name for it.
    fn history(&self, wire: &dyn Wire) -> Option<&'a RawValue> {
        match wire.history_key() {
            "input" => self.input,
            "contents" => self.contents,
            _ => self.messages,
        }
    }
}

/// The head of an object body, from one `json_check` pass; `None` when the body is invalid
/// or serde_json would read the head differently (escaped keys, repeated fields, a model
/// that is not a plain string).
fn fast_head<'b>(
    wire: &dyn Wire,
    body: &'b [u8],
    known: Option<&json_check::Resume<'_>>,
    mut gather: Option<&mut Gathered>,
) -> Option<Head<'b>> {
    // Every API's history key is read, so that a repeated one sends the body to serde as
    // it would whatever the API (its derived head reads them all).
    let keys = super::history_keys();
    let own = keys
        .iter()
        .position(|k| *k == wire.history_key().as_bytes());
    let mut model: Option<Range<usize>> = None;
    let mut histories: Vec<Option<Range<usize>>> = vec![None; keys.len()];
    let mut unusual = false;
    let mut all_fields = gather.as_mut().map(|g| std::mem::take(&mut g.fields));
    let on_field = |field: json_check::Field| {
        if let Some(all) = all_fields.as_mut() {
            all.push(field.clone());
        }
        let key = &body[field.key];
        let slot = match key {
            b"model" => &mut model,
            _ => match keys.iter().position(|k| *k == key) {
                Some(i) => &mut histories[i],
                None => {
                    unusual |= key.contains(&b'\\');
                    return;
                }
            },
        };
        unusual |= slot.replace(field.value).is_some();
    };
    let checked = match known {
        Some(resume) => {
            let elements = gather.as_mut().map(|g| {
                // The gathered spans start with the known ones: the check reads after them.
                g.elements.spans = resume.elems.to_vec();
                &mut g.elements
            });
            json_check::check_resumed(body, resume, elements, on_field)
        }
        None => {
            let elements = gather.as_mut().map(|g| &mut g.elements);
            json_check::check_gathering(body, elements, on_field)
        }
    };
    checked.ok()?;
    if unusual {
        return None;
    }
    if let (Some(g), Some(all)) = (gather, all_fields) {
        g.fields = all;
        g.complete = true;
    }
    let history = own.and_then(|i| histories[i].clone()).map(|r| &body[r]);
    let model = model.map(|r| &body[r]);
    let model = match model {
        None => None,
        // A string without escapes is its own content (the check above proved it UTF-8).
        Some(raw) if raw.len() >= 2 && raw[0] == b'"' && !raw.contains(&b'\\') => {
            Some(std::str::from_utf8(&raw[1..raw.len() - 1]).ok()?)
        }
        Some(_) => return None,
    };
    Some(Head {
        model: model.map(Cow::Borrowed),
        history: history.map(|r| r.first().copied()),
    })
}

/// What the shape rules look at: the model and the first byte of the history.
struct Head<'a> {
    model: Option<Cow<'a, str>>,
    history: Option<Option<u8>>,
}

fn check_with_serde(wire: &dyn Wire, body: &[u8]) -> Result<String, ApiError> {
    if !is_object(body) {
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            return Err(ApiError::invalid(format!(
                "request body is not valid JSON: {e}"
            )));
        }
        return Err(ApiError::invalid("request body must be a JSON object"));
    }
    let head: RequestHead = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("request body is not valid JSON: {e}")))?;
    let first_byte = |raw: Option<&RawValue>| raw.map(|r| r.get().as_bytes().first().copied());
    let history = first_byte(head.history(wire));
    check_head(
        wire,
        Head {
            model: head.model,
            history,
        },
    )
}

fn check_head(wire: &dyn Wire, head: Head<'_>) -> Result<String, ApiError> {
    let model = match head.model {
        Some(m) if !m.is_empty() => m.into_owned(),
        // The path names the model (Gemini, Bedrock, Vertex): the pipeline reads it there.
        _ if !wire.model_in_body() => String::new(),
        _ => {
            return Err(ApiError::invalid(
                "model: field required (a non-empty string)",
            ))
        }
    };
    let key = wire.history_key();
    match (wire.history_shape(), head.history) {
        (HistoryShape::Array, Some(Some(b'['))) => {}
        (HistoryShape::Array, Some(_)) => {
            return Err(ApiError::invalid(format!("{key}: must be an array")))
        }
        (HistoryShape::Array, None) => {
            return Err(ApiError::invalid(format!("{key}: field required")))
        }
        (HistoryShape::ArrayOrText, Some(c)) if !matches!(c, Some(b'[') | Some(b'"')) => {
            return Err(ApiError::invalid(format!(
                "{key}: must be a string or an array"
            )))
        }
        (HistoryShape::ArrayOrText, _) => {}
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_errors_say_what_is_wrong() {
        let e = check(Endpoint::Messages, b"{\"model\": \"m\", \"messages\": ").unwrap_err();
        assert!(
            e.message.starts_with("request body is not valid JSON"),
            "{}",
            e.message
        );
        let e = check(Endpoint::Messages, b"[1]").unwrap_err();
        assert_eq!(e.message, "request body must be a JSON object");
        let e = check(Endpoint::Chat, b"{\"model\":\"m\",\"messages\":{}}").unwrap_err();
        assert_eq!(e.message, "messages: must be an array");
        let e = check(Endpoint::Messages, b"{\"messages\":[]}").unwrap_err();
        assert!(e.message.starts_with("model: field required"));
        assert_eq!(
            check(
                Endpoint::Responses,
                b"{\"model\":\"gpt-5\",\"input\":\"hi\"}"
            )
            .unwrap(),
            "gpt-5"
        );
        assert_eq!(
            check(Endpoint::Chat, b"{\"model\":\"a\\u0062\",\"messages\":[]}").unwrap(),
            "ab"
        );
    }

    /// The fast path and serde_json agree on every outcome, message included.
    #[test]
    fn fast_path_agrees_with_serde_json() {
        let bodies: &[&[u8]] = &[
            br#"{"model":"claude","messages":[{"role":"user","content":"hi"}]}"#,
            br#"{"model":"claude","messages":[],"model":"other"}"#,
            br#"{"mod\u0065l":"claude","messages":[]}"#,
            br#"{"model":5,"messages":[]}"#,
            br#"{"model":"","messages":[]}"#,
            br#"{"model":"m","messages":"x"}"#,
            br#"{"model":"m","input":{}}"#,
            br#"{"model":"m","input":"go"}"#,
            br#"{"model":"m","messages":[1,]}"#,
            br#"{"model":"m","messages":[]} x"#,
            b" {\"model\":\"\xc3\xa9t\xc3\xa9\",\"messages\":[]}\n",
        ];
        for body in bodies {
            for endpoint in [Endpoint::Messages, Endpoint::Chat, Endpoint::Responses] {
                let fast = check(endpoint, body).map_err(|e| e.message);
                let serde = check_with_serde(super::super::wire(endpoint).unwrap(), body)
                    .map_err(|e| e.message);
                assert_eq!(fast, serde, "{}", String::from_utf8_lossy(body));
            }
        }
    }
}
