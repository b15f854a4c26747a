//! The Anthropic Messages request as the envelope reads and writes it: `system` (a string
//! or text blocks, each block a part), `tools`, `messages`; `cache_control` markers on
//! tools, system blocks and message content blocks.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{blocks, markers, Messages};
use crate::envelope::message::{self, Content, Part, PatchMessage};
use crate::envelope::parse::{self as read, Top};
use crate::envelope::{Block, BreakpointMode, CompileOptions, Edit, Envelope, Plan, Ttl};
use crate::envelope::{Element, MsgKind, Owned, SystemForm, SystemPart, Wire};
use crate::error::ApiError;
use crate::json::scan::{self, Span};
use crate::route::{Endpoint, Provider};

impl Wire for Messages {
    fn provider(&self) -> Provider {
        self.provider
    }

    fn model_in_body(&self) -> bool {
        self.model_in_body
    }

    fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    fn history_key(&self) -> &'static str {
        "messages"
    }

    fn owned_keys(&self) -> &'static [&'static str] {
        &["model", "system", "messages", "tools"]
    }

    fn split_prompt(&self, env: &mut Envelope, top: &Top<'_>) -> Result<(), ApiError> {
        if top.find("messages").is_none() {
            return Err(ApiError::invalid("messages is required"));
        }
        env.messages_orig = top.array("messages")?;
        read::check_objects(&env.body, &env.messages_orig, "messages")?;
        env.cached = read::elements_of(&env.messages_orig, 0);
        if let Some(span) = top.find("system") {
            match env.body[span.start] {
                b'"' => read::text_system(env, span, "system")?,
                b'[' => block_system(env, span)?,
                b'n' => {}
                _ => {
                    return Err(ApiError::invalid(
                        "system must be a string or an array of text blocks",
                    ))
                }
            }
        }
        Ok(())
    }

    fn owned(&self, key: &str, form: &SystemForm, marks_system: bool) -> Option<Owned> {
        match key {
            "tools" => Some(Owned::Tools),
            "messages" => Some(Owned::History),
            "system" if matches!(form, SystemForm::Blocks(_)) || marks_system => {
                Some(Owned::BlockSystem)
            }
            "system" => Some(Owned::TextSystem),
            _ => None,
        }
    }

    fn classify(&self, message: &[u8]) -> MsgKind {
        super::message_kind(message)
    }

    fn message_blocks(&self, message: &[u8], among: usize) -> Vec<Block> {
        blocks::message_blocks_among(message, among)
    }

    fn message_text(&self, message: &[u8], ends: usize) -> String {
        crate::providers::text_of(message, ends)
    }

    fn to_wire_tool(&self, name: &Value, description: &Value, parameters: &Value) -> Value {
        json!({"name": name, "description": description, "input_schema": parameters})
    }

    fn to_wire_message(&self, neutral: &Value) -> Result<Value, String> {
        match message::read(neutral)? {
            PatchMessage::Own {
                has_role: true,
                has_content: true,
                ..
            } => Ok(neutral.clone()),
            PatchMessage::Own { .. } => Err(message::NOT_A_MESSAGE.into()),
            PatchMessage::Neutral { role, content } => Ok(match content {
                Content::Text(text) => json!({"role": role, "content": text}),
                Content::Parts(parts) => {
                    let blocks: Vec<Value> = parts.iter().map(block).collect();
                    json!({"role": role, "content": blocks})
                }
            }),
        }
    }

    fn plan_markers(&self, env: &Envelope, opts: &CompileOptions) -> (BreakpointMode, Plan) {
        markers::plan(env, opts.breakpoints, opts.kept_history)
    }

    fn option_edits(
        &self,
        env: &Envelope,
        mode: BreakpointMode,
        _opts: &CompileOptions,
        edits: &mut Vec<(String, Option<Bytes>)>,
    ) {
        if mode != BreakpointMode::Preserve && env.option_raw("cache_control").is_some() {
            // A top-level marker would count against the limit of 4 behind our back.
            edits.push(("cache_control".into(), None));
        }
    }

    fn set_marker(&self, raw: &[u8], want: Option<Ttl>) -> Option<Vec<u8>> {
        blocks::set_object_marker(raw, want)
    }

    fn marker_edits(&self, raw: &[u8], changes: &[(usize, Option<Ttl>)]) -> Option<Vec<Edit>> {
        blocks::message_marker_edits(raw, changes)
    }

    fn tail_edits(&self, raw: &[u8]) -> Option<Vec<Edit>> {
        blocks::strip_marker_edits(raw)
    }

    fn prefix_marks(&self, env: &Envelope, history: usize) -> Vec<(u32, Ttl, Option<u32>)> {
        markers::prefix_marks(env, history)
    }
}

/// A neutral content part as an Anthropic content block.
fn block(part: &Part<'_>) -> Value {
    match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image(image) => match image.url {
            Some(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
            None => json!({"type": "image", "source": {
                "type": "base64", "media_type": image.media_type, "data": image.data,
            }}),
        },
    }
}

/// `system` as text blocks: each block is a part, read from its `text`.
fn block_system(env: &mut Envelope, span: Span) -> Result<(), ApiError> {
    let b = &env.body;
    let blocks =
        scan::elements(b, span.start).map_err(|e| ApiError::invalid(format!("system: {e}")))?;
    for (i, block) in blocks.into_iter().enumerate() {
        if b[block.start] != b'{' {
            return Err(ApiError::invalid(format!(
                "system[{i}] must be a text block"
            )));
        }
        let text = scan::field(b, block.start, "text")
            .and_then(|span| read::system_text(b, &span))
            .ok_or_else(|| ApiError::invalid(format!("system[{i}] must be a text block")))?;
        env.system.push(SystemPart::new(
            read::base_part_name(i),
            text,
            Some(Element::orig(i, block)),
        ));
    }
    env.system_form = SystemForm::Blocks(span);
    Ok(())
}
