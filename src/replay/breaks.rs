//! Prefix breaks: where a request's prompt first differs from the previous request of the
//! same session, by section (`tools`, `system`, `messages`). Markers are ignored and a
//! string content equals its single text block, as the provider's cache key does.

use crate::providers::Endpoint;
use serde_json::{json, Value};

/// The cache-relevant shape of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    model: String,
    tools: [u8; 32],
    system: [u8; 32],
    messages: Vec<[u8; 32]>,
}

/// The provider's cache key ignores markers, and a string content equals its single text
/// block: the session layer's canonical form says exactly that.
fn hash(v: &Value) -> [u8; 32] {
    crate::session::normalize::key_of_bytes(&crate::session::normalize::canonical_bytes(v))
}

impl Fingerprint {
    pub fn of(endpoint: Endpoint, body: &Value) -> Fingerprint {
        let get = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let (system, messages): (Value, Vec<Value>) = match endpoint {
            Endpoint::Chat => {
                let all = body
                    .get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let lead = all
                    .iter()
                    .take_while(|m| {
                        matches!(
                            m.get("role").and_then(Value::as_str),
                            Some("system" | "developer")
                        )
                    })
                    .count();
                (Value::Array(all[..lead].to_vec()), all[lead..].to_vec())
            }
            Endpoint::Responses => {
                let input = match body.get("input") {
                    Some(Value::Array(items)) => items.clone(),
                    Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
                    _ => Vec::new(),
                };
                (get("instructions"), input)
            }
            _ => (
                match get("system") {
                    Value::String(text) => json!([{"type": "text", "text": text}]),
                    other => other,
                },
                body.get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        Fingerprint {
            model,
            tools: hash(&get("tools")),
            system: hash(&system),
            messages: messages.iter().map(hash).collect(),
        }
    }

    /// The same prompt without its last `n` messages (the uncached tail).
    pub fn without_tail(mut self, n: usize) -> Fingerprint {
        self.messages
            .truncate(self.messages.len().saturating_sub(n));
        self
    }

    /// The section where `self` stops extending `previous`, if it does. A model change
    /// breaks everything, reported as `tools` (the start of the prompt).
    pub fn break_from(&self, previous: &Fingerprint) -> Option<&'static str> {
        if self.model != previous.model || self.tools != previous.tools {
            Some("tools")
        } else if self.system != previous.system {
            Some("system")
        } else if !self.messages.starts_with(&previous.messages) {
            Some("messages")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(v: Value) -> Fingerprint {
        Fingerprint::of(Endpoint::Messages, &v)
    }

    #[test]
    fn growth_is_not_a_break_but_edits_are() {
        let a = fp(
            json!({"model": "m", "system": "s", "messages": [{"role": "user", "content": "hi"}]}),
        );
        let grown = fp(
            json!({"model": "m", "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "yo"}]}),
        );
        assert_eq!(grown.break_from(&a), None);
        let sys = fp(json!({"model": "m", "system": "s2", "messages": []}));
        assert_eq!(sys.break_from(&a), Some("system"));
        let msg = fp(
            json!({"model": "m", "system": "s", "messages": [{"role": "user", "content": "bye"}]}),
        );
        assert_eq!(msg.break_from(&a), Some("messages"));
        let tools =
            fp(json!({"model": "m", "tools": [{"name": "bash"}], "system": "s", "messages": []}));
        assert_eq!(tools.break_from(&a), Some("tools"));
    }
}
