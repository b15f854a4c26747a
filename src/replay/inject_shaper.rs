//! A self-contained shaper for the injection modes on Anthropic Messages requests: it
//! edits the recorded request JSON the way cachet's pipeline places an injection.
//!
//! - `system-prompt`: the wrapped content is appended to `system` as a text block;
//! - `context-hook`: a user message inserted before the latest user prompt on every call of
//!   the turn, with a cache breakpoint on the message before it; gone at the next turn;
//! - `pinned`: the same message, kept at its original place (anchored to the client's
//!   history before it) for every later request of the session;
//! - `tail`: a user message appended after the last message, never marked.
//!
//! Requests of other endpoints pass through unchanged.

use std::collections::HashMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::policy_file::InjectSpec;
use super::shaper::{Shaped, Shaper};
use super::trace::Record;
use crate::cache_model::MAX_MARKERS;
use crate::inject::ModeChoice;
use crate::inject::{choose_arm, latest_user_prompt, wrap, Mode, Source};
use crate::provider::Endpoint;

/// A pinned injection: inserted before client message `anchor_len`, valid while the
/// client's history still starts with the anchored prefix.
struct Pin {
    spec: usize,
    anchor_len: usize,
    anchor_hash: [u8; 32],
    message: Value,
}

#[derive(Default)]
struct SessionState {
    /// The turn seen last: index and hash of its user prompt.
    turn: Option<(usize, [u8; 32])>,
    pins: Vec<Pin>,
}

pub struct InjectShaper {
    specs: Vec<(InjectSpec, Source)>,
    /// (session, spec, prompt hash) → content of that turn.
    content: HashMap<(String, usize, [u8; 32]), String>,
    sessions: HashMap<String, SessionState>,
    /// Source failures (the request then goes without that injection).
    pub source_errors: Vec<String>,
}

impl InjectShaper {
    pub fn new(specs: Vec<InjectSpec>) -> Self {
        let specs = specs
            .into_iter()
            .map(|s| {
                let source = Source::new(s.source.clone());
                (s, source)
            })
            .collect();
        InjectShaper {
            specs,
            content: HashMap::new(),
            sessions: HashMap::new(),
            source_errors: Vec::new(),
        }
    }

    /// The turn's content for one spec, fetched on the turn's first call only.
    fn content_for(&mut self, session: &str, spec: usize, prompt: &str, hash: [u8; 32]) -> String {
        let key = (session.to_string(), spec, hash);
        if let Some(text) = self.content.get(&key) {
            return text.clone();
        }
        let text = match self.specs[spec].1.fetch_local(prompt) {
            Ok(text) => text,
            Err(e) => {
                self.source_errors
                    .push(format!("{}: {e}", self.specs[spec].0.id));
                String::new()
            }
        };
        self.content.insert(key, text.clone());
        text
    }
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Hash of a history prefix, ignoring `cache_control` (markers move between requests).
fn prefix_hash(messages: &[Value]) -> [u8; 32] {
    let mut h = Sha256::new();
    for m in messages {
        h.update(strip_markers(m).to_string().as_bytes());
        h.update(b"\n");
    }
    h.finalize().into()
}

pub(crate) fn strip_markers(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), strip_markers(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_markers).collect()),
        other => other.clone(),
    }
}

fn count_markers(v: &Value) -> usize {
    match v {
        Value::Object(o) => {
            usize::from(o.contains_key("cache_control"))
                + o.values().map(count_markers).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_markers).sum(),
        _ => 0,
    }
}

/// Put a 5-minute marker on the last block of `message` (string content becomes a block).
fn mark_last_block(message: &mut Value) {
    let Some(obj) = message.as_object_mut() else {
        return;
    };
    if let Some(Value::String(s)) = obj.get("content") {
        let block = json!([{"type": "text", "text": s}]);
        obj.insert("content".into(), block);
    }
    if let Some(last) = obj
        .get_mut("content")
        .and_then(Value::as_array_mut)
        .and_then(|blocks| blocks.last_mut())
        .and_then(Value::as_object_mut)
    {
        last.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
}

fn user_text_message(content: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": wrap(content)}]})
}

impl Shaper for InjectShaper {
    fn shape(&mut self, record: &Record) -> anyhow::Result<Shaped> {
        let mut body = record.body.clone();
        if record.endpoint() != Endpoint::Messages || self.specs.is_empty() {
            return Ok(Shaped {
                body,
                variant: None,
                uncached_tail: 0,
            });
        }
        let Some(client) = body.get("messages").and_then(Value::as_array).cloned() else {
            return Ok(Shaped {
                body,
                variant: None,
                uncached_tail: 0,
            });
        };
        let Some((prompt_at, prompt)) = latest_user_prompt(&client) else {
            return Ok(Shaped {
                body,
                variant: None,
                uncached_tail: 0,
            });
        };
        let session = record.session.clone();
        let prompt_hash = sha(prompt.as_bytes());
        let new_turn = {
            let state = self.sessions.entry(session.clone()).or_default();
            let new = state.turn != Some((prompt_at, prompt_hash));
            state.turn = Some((prompt_at, prompt_hash));
            new
        };

        let mut system_parts: Vec<String> = Vec::new();
        let mut inserts_now: Vec<Value> = Vec::new();
        let mut tail: Vec<Value> = Vec::new();
        let mut mark_before_prompt = false;
        let mut variant = None;
        for spec in 0..self.specs.len() {
            let mode = match &self.specs[spec].0.mode {
                ModeChoice::One(m) => Some(*m),
                ModeChoice::Ab(arms) => choose_arm(&session, arms),
            };
            let Some(mode) = mode else { continue };
            variant.get_or_insert_with(|| mode.label().to_string());
            let content = self.content_for(&session, spec, &prompt, prompt_hash);
            if content.trim().is_empty() {
                continue;
            }
            match mode {
                Mode::SystemPrompt => system_parts.push(wrap(&content)),
                Mode::ContextHook => {
                    inserts_now.push(user_text_message(&content));
                    mark_before_prompt = true;
                }
                Mode::Pinned if new_turn => {
                    let state = self.sessions.entry(session.clone()).or_default();
                    state.pins.push(Pin {
                        spec,
                        anchor_len: prompt_at,
                        anchor_hash: prefix_hash(&client[..prompt_at]),
                        message: user_text_message(&content),
                    });
                }
                Mode::Pinned => {}
                Mode::Tail => tail.push(user_text_message(&content)),
            }
        }

        // Pins whose anchor still matches the client's history, in pin order.
        let mut inserts: Vec<(usize, Value)> = Vec::new();
        if let Some(state) = self.sessions.get(&session) {
            for pin in &state.pins {
                let valid = pin.spec < self.specs.len()
                    && client.len() >= pin.anchor_len
                    && prefix_hash(&client[..pin.anchor_len]) == pin.anchor_hash;
                if valid {
                    inserts.push((pin.anchor_len, pin.message.clone()));
                }
            }
        }
        inserts.extend(inserts_now.into_iter().map(|m| (prompt_at, m)));
        inserts.sort_by_key(|(at, _)| *at); // stable: pin order within one anchor

        let mut budget = MAX_MARKERS.saturating_sub(count_markers(&body));
        let mut messages = Vec::with_capacity(client.len() + inserts.len() + tail.len());
        let mut pending = inserts.into_iter().peekable();
        for (i, mut message) in client.into_iter().enumerate() {
            if mark_before_prompt
                && i + 1 == prompt_at
                && budget > 0
                && count_markers(&message) == 0
            {
                mark_last_block(&mut message);
                budget -= 1;
            }
            while let Some((_, m)) = pending.next_if(|(at, _)| *at == i) {
                messages.push(m);
            }
            messages.push(message);
        }
        messages.extend(pending.map(|(_, m)| m));
        let uncached_tail = tail.len();
        messages.extend(tail);

        if let Some(obj) = body.as_object_mut() {
            obj.insert("messages".into(), Value::Array(messages));
            if !system_parts.is_empty() {
                let mut blocks = match obj.remove("system") {
                    Some(Value::String(s)) if !s.is_empty() => {
                        vec![json!({"type": "text", "text": s})]
                    }
                    Some(Value::Array(a)) => a,
                    _ => Vec::new(),
                };
                blocks.extend(
                    system_parts
                        .into_iter()
                        .map(|t| json!({"type": "text", "text": t})),
                );
                obj.insert("system".into(), Value::Array(blocks));
            }
        }
        Ok(Shaped {
            body,
            variant,
            uncached_tail,
        })
    }
}
