//! OpenAI explicit cache breakpoints (GPT-5.6 and later) in `auto` mode.
//!
//! These models cache at breakpoints: in the default `implicit` mode the end of the prompt
//! plus up to three `prompt_cache_breakpoint: {"mode": "explicit"}` markers on content
//! parts, in `explicit` mode up to four markers and nothing without one (openai-python
//! `PromptCacheOptions` / `PromptCacheBreakpoint`; see `cache_model::openai`). The end of
//! the prompt is what the next request of a conversation reads, so `auto` adds a marker only
//! where that end is not the reusable prefix, in this priority:
//!
//! 1. the last history message, when a request-only tail follows it or the request is in
//!    `explicit` mode (the tail changes every request; `explicit` writes nothing else);
//! 2. the last history message before an injection point (`before_last_user_prompt`);
//! 3. the end of the system prompt (Chat's leading system messages, Responses' leading
//!    developer or system items), which other conversations with the same prompt share.
//!
//! The client's own markers stay and count against the model's limit
//! ([`crate::models::explicit_breakpoints`]). A marker edits only its message: a string
//! content becomes one text part holding the same string.

use bytes::Bytes;

use crate::envelope::{Envelope, Payload, SystemForm};
use crate::json::scan::{self, Span};
use crate::route::Endpoint;

const MARKER: &str = r#""prompt_cache_breakpoint":{"mode":"explicit"}"#;
/// Below this many bytes the prefix is surely under OpenAI's 1024-token minimum.
const MIN_PREFIX_BYTES: usize = 1024;

/// `compiled` (`env` compiled) with explicit breakpoints added, for models that take
/// them; otherwise `compiled` as it is.
pub(crate) fn explicit_breakpoints(env: &Envelope, compiled: Payload) -> Payload {
    let Some(limit) = crate::models::explicit_breakpoints(&env.meta.model) else {
        return compiled;
    };
    let whole = compiled.to_bytes();
    let b: &[u8] = &whole;
    let key = env.wire().history_key();
    let Some(items) = scan::field(b, scan::skip_ws(b, 0), key)
        .filter(|s| b.get(s.start) == Some(&b'['))
        .and_then(|s| scan::elements(b, s.start).ok())
    else {
        return compiled;
    };
    let explicit = env.option_raw("prompt_cache_options").is_some_and(|raw| {
        serde_json::from_slice::<serde_json::Value>(raw)
            .ok()
            .and_then(|v| v.get("mode")?.as_str().map(|m| m == "explicit"))
            .unwrap_or(false)
    });
    // In implicit mode the end of the prompt takes one of the writes.
    let room = (limit as usize)
        .saturating_sub(usize::from(!explicit))
        .saturating_sub(memchr::memmem::find_iter(b, b"\"prompt_cache_breakpoint\"").count());
    let head = leading_system_items(env, b, &items);
    let history_end = head_offset(env, head) + env.cached.len();
    let mut targets = Vec::new();
    if (!env.uncached.is_empty() || explicit) && history_end > 0 {
        targets.push(history_end - 1);
    }
    if let Some(first) = env.cached.iter().position(|m| m.injected) {
        if first > 0 {
            targets.push(head_offset(env, head) + first - 1);
        }
    }
    if head > 0 {
        targets.push(head - 1);
    }
    let mut edits: Vec<(Span, Vec<u8>)> = Vec::new();
    for at in targets {
        if edits.len() >= room {
            break;
        }
        let Some(span) = items.get(at) else { continue };
        if span.end < MIN_PREFIX_BYTES || edits.iter().any(|(s, _)| s.start == span.start) {
            continue;
        }
        if let Some(edit) = mark_item(b, span, env.endpoint()) {
            edits.push(edit);
        }
    }
    if edits.is_empty() {
        return compiled;
    }
    edits.sort_by_key(|(s, _)| s.start);
    let mut out = Vec::with_capacity(b.len() + edits.len() * MARKER.len());
    let mut at = 0;
    for (span, bytes) in edits {
        out.extend_from_slice(&b[at..span.start]);
        out.extend_from_slice(&bytes);
        at = span.end;
    }
    out.extend_from_slice(&b[at..]);
    Payload::from(Bytes::from(out))
}

/// How many items at the start of the compiled array are the system prompt: Chat's
/// system parts; Responses' leading developer or system items.
fn leading_system_items(env: &Envelope, b: &[u8], items: &[Span]) -> usize {
    match env.endpoint() {
        Endpoint::Chat => env.system.len(),
        _ => items
            .iter()
            .take_while(|s| {
                matches!(
                    scan::str_field(b, s.start, "role").as_deref(),
                    Some("developer") | Some("system")
                )
            })
            .count(),
    }
}

/// Where the history starts in the compiled array: after the leading system messages when
/// they are the system prompt (Chat; Responses without `instructions`), else at 0 (Codex
/// sends `instructions`, and its developer items are history items).
fn head_offset(env: &Envelope, head: usize) -> usize {
    if matches!(env.system_form, SystemForm::LeadingMessages { .. }) {
        head
    } else {
        0
    }
}

/// The edit that puts a breakpoint on the last content part of the message at `span`, or
/// `None` when it has no part that can carry one (a tool call, a non-message item).
fn mark_item(b: &[u8], span: &Span, endpoint: Endpoint) -> Option<(Span, Vec<u8>)> {
    let kind = scan::str_field(b, span.start, "type");
    if endpoint == Endpoint::Responses && kind.as_deref().is_some_and(|k| k != "message") {
        return None;
    }
    let content = scan::field(b, span.start, "content")?;
    let part_type = match (endpoint, scan::str_field(b, span.start, "role").as_deref()) {
        (Endpoint::Chat, _) => "text",
        (_, Some("assistant")) => "output_text",
        _ => "input_text",
    };
    let mut item = b[span.clone()].to_vec();
    let local = content.start - span.start..content.end - span.start;
    match b.get(content.start) {
        Some(b'"') if content.len() > 2 => {
            let mut part = format!(r#"[{{"type":"{part_type}","text":"#).into_bytes();
            part.extend_from_slice(&b[content.clone()]);
            part.extend_from_slice(format!(",{MARKER}}}]").as_bytes());
            item.splice(local, part);
        }
        Some(b'[') => {
            let last = scan::elements(b, content.start).ok()?.pop()?;
            let text_like = matches!(
                scan::str_field(b, last.start, "type").as_deref(),
                Some("text" | "input_text" | "output_text" | "image_url" | "input_image")
            );
            if !text_like || scan::field(b, last.start, "prompt_cache_breakpoint").is_some() {
                return None;
            }
            let close = last.end - 1 - span.start;
            let sep = if scan::entries(b, last.start).ok()?.is_empty() {
                ""
            } else {
                ","
            };
            item.splice(close..close, format!("{sep}{MARKER}").into_bytes());
        }
        _ => return None,
    }
    Some((span.clone(), item))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{BreakpointMode, CompileOptions};
    use serde_json::{json, Value};

    fn compile(endpoint: Endpoint, body: &Value) -> Value {
        let env = crate::providers::parse_envelope(
            endpoint,
            Bytes::from(serde_json::to_vec(body).unwrap()),
        )
        .unwrap();
        let out = env.compile_with_markers(&CompileOptions {
            breakpoints: BreakpointMode::Auto {
                ttl: Default::default(),
            },
            ..Default::default()
        });
        serde_json::from_slice(&out.to_bytes()).unwrap()
    }

    fn marked(v: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let items = v.get("messages").or_else(|| v.get("input")).unwrap();
        for (i, m) in items.as_array().unwrap().iter().enumerate() {
            for p in m["content"].as_array().into_iter().flatten() {
                if p.get("prompt_cache_breakpoint").is_some() {
                    out.push(format!("{i}:{}", p["type"].as_str().unwrap()));
                }
            }
        }
        out
    }

    #[test]
    fn chat_marks_the_system_prompt_and_keeps_older_models_untouched() {
        let body = json!({"model": "gpt-5.6", "messages": [
            {"role": "system", "content": "Project rules. ".repeat(300)},
            {"role": "user", "content": "first question"}]});
        let out = compile(Endpoint::Chat, &body);
        assert_eq!(marked(&out), ["0:text"]);
        assert_eq!(
            out["messages"][0]["content"][0]["text"],
            body["messages"][0]["content"]
        );
        let mut old = body.clone();
        old["model"] = json!("gpt-5");
        assert_eq!(compile(Endpoint::Chat, &old), old);
    }

    #[test]
    fn explicit_mode_marks_the_end_of_the_history_within_the_limit() {
        let body = json!({"model": "gpt-5.6", "prompt_cache_options": {"mode": "explicit"},
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules. ".repeat(400)}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "question", "prompt_cache_breakpoint": {"mode": "explicit"}}]},
                {"type": "message", "role": "assistant", "content": "answer"},
                {"type": "message", "role": "user", "content": "more"}]});
        let out = compile(Endpoint::Responses, &body);
        assert_eq!(
            marked(&out),
            ["0:input_text", "1:input_text", "3:input_text"]
        );
    }
}
