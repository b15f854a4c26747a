//! Messages given in patches (DESIGN §3): the neutral `{role, content}` shape, read here,
//! which each wire writes in its own shape ([`super::Wire::to_wire_message`]); a message
//! already in a provider's shape passes as it is, where that wire accepts it.

use serde_json::{Map, Value};

/// A patch message, as read.
pub enum PatchMessage<'a> {
    /// The neutral shape: its role (`custom` is sent as `user`) and content.
    Neutral {
        role: &'static str,
        content: Content<'a>,
    },
    /// A message in some provider's own shape, with what a wire checks of it.
    Own {
        has_role: bool,
        has_type: bool,
        has_content: bool,
    },
}

/// A neutral message's content.
pub enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

/// One part of a neutral message's content.
pub enum Part<'a> {
    /// Its text, as given (a missing one is empty).
    Text(Value),
    Image(Image<'a>),
}

/// A neutral image part: by URL, or base64 data with its media type.
pub struct Image<'a> {
    pub url: Option<&'a str>,
    pub media_type: &'a str,
    pub data: &'a str,
}

impl Image<'_> {
    /// The image as one URL: its own, or a `data:` URL of its bytes.
    pub fn as_url(&self) -> String {
        match self.url {
            Some(url) => url.to_owned(),
            None => format!("data:{};base64,{}", self.media_type, self.data),
        }
    }
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

fn part<'a>(role: &str, block: &'a Map<String, Value>) -> Result<Part<'a>, String> {
    if block.get("type").and_then(Value::as_str) != Some("image") {
        let text = block.get("text").cloned();
        return Ok(Part::Text(text.unwrap_or(Value::String(String::new()))));
    }
    if role == "assistant" {
        return Err("an assistant message cannot carry images".into());
    }
    let str_of = |key: &str| block.get(key).and_then(Value::as_str);
    Ok(Part::Image(Image {
        url: str_of("url"),
        media_type: str_of("mimeType")
            .or_else(|| str_of("media_type"))
            .unwrap_or("image/png"),
        data: str_of("data").unwrap_or(""),
    }))
}

/// Read a patch message.
pub fn read(message: &Value) -> Result<PatchMessage<'_>, String> {
    let Some(m) = message.as_object() else {
        return Err("a message must be a JSON object".into());
    };
    if !is_neutral(m) {
        return Ok(PatchMessage::Own {
            has_role: m.get("role").and_then(Value::as_str).is_some(),
            has_type: m.get("type").and_then(Value::as_str).is_some(),
            has_content: m.contains_key("content"),
        });
    }
    let role = match m.get("role").and_then(Value::as_str) {
        Some("assistant") => "assistant",
        _ => "user",
    };
    let content = match m.get("content") {
        Some(Value::String(text)) => Content::Text(text),
        Some(Value::Array(blocks)) => Content::Parts(
            blocks
                .iter()
                .filter_map(Value::as_object)
                .map(|b| part(role, b))
                .collect::<Result<_, _>>()?,
        ),
        _ => Content::Parts(Vec::new()),
    };
    Ok(PatchMessage::Neutral { role, content })
}

/// The refusal of a message in neither the neutral shape nor one the wire accepts.
pub const NOT_A_MESSAGE: &str = "a message needs `role` (user, assistant or custom) and `content`";
