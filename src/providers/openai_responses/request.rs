//! The Responses request as the envelope reads and writes it: `instructions` is the system
//! prompt (else the leading `system` or `developer` message items are, as pi sends them),
//! `input` the history (a plain string is one user message), `tools`.

use bytes::Bytes;
use serde_json::{json, Value};

use super::Responses;
use crate::envelope::message::{self, Content, Part, PatchMessage};
use crate::envelope::parse::{self as read, Top};
use crate::envelope::{BreakpointMode, CompileOptions, Element, Envelope, MsgKind, Owned};
use crate::envelope::{HistoryShape, Payload, SystemForm, Wire};
use crate::error::ApiError;
use crate::providers::openai::request as openai;
use crate::route::{Endpoint, Provider};

impl Wire for Responses {
    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    fn history_key(&self) -> &'static str {
        "input"
    }

    fn history_shape(&self) -> HistoryShape {
        HistoryShape::ArrayOrText
    }

    fn owned_keys(&self) -> &'static [&'static str] {
        &["model", "instructions", "input", "tools"]
    }

    fn split_prompt(&self, env: &mut Envelope, top: &Top<'_>) -> Result<(), ApiError> {
        let instructions = top.find("instructions");
        if let Some(span) = instructions.clone() {
            read::text_system(env, span, "instructions")?;
        }
        match top.find("input") {
            Some(span) if env.body[span.start] == b'"' => {
                // A plain string is one user message.
                let item = format!(
                    r#"{{"type":"message","role":"user","content":{}}}"#,
                    String::from_utf8_lossy(&env.body[span.clone()])
                );
                env.cached.push(Element::new(Bytes::from(item)));
                env.input_text = Some(span);
            }
            _ => {
                env.messages_orig = top.array("input")?;
                read::check_objects(&env.body, &env.messages_orig, "input")?;
                if env.system.is_empty() && instructions.is_none() {
                    openai::split_leading_system(env, None);
                } else {
                    env.cached = read::elements_of(&env.messages_orig, 0);
                }
            }
        }
        Ok(())
    }

    fn owned(&self, key: &str, form: &SystemForm, _marks_system: bool) -> Option<Owned> {
        match key {
            "tools" => Some(Owned::Tools),
            "input" => Some(Owned::History),
            "instructions" if matches!(form, SystemForm::LeadingMessages { .. }) => None,
            "instructions" => Some(Owned::TextSystem),
            _ => None,
        }
    }

    fn classify(&self, message: &[u8]) -> MsgKind {
        super::message_kind(message)
    }

    fn message_text(&self, message: &[u8], ends: usize) -> String {
        crate::providers::text_of(message, ends)
    }

    fn to_wire_tool(&self, name: &Value, description: &Value, parameters: &Value) -> Value {
        json!({"type": "function", "name": name, "description": description, "parameters": parameters})
    }

    fn to_wire_message(&self, neutral: &Value) -> Result<Value, String> {
        match message::read(neutral)? {
            PatchMessage::Own {
                has_role, has_type, ..
            } if has_role || has_type => Ok(neutral.clone()),
            PatchMessage::Own { .. } => Err(message::NOT_A_MESSAGE.into()),
            PatchMessage::Neutral { role, content } => {
                let text_type = if role == "assistant" {
                    "output_text"
                } else {
                    "input_text"
                };
                let parts: Vec<Value> = match content {
                    Content::Text(text) => vec![json!({"type": text_type, "text": text})],
                    Content::Parts(parts) => parts
                        .iter()
                        .map(|p| match p {
                            Part::Text(text) => json!({"type": text_type, "text": text}),
                            Part::Image(image) => {
                                json!({"type": "input_image", "image_url": image.as_url()})
                            }
                        })
                        .collect(),
                };
                Ok(json!({"type": "message", "role": role, "content": parts}))
            }
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
