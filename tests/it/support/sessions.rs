//! Generated agent sessions built from real clients' request fixtures
//! (`tests/data/clients`): bodies that extend, fork, truncate, edit, move the client's
//! cache marker, change a field before the history, reformat, or break the JSON.

use cachet::route::{Endpoint, Provider};
use proptest::prelude::*;
use serde_json::{json, Value};

pub const CLIENTS: &[(&str, Provider, Endpoint)] = &[
    (
        "claude_code_tool_loop.json",
        Provider::Anthropic,
        Endpoint::Messages,
    ),
    (
        "pi_anthropic_tool_loop.json",
        Provider::Anthropic,
        Endpoint::Messages,
    ),
    (
        "anthropic_sdk.json",
        Provider::Anthropic,
        Endpoint::Messages,
    ),
    ("pi_chat_tool_loop.json", Provider::OpenAi, Endpoint::Chat),
    ("openai_chat_sdk.json", Provider::OpenAi, Endpoint::Chat),
    (
        "codex_tool_loop.json",
        Provider::OpenAi,
        Endpoint::Responses,
    ),
    (
        "pi_responses_tool_loop.json",
        Provider::OpenAi,
        Endpoint::Responses,
    ),
    // pi's Anthropic request with its fields in the order of an SDK call that names the
    // system prompt and the tools before the messages: the tools before the history.
    (
        "anthropic_sdk_tools_first.json",
        Provider::Anthropic,
        Endpoint::Messages,
    ),
];

pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/clients/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

pub fn history_key(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Responses => "input",
        _ => "messages",
    }
}

/// One step of a generated session.
#[derive(Debug, Clone)]
pub enum Step {
    /// Append copies of the fixture's messages (an agent's next tool call and result).
    Extend(usize),
    /// Go back to an earlier body of the session and go on from there.
    Fork(usize),
    /// Drop the last messages.
    Truncate(usize),
    /// Change one message's text.
    Edit(usize),
    /// Put a cache marker on the last message, or take it away (Claude Code moves it).
    MoveMarker,
    /// Change the value of the field before the history (the model).
    ChangeModel,
    /// Change a field after the history (agents send their tools and system prompt there):
    /// the `n`-th one from the end.
    ChangeAfter(usize),
    /// The same body pretty-printed, then compact again.
    Reformat,
    /// Send the body with its bytes cut or a stray byte after the repeated part.
    Corrupt(usize),
}

pub fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1usize..4).prop_map(Step::Extend),
        1 => (0usize..16).prop_map(Step::Fork),
        1 => (1usize..3).prop_map(Step::Truncate),
        1 => (0usize..16).prop_map(Step::Edit),
        1 => Just(Step::MoveMarker),
        1 => Just(Step::ChangeModel),
        1 => (0usize..8).prop_map(Step::ChangeAfter),
        1 => Just(Step::Reformat),
        1 => (0usize..1000).prop_map(Step::Corrupt),
    ]
}

/// Change the `back`-th field from the end among those after the history `key` (keys
/// keep their order): a string or a tool description grows, a number counts up, a flag
/// flips; a body with nothing after its history gets a field there.
fn change_after(body: &mut Value, key: &str, back: usize, tag: usize) {
    let map = body.as_object_mut().unwrap();
    let after: Vec<String> = map
        .keys()
        .skip_while(|k| *k != key)
        .skip(1)
        .cloned()
        .collect();
    let Some(name) = after.iter().rev().nth(back % after.len().max(1)) else {
        map.insert("after_history".into(), json!(tag));
        return;
    };
    let value = map.get_mut(name).unwrap();
    match value {
        Value::String(s) => s.push_str(&format!(" ({tag})")),
        Value::Number(_) => *value = json!(value.as_u64().unwrap_or(0) + 1),
        Value::Bool(b) => *b = !*b,
        Value::Array(items) if !items.is_empty() => {
            let last = items.len() - 1;
            edit_text(&mut items[last], tag);
        }
        Value::Array(items) => items.push(json!(tag)),
        Value::Object(fields) => {
            fields.insert(format!("edited_{tag}"), json!(tag));
        }
        Value::Null => *value = json!(tag),
    }
}

/// Edit a message's first text it holds, wherever the API keeps it.
fn edit_text(message: &mut Value, tag: usize) {
    fn first_string(v: &mut Value) -> Option<&mut String> {
        match v {
            Value::String(s) => Some(s),
            Value::Array(items) => items.iter_mut().find_map(first_string),
            Value::Object(map) => {
                let k = ["text", "content", "output", "arguments", "input"]
                    .into_iter()
                    .find(|k| map.get(*k).is_some_and(|v| v.is_string() || v.is_array()))?;
                map.get_mut(k).and_then(first_string)
            }
            _ => None,
        }
    }
    match first_string(message) {
        Some(s) => s.push_str(&format!(" (edited {tag})")),
        None => message["edited"] = json!(tag),
    }
}

fn toggle_marker(message: &mut Value) {
    let marker = json!({"type": "ephemeral"});
    let Some(content) = message.get_mut("content") else {
        return;
    };
    if let Some(block) = content.as_array_mut().and_then(|b| b.last_mut()) {
        if let Some(b) = block.as_object_mut() {
            if b.remove("cache_control").is_none() {
                b.insert("cache_control".into(), marker);
            }
        }
    } else if let Some(text) = content.as_str() {
        *content = json!([{"type": "text", "text": text, "cache_control": marker}]);
    }
}

/// The bodies of a generated session, as a client sends them.
pub fn session(base: &Value, endpoint: Endpoint, steps: &[Step]) -> Vec<Vec<u8>> {
    let key = history_key(endpoint);
    let pool: Vec<Value> = base[key].as_array().unwrap().clone();
    let mut body = base.clone();
    let mut sent: Vec<Value> = Vec::new();
    let mut pretty = false;
    let mut out = Vec::new();
    let render = |body: &Value, pretty: bool| match pretty {
        true => serde_json::to_vec_pretty(body).unwrap(),
        false => serde_json::to_vec(body).unwrap(),
    };
    for (n, step) in steps.iter().enumerate() {
        let history = body[key].as_array_mut().unwrap();
        match step {
            Step::Extend(k) => {
                for i in 0..*k {
                    let mut m = pool[(history.len() + i) % pool.len()].clone();
                    edit_text(&mut m, n * 10 + i);
                    history.push(m);
                }
            }
            Step::Fork(back) if !sent.is_empty() => {
                body = sent[sent.len() - 1 - back % sent.len()].clone();
                let history = body[key].as_array_mut().unwrap();
                let mut m = pool[n % pool.len()].clone();
                edit_text(&mut m, 5000 + n);
                history.push(m);
            }
            Step::Fork(_) => {}
            Step::Truncate(k) => {
                let keep = history.len().saturating_sub(*k).max(1);
                history.truncate(keep);
            }
            Step::Edit(at) => {
                let at = at % history.len();
                edit_text(&mut history[at], 9000 + n);
            }
            Step::MoveMarker => {
                if let Some(last) = history.last_mut() {
                    toggle_marker(last);
                }
            }
            Step::ChangeModel => {
                body["model"] = json!(format!("model-{n}"));
            }
            Step::ChangeAfter(back) => change_after(&mut body, key, *back, n),
            Step::Reformat => pretty = !pretty,
            Step::Corrupt(at) => {
                let mut bytes = render(&body, pretty);
                let cut = bytes.len() / 2 + at % (bytes.len() / 2);
                match at % 3 {
                    0 => bytes.truncate(cut),
                    1 => bytes.insert(cut, b'#'),
                    _ => bytes.insert(cut, b'\x01'),
                }
                out.push(bytes);
                continue;
            }
        }
        sent.push(body.clone());
        out.push(render(&body, pretty));
    }
    out
}
