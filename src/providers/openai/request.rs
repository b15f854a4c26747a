//! What Chat Completions and Responses requests share as the envelope reads and writes
//! them: system prompts sent as leading `system`/`developer` messages, `prompt_cache_key`,
//! and explicit cache breakpoints.

use bytes::Bytes;
use serde_json::Value;

use crate::envelope::parse::{self as read};
use crate::envelope::SystemPart;
use crate::envelope::{BreakpointMode, CompileOptions, Element, Envelope, Payload, SystemForm};
use crate::json::scan;

/// The leading `system`/`developer` messages are the system parts: always for Chat, for
/// Responses when it sends no `instructions`. With none, the system prompt is absent, or,
/// where the API has no other place for one (`default_role`), parts a patch adds are
/// leading messages of that role.
pub(crate) fn split_leading_system(env: &mut Envelope, default_role: Option<&str>) {
    let b = &env.body;
    let mut leading = 0;
    let mut role_of_first = None;
    for span in &env.messages_orig.elems {
        let role = scan::str_field(b, span.start, "role").unwrap_or_default();
        let kind = env.read_kind(&b[span.clone()], 1);
        let message = kind.item_type.is_empty() || kind.item_type == "message";
        if !(kind.is_instruction() && message) {
            break;
        }
        role_of_first.get_or_insert(role);
        let text = message_text(b, span.start);
        env.system.push(SystemPart::new(
            read::base_part_name(leading),
            text,
            Some(Element::orig(leading, span.clone())),
        ));
        leading += 1;
    }
    env.system_form = match (role_of_first, default_role) {
        (Some(role), _) => SystemForm::LeadingMessages { role },
        (None, Some(role)) => SystemForm::LeadingMessages { role: role.into() },
        (None, None) => SystemForm::Absent,
    };
    env.cached = read::elements_of(&env.messages_orig, leading);
}

/// The text of a system or developer message: its string content or its text parts joined.
fn message_text(b: &[u8], start: usize) -> String {
    let Some(content) = scan::field(b, start, "content") else {
        return String::new();
    };
    if let Some(text) = scan::decode_str(b, &content) {
        return text;
    }
    scan::elements(b, content.start)
        .unwrap_or_default()
        .iter()
        .filter_map(|part| scan::str_field(b, part.start, "text"))
        .collect()
}

/// `prompt_cache_key` set from the options, unless the client set its own (and the
/// options do not override it).
pub(crate) fn option_edits(
    env: &Envelope,
    opts: &CompileOptions,
    edits: &mut Vec<(String, Option<Bytes>)>,
) {
    if let Some(key) = &opts.prompt_cache_key {
        if opts.override_prompt_cache_key || env.option_raw("prompt_cache_key").is_none() {
            let literal = serde_json::to_vec(&Value::String(key.clone())).unwrap_or_default();
            edits.push(("prompt_cache_key".into(), Some(Bytes::from(literal))));
        }
    }
}

/// The compiled payload with explicit breakpoints where `auto` asks for them.
pub(crate) fn after_compile(env: &Envelope, compiled: Payload, opts: &CompileOptions) -> Payload {
    match opts.breakpoints {
        BreakpointMode::Auto { .. } => super::explicit::explicit_breakpoints(env, compiled),
        _ => compiled,
    }
}
