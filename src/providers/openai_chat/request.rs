//! The Chat Completions request as the envelope reads and writes it: leading `system` or
//! `developer` messages are the system prompt (the only place Chat has for one), then the
//! history in `messages`; `tools`.

use bytes::Bytes;
use serde_json::{json, Value};

use super::Chat;
use crate::envelope::message::{self, Content, Part, PatchMessage};
use crate::envelope::parse::{self as read, Top};
use crate::envelope::{BreakpointMode, CompileOptions, Envelope, MsgKind, Owned, Payload};
use crate::envelope::{SystemForm, Wire};
use crate::error::ApiError;
use crate::providers::openai::request as openai;
use crate::route::{Endpoint, Provider};

impl Wire for Chat {
    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::Chat
    }

    fn history_key(&self) -> &'static str {
        "messages"
    }

    fn owned_keys(&self) -> &'static [&'static str] {
        &["model", "messages", "tools"]
    }

    fn split_prompt(&self, env: &mut Envelope, top: &Top<'_>) -> Result<(), ApiError> {
        if top.find("messages").is_none() {
            return Err(ApiError::invalid("messages is required"));
        }
        env.messages_orig = top.array("messages")?;
        read::check_objects(&env.body, &env.messages_orig, "messages")?;
        openai::split_leading_system(env, self.leading_system_role());
        Ok(())
    }

    fn owned(&self, key: &str, _form: &SystemForm, _marks_system: bool) -> Option<Owned> {
        match key {
            "tools" => Some(Owned::Tools),
            "messages" => Some(Owned::History),
            _ => None,
        }
    }

    fn leading_system_role(&self) -> Option<&'static str> {
        Some("system")
    }

    fn classify(&self, message: &[u8]) -> MsgKind {
        super::message_kind(message)
    }

    fn message_text(&self, message: &[u8], ends: usize) -> String {
        crate::providers::text_of(message, ends)
    }

    fn to_wire_tool(&self, name: &Value, description: &Value, parameters: &Value) -> Value {
        json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
    }

    fn to_wire_message(&self, neutral: &Value) -> Result<Value, String> {
        match message::read(neutral)? {
            PatchMessage::Own { has_role: true, .. } => Ok(neutral.clone()),
            PatchMessage::Own { .. } => Err(message::NOT_A_MESSAGE.into()),
            PatchMessage::Neutral { role, content } => Ok(match content {
                Content::Text(text) => json!({"role": role, "content": text}),
                Content::Parts(parts) => {
                    let parts: Vec<Value> = parts.iter().map(part).collect();
                    json!({"role": role, "content": parts})
                }
            }),
        }
    }

    fn option_edits(
        &self,
        env: &Envelope,
        _mode: BreakpointMode,
        opts: &CompileOptions,
        edits: &mut Vec<(String, Option<Bytes>)>,
    ) {
        openai::option_edits(env, opts, edits);
    }

    fn after_compile(&self, env: &Envelope, compiled: Payload, opts: &CompileOptions) -> Payload {
        openai::after_compile(env, compiled, opts)
    }
}

/// A neutral content part as a Chat content part.
fn part(part: &Part<'_>) -> Value {
    match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image(image) => json!({"type": "image_url", "image_url": {"url": image.as_url()}}),
    }
}
