//! The Gemini `generateContent` request as the envelope reads and writes it:
//! `systemInstruction` (a content object; each text part a system part), `tools` (each a
//! `Tool` of function declarations), `contents` (the history). The model is in the path.

use serde_json::{json, Value};

use super::Gemini;
use crate::envelope::message::{self, Content, Part, PatchMessage};
use crate::envelope::parse::{self as read, Top};
use crate::envelope::{Element, Envelope, MsgKind, Owned, SystemForm, SystemPart, Wire};
use crate::error::ApiError;
use crate::json::scan::{self, Span};
use crate::route::{Endpoint, Provider};

/// The system instruction's key.
pub const SYSTEM_KEY: &str = "systemInstruction";

impl Wire for Gemini {
    fn provider(&self) -> Provider {
        Provider::Gemini
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::GenerateContent
    }

    fn history_key(&self) -> &'static str {
        "contents"
    }

    fn model_in_body(&self) -> bool {
        false
    }

    fn owned_keys(&self) -> &'static [&'static str] {
        &[SYSTEM_KEY, "contents", "tools"]
    }

    fn split_prompt(&self, env: &mut Envelope, top: &Top<'_>) -> Result<(), ApiError> {
        env.messages_orig = top.array("contents")?;
        read::check_objects(&env.body, &env.messages_orig, "contents")?;
        env.cached = read::elements_of(&env.messages_orig, 0);
        match top.find(SYSTEM_KEY) {
            Some(span) if env.body[span.start] == b'{' => content_system(env, span),
            Some(span) if &env.body[span.clone()] == b"null" => Ok(()),
            Some(_) => Err(ApiError::invalid(
                "systemInstruction must be a content object with parts",
            )),
            None => Ok(()),
        }
    }

    fn owned(&self, key: &str, _form: &SystemForm, _marks_system: bool) -> Option<Owned> {
        match key {
            "tools" => Some(Owned::Tools),
            "contents" => Some(Owned::History),
            SYSTEM_KEY => Some(Owned::WireSystem),
            _ => None,
        }
    }

    fn system_value(&self, env: &Envelope) -> Option<Vec<u8>> {
        let parts = env.system_parts();
        if parts.is_empty() {
            return None;
        }
        let mut array = b"[".to_vec();
        let raws = env.system_raw().zip(env.system_client_raw());
        for (i, (part, (raw, client))) in parts.iter().zip(raws).enumerate() {
            if i > 0 {
                array.push(b',');
            }
            let text = serde_json::to_vec(&part.text).unwrap_or_default();
            match raw {
                Some(raw) => array.extend_from_slice(raw),
                None => match client {
                    Some(own) => array.extend(
                        scan::replace_field(own, scan::skip_ws(own, 0), "text", &text)
                            .unwrap_or_else(|| text_part(&text)),
                    ),
                    None => array.extend(text_part(&text)),
                },
            }
        }
        array.push(b']');
        // The client's object keeps its other fields (its `role`); only its parts change.
        let own = env.option_raw(SYSTEM_KEY);
        Some(
            own.and_then(|o| scan::replace_field(o, scan::skip_ws(o, 0), "parts", &array))
                .unwrap_or_else(|| {
                    let mut out = br#"{"parts":"#.to_vec();
                    out.extend_from_slice(&array);
                    out.push(b'}');
                    out
                }),
        )
    }

    fn classify(&self, message: &[u8]) -> MsgKind {
        super::message_kind(message)
    }

    fn message_text(&self, message: &[u8], ends: usize) -> String {
        super::text_of(message, ends)
    }

    fn to_wire_tool(&self, name: &Value, description: &Value, parameters: &Value) -> Value {
        json!({"functionDeclarations": [
            {"name": name, "description": description, "parametersJsonSchema": parameters}
        ]})
    }

    fn to_wire_message(&self, neutral: &Value) -> Result<Value, String> {
        match message::read(neutral)? {
            PatchMessage::Own { .. } if neutral.get("parts").is_some_and(Value::is_array) => {
                Ok(neutral.clone())
            }
            PatchMessage::Own { .. } => Err(message::NOT_A_MESSAGE.into()),
            PatchMessage::Neutral { role, content } => {
                let role = if role == "assistant" { "model" } else { "user" };
                let parts: Vec<Value> = match content {
                    Content::Text(text) => vec![json!({"text": text})],
                    Content::Parts(parts) => parts.iter().map(part).collect(),
                };
                Ok(json!({"role": role, "parts": parts}))
            }
        }
    }
}

/// A neutral content part as a Gemini part.
fn part(p: &Part<'_>) -> Value {
    match p {
        Part::Text(text) => json!({"text": text}),
        Part::Image(image) => match image.url {
            Some(url) => json!({"fileData": {"fileUri": url}}),
            None => json!({"inlineData": {"mimeType": image.media_type, "data": image.data}}),
        },
    }
}

/// A text part of the given JSON string literal.
fn text_part(literal: &[u8]) -> Vec<u8> {
    let mut out = br#"{"text":"#.to_vec();
    out.extend_from_slice(literal);
    out.push(b'}');
    out
}

/// `systemInstruction` as a content object: each text part is a system part; a part that
/// is not text (none is expected) keeps its place as an empty part.
fn content_system(env: &mut Envelope, span: Span) -> Result<(), ApiError> {
    let b = &env.body;
    let Some(parts) = scan::field(b, span.start, "parts") else {
        return Ok(());
    };
    let elems = scan::elements(b, parts.start)
        .map_err(|e| ApiError::invalid(format!("systemInstruction.parts: {e}")))?;
    for (i, p) in elems.into_iter().enumerate() {
        if b[p.start] != b'{' {
            return Err(ApiError::invalid(format!(
                "systemInstruction.parts[{i}] must be an object"
            )));
        }
        let text = scan::field(b, p.start, "text")
            .and_then(|t| read::system_text(b, &t))
            .unwrap_or_default();
        env.system.push(SystemPart::new(
            read::base_part_name(i),
            text,
            Some(Element::orig(i, p)),
        ));
    }
    env.system_form = SystemForm::Blocks(parts);
    Ok(())
}
