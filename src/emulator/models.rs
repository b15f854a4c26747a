//! `GET /v1/models` in each family's shape, and in the ChatGPT backend's for a client signed
//! in with ChatGPT.

use serde_json::{json, Value};

const ANTHROPIC: &[(&str, &str)] = &[
    ("claude-opus-5-5", "Claude Opus 5.5"),
    ("claude-sonnet-5-5", "Claude Sonnet 5.5"),
    ("claude-opus-5", "Claude Opus 5"),
    ("claude-sonnet-5", "Claude Sonnet 5"),
    ("claude-opus-4-6", "Claude Opus 4.6"),
    ("claude-sonnet-4-6", "Claude Sonnet 4.6"),
    ("claude-opus-4-5", "Claude Opus 4.5"),
    ("claude-sonnet-4-5", "Claude Sonnet 4.5"),
    ("claude-haiku-4-5", "Claude Haiku 4.5"),
];

const OPENAI: &[&str] = &[
    "gpt-5.6",
    "gpt-5",
    "gpt-5-mini",
    "gpt-4.1",
    "gpt-4o",
    "gpt-4o-mini",
];

pub fn anthropic_list() -> Value {
    let data: Vec<Value> = ANTHROPIC
        .iter()
        .map(|(id, name)| {
            json!({"type": "model", "id": id, "display_name": name, "created_at": "2025-01-01T00:00:00Z"})
        })
        .collect();
    json!({
        "data": data,
        "has_more": false,
        "first_id": ANTHROPIC.first().map(|m| m.0),
        "last_id": ANTHROPIC.last().map(|m| m.0),
    })
}

pub fn openai_list(created: u64) -> Value {
    let data: Vec<Value> = OPENAI
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": created, "owned_by": "cachet-emulator"}))
        .collect();
    json!({"object": "list", "data": data})
}

/// The ChatGPT backend's `/models` answer as Codex decodes it (`{"models": [...]}`,
/// openai/codex `ModelsResponse`). Empty: each entry would carry the model's instructions and
/// tool settings, which Codex takes over its own, so the emulator lists none and the client
/// keeps the models it ships with.
pub fn chatgpt_list() -> Value {
    json!({"models": []})
}
