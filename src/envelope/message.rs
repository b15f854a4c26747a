//! What a message is (role, tool calls, tool results) per provider, the provider's rules on
//! neighbouring messages, and the conversion of neutral `{role, content}` messages.

use serde_json::{json, Map, Value};

use super::scan;
use crate::providers::Endpoint;

/// The facts about one message that ordering rules and turn detection need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MsgKind {
    pub role: String,
    /// Responses item `type` (empty for other providers).
    pub item_type: String,
    /// Carries a tool call (Anthropic `tool_use`, Chat `tool_calls`, Responses `*_call`).
    pub calls_tool: bool,
    /// Carries a tool result (Anthropic `tool_result`, Chat role `tool`, Responses `*_output`).
    pub tool_result: bool,
    /// Carries something besides tool results (text, images, ...).
    pub other_content: bool,
}

impl MsgKind {
    pub fn of(endpoint: Endpoint, b: &[u8]) -> MsgKind {
        let mut kind = MsgKind::default();
        let Ok(entries) = scan::entries(b, scan::skip_ws(b, 0)) else {
            return kind;
        };
        let get = |name: &str| entries.iter().find(|e| scan::key_is(b, &e.key, name));
        let text = |name: &str| get(name).and_then(|e| scan::decode_str(b, &e.value));
        kind.role = text("role").unwrap_or_default();
        match endpoint {
            Endpoint::Chat => {
                kind.tool_result = kind.role == "tool";
                kind.calls_tool = get("tool_calls")
                    .and_then(|e| scan::elements(b, e.value.start).ok())
                    .is_some_and(|calls| !calls.is_empty());
                kind.other_content = !kind.tool_result;
            }
            Endpoint::Responses => {
                kind.item_type = text("type").unwrap_or_else(|| "message".into());
                let t = kind.item_type.as_str();
                kind.tool_result = t.ends_with("_call_output");
                kind.calls_tool = t.ends_with("_call");
                kind.other_content = !kind.tool_result;
            }
            _ => match get("content") {
                Some(e) if b.get(e.value.start) == Some(&b'[') => {
                    for block in scan::elements(b, e.value.start).unwrap_or_default() {
                        match scan::str_field(b, block.start, "type").as_deref() {
                            Some("tool_use") => kind.calls_tool = true,
                            Some("tool_result") => kind.tool_result = true,
                            _ => kind.other_content = true,
                        }
                    }
                }
                Some(_) => kind.other_content = true,
                None => {}
            },
        }
        kind
    }

    /// A user message that starts a turn: text or images, and no tool results (a tool
    /// result with a reminder text appended, as Claude Code sends, is still the tool loop;
    /// a message could not be inserted before it anyway).
    pub fn is_user_prompt(&self) -> bool {
        self.role == "user" && self.other_content && !self.tool_result
    }
}

/// The provider's rule for two neighbouring messages (`None` = start or end of the list).
/// Returns why the pair would be rejected.
pub(crate) fn check_boundary(
    endpoint: Endpoint,
    prev: Option<&MsgKind>,
    next: Option<&MsgKind>,
) -> Result<(), String> {
    let separated = "a tool result would be separated from its tool call";
    match endpoint {
        Endpoint::Responses => {
            if let Some(n) = next.filter(|n| n.tool_result) {
                let ok = prev
                    .is_some_and(|p| p.calls_tool || p.tool_result || p.item_type == "reasoning");
                if !ok {
                    return Err(format!("{separated} (item `{}`)", n.item_type));
                }
            }
            if let (Some(p), Some(n)) = (prev, next) {
                if p.calls_tool && !(n.tool_result || n.calls_tool || n.item_type == "reasoning") {
                    return Err(separated.into());
                }
                if p.item_type == "reasoning" && n.item_type == "message" && n.role != "assistant" {
                    return Err("a reasoning item would be separated from its output".into());
                }
            }
        }
        _ => {
            if let Some(p) = prev.filter(|p| p.calls_tool) {
                if !next.is_some_and(|n| n.tool_result) {
                    let _ = p;
                    return Err(separated.into());
                }
            }
            if next.is_some_and(|n| n.tool_result) {
                let chat_chain = endpoint == Endpoint::Chat && prev.is_some_and(|p| p.tool_result);
                if !(prev.is_some_and(|p| p.calls_tool) || chat_chain) {
                    return Err(separated.into());
                }
            }
        }
    }
    Ok(())
}

fn neutral_block(block: &Value) -> bool {
    let Some(obj) = block.as_object() else {
        return false;
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => obj.keys().all(|k| k == "type" || k == "text"),
        Some("image") => {
            !obj.contains_key("source") && (obj.contains_key("data") || obj.contains_key("url"))
        }
        _ => false,
    }
}

/// Whether `m` is in the neutral `{role, content}` form.
fn is_neutral(m: &Map<String, Value>) -> bool {
    let role_ok = matches!(
        m.get("role").and_then(Value::as_str),
        Some("user" | "assistant" | "custom")
    );
    let content_ok = match m.get("content") {
        Some(Value::String(_)) => true,
        Some(Value::Array(blocks)) => blocks.iter().all(neutral_block),
        _ => false,
    };
    role_ok && content_ok && m.keys().all(|k| k == "role" || k == "content")
}

fn image_url(block: &Map<String, Value>) -> String {
    if let Some(url) = block.get("url").and_then(Value::as_str) {
        return url.to_owned();
    }
    let mime = block
        .get("mimeType")
        .or_else(|| block.get("media_type"))
        .and_then(Value::as_str)
        .unwrap_or("image/png");
    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
    format!("data:{mime};base64,{data}")
}

fn convert_block(
    endpoint: Endpoint,
    role: &str,
    block: &Map<String, Value>,
) -> Result<Value, String> {
    let text = block
        .get("text")
        .cloned()
        .unwrap_or(Value::String(String::new()));
    let is_image = block.get("type").and_then(Value::as_str) == Some("image");
    if is_image && role == "assistant" {
        return Err("an assistant message cannot carry images".into());
    }
    Ok(match (endpoint, is_image) {
        (Endpoint::Chat, false) => json!({"type": "text", "text": text}),
        (Endpoint::Chat, true) => {
            json!({"type": "image_url", "image_url": {"url": image_url(block)}})
        }
        (Endpoint::Responses, false) if role == "assistant" => {
            json!({"type": "output_text", "text": text})
        }
        (Endpoint::Responses, false) => json!({"type": "input_text", "text": text}),
        (Endpoint::Responses, true) => {
            json!({"type": "input_image", "image_url": image_url(block)})
        }
        (_, false) => json!({"type": "text", "text": text}),
        (_, true) => match block.get("url").and_then(Value::as_str) {
            Some(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
            None => json!({"type": "image", "source": {
                "type": "base64",
                "media_type": block.get("mimeType").or_else(|| block.get("media_type"))
                    .and_then(Value::as_str).unwrap_or("image/png"),
                "data": block.get("data").and_then(Value::as_str).unwrap_or(""),
            }}),
        },
    })
}

/// Convert a patch message to the provider's own shape. Neutral `{role, content}` messages
/// are converted (`custom` is sent as `user`); provider-shape messages pass as they are.
pub fn neutral_to_provider(endpoint: Endpoint, message: &Value) -> Result<Value, String> {
    let Some(m) = message.as_object() else {
        return Err("a message must be a JSON object".into());
    };
    if !is_neutral(m) {
        let has_role = m.get("role").and_then(Value::as_str).is_some();
        let has_type = m.get("type").and_then(Value::as_str).is_some();
        return match endpoint {
            Endpoint::Responses if has_role || has_type => Ok(message.clone()),
            _ if has_role && (m.contains_key("content") || endpoint == Endpoint::Chat) => {
                Ok(message.clone())
            }
            _ => Err("a message needs `role` (user, assistant or custom) and `content`".into()),
        };
    }
    let role = match m.get("role").and_then(Value::as_str) {
        Some("assistant") => "assistant",
        _ => "user",
    };
    let content = m.get("content").cloned().unwrap_or(Value::Null);
    let blocks: Vec<Value> = match &content {
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(Value::as_object)
            .map(|b| convert_block(endpoint, role, b))
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    Ok(match endpoint {
        Endpoint::Responses => {
            let parts = match &content {
                Value::String(text) => {
                    let t = if role == "assistant" {
                        "output_text"
                    } else {
                        "input_text"
                    };
                    vec![json!({"type": t, "text": text})]
                }
                _ => blocks,
            };
            json!({"type": "message", "role": role, "content": parts})
        }
        _ => match content {
            Value::String(text) => json!({"role": role, "content": text}),
            _ => json!({"role": role, "content": blocks}),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutral_messages_convert_per_provider() {
        let m = json!({"role": "custom", "content": "remember this"});
        assert_eq!(
            neutral_to_provider(Endpoint::Messages, &m).unwrap(),
            json!({"role": "user", "content": "remember this"})
        );
        assert_eq!(
            neutral_to_provider(Endpoint::Responses, &m).unwrap(),
            json!({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "remember this"}]})
        );
        let img = json!({"role": "user", "content": [
            {"type": "text", "text": "see"},
            {"type": "image", "data": "AAAA", "mimeType": "image/jpeg"}]});
        let chat = neutral_to_provider(Endpoint::Chat, &img).unwrap();
        assert_eq!(
            chat["content"][1]["image_url"]["url"],
            "data:image/jpeg;base64,AAAA"
        );
        let anth = neutral_to_provider(Endpoint::Messages, &img).unwrap();
        assert_eq!(anth["content"][1]["source"]["media_type"], "image/jpeg");
        assert!(neutral_to_provider(Endpoint::Messages, &json!({"content": "x"})).is_err());
        assert!(neutral_to_provider(Endpoint::Messages, &json!("x")).is_err());
    }

    #[test]
    fn kinds_and_boundaries() {
        let tu = br#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]}"#;
        let tr = br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}"#;
        let u = br#"{"role":"user","content":"hi"}"#;
        let (tu, tr, u) = (
            MsgKind::of(Endpoint::Messages, tu),
            MsgKind::of(Endpoint::Messages, tr),
            MsgKind::of(Endpoint::Messages, u),
        );
        assert!(u.is_user_prompt() && !tr.is_user_prompt());
        assert!(check_boundary(Endpoint::Messages, Some(&tu), Some(&tr)).is_ok());
        assert!(check_boundary(Endpoint::Messages, Some(&tu), Some(&u)).is_err());
        assert!(check_boundary(Endpoint::Messages, Some(&u), Some(&tr)).is_err());
        let call = MsgKind::of(
            Endpoint::Responses,
            br#"{"type":"function_call","call_id":"c"}"#,
        );
        let out = MsgKind::of(
            Endpoint::Responses,
            br#"{"type":"function_call_output","call_id":"c"}"#,
        );
        assert!(check_boundary(Endpoint::Responses, Some(&call), Some(&out)).is_ok());
        assert!(check_boundary(Endpoint::Responses, Some(&u), Some(&out)).is_err());
    }
}
