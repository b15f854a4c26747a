//! The conversion of neutral `{role, content}` patch messages into each provider's shape.

use serde_json::{json, Map, Value};

use crate::route::Endpoint;

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
}
