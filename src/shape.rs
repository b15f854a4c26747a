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

use crate::error::ApiError;
use crate::json::check as json_check;
use crate::known_prefix::{Gathered, PrefixMatch};
use crate::route::Endpoint;

/// Check that a body is JSON of the API's shape; returns the model.
pub fn check(endpoint: Endpoint, body: &[u8]) -> Result<String, ApiError> {
    check_known(endpoint, body, None, None)
}

/// [`check`] of a body that repeats a remembered, checked body's first history messages
/// (`known`): the JSON check resumes after them (see [`crate::known_prefix`]).
/// `gather`, when given, receives what the check saw of the body's history (see
/// [`crate::known_prefix::Gathered`]).
pub fn check_known(
    endpoint: Endpoint,
    body: &[u8],
    known: Option<&PrefixMatch>,
    gather: Option<&mut Gathered>,
) -> Result<String, ApiError> {
    let head = if is_object(body) {
        fast_head(body, known.filter(|m| m.known.checked), gather)
    } else {
        None
    };
    match head {
        Some(head) => check_head(endpoint, head),
        None => check_with_serde(endpoint, body),
    }
}

/// Whether the body's first non-blank byte opens an object.
fn is_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The fields cachet needs from a generation request; the rest is skipped unparsed.
#[derive(Deserialize)]
struct RequestHead<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// The head of an object body, from one `json_check` pass; `None` when the body is invalid
/// or serde_json would read the head differently (escaped keys, repeated fields, a model
/// that is not a plain string).
fn fast_head<'b>(
    body: &'b [u8],
    known: Option<&PrefixMatch>,
    mut gather: Option<&mut Gathered>,
) -> Option<Head<'b>> {
    let mut fields: [Option<Range<usize>>; 3] = [None, None, None];
    let mut unusual = false;
    let mut all_fields = gather.as_mut().map(|g| std::mem::take(&mut g.fields));
    let on_field = |field: json_check::Field| {
        if let Some(all) = all_fields.as_mut() {
            all.push(field.clone());
        }
        let key = &body[field.key];
        let slot = match key {
            b"model" => 0,
            b"messages" => 1,
            b"input" => 2,
            _ => {
                unusual |= key.contains(&b'\\');
                return;
            }
        };
        unusual |= fields[slot].replace(field.value).is_some();
    };
    let checked = match known {
        Some(m) => {
            let inner = |key: &Range<usize>| key.start + 1..key.end - 1;
            // The kept entries' keys include their quotes; the check's fields do not.
            let as_fields = |entries: &[crate::json::scan::Entry]| -> Vec<json_check::Field> {
                entries
                    .iter()
                    .map(|e| json_check::Field {
                        key: inner(&e.key),
                        value: e.value.clone(),
                    })
                    .collect()
            };
            let before = as_fields(&m.known.before);
            let known_tail = m.known.tail();
            let tail_fields = known_tail.map_or_else(Vec::new, |(t, _)| as_fields(&t.entries));
            let tail = known_tail.map(|(tail, bytes)| json_check::KnownTail {
                bytes,
                fields: &tail_fields,
                arrays: &tail.arrays,
                deepest: tail.deepest,
            });
            let resume = json_check::Resume {
                pos: m.resume_at(),
                fields_before: &before,
                arrays_before: &m.known.arrays_before,
                array_key: inner(&m.known.key),
                array_start: m.known.array_start,
                tail,
            };
            let elements = gather.as_mut().map(|g| {
                // The gathered spans start with the known ones: the check reads after them.
                g.elements.spans = m.elems().to_vec();
                &mut g.elements
            });
            json_check::check_resumed(body, &resume, elements, on_field)
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
    let [model, messages, input] = fields.map(|f| f.map(|r| &body[r]));
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
        messages: messages.map(|r| r.first().copied()),
        input: input.map(|r| r.first().copied()),
    })
}

/// What the shape rules look at: the model and the first byte of `messages` and `input`.
struct Head<'a> {
    model: Option<Cow<'a, str>>,
    messages: Option<Option<u8>>,
    input: Option<Option<u8>>,
}

fn check_with_serde(endpoint: Endpoint, body: &[u8]) -> Result<String, ApiError> {
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
    check_head(
        endpoint,
        Head {
            model: head.model,
            messages: first_byte(head.messages),
            input: first_byte(head.input),
        },
    )
}

fn check_head(endpoint: Endpoint, head: Head<'_>) -> Result<String, ApiError> {
    let model = match head.model {
        Some(m) if !m.is_empty() => m.into_owned(),
        _ => {
            return Err(ApiError::invalid(
                "model: field required (a non-empty string)",
            ))
        }
    };
    match endpoint {
        Endpoint::Messages | Endpoint::CountTokens | Endpoint::Chat => match head.messages {
            Some(Some(b'[')) => {}
            Some(_) => return Err(ApiError::invalid("messages: must be an array")),
            None => return Err(ApiError::invalid("messages: field required")),
        },
        Endpoint::Responses => {
            if let Some(c) = head.input {
                if !matches!(c, Some(b'[') | Some(b'"')) {
                    return Err(ApiError::invalid("input: must be a string or an array"));
                }
            }
        }
        _ => {}
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
                let serde = check_with_serde(endpoint, body).map_err(|e| e.message);
                assert_eq!(fast, serde, "{}", String::from_utf8_lossy(body));
            }
        }
    }
}
