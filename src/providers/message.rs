//! What a message is, in terms every provider module fills in: who said it, whether it
//! calls a tool or carries a tool's result, and whether it carries anything else.

use std::borrow::Cow;

use super::Endpoint;
use crate::envelope::MsgKind;
use crate::json::scan;

/// Roles of OpenAI messages that carry the client's instructions rather than a turn.
pub const INSTRUCTION_ROLES: [&str; 2] = ["system", "developer"];

/// A message object's top-level fields, as the provider modules' classifiers read them.
pub(super) struct Fields<'a> {
    b: &'a [u8],
    entries: Vec<scan::Entry>,
}

impl<'a> Fields<'a> {
    /// `None` when `b` is not a JSON object.
    pub fn of(b: &'a [u8]) -> Option<Self> {
        let entries = scan::entries(b, scan::skip_ws(b, 0)).ok()?;
        Some(Fields { b, entries })
    }

    /// The fields of a message, and its kind as far as its role says: who sent it, and
    /// whether it carries the client's instructions.
    pub fn with_role(b: &'a [u8]) -> Option<(Self, MsgKind)> {
        let fields = Self::of(b)?;
        let mut kind = MsgKind::default();
        kind.role = fields.name("role").unwrap_or_default();
        kind.instruction = INSTRUCTION_ROLES.contains(&&*kind.role);
        Some((fields, kind))
    }

    /// The value span of a field.
    pub fn get(&self, name: &str) -> Option<scan::Span> {
        self.entries
            .iter()
            .find(|e| scan::key_is(self.b, &e.key, name))
            .map(|e| e.value.clone())
    }

    /// A field's string value.
    pub fn text(&self, name: &str) -> Option<String> {
        self.get(name).and_then(|v| scan::decode_str(self.b, &v))
    }

    /// A role or item type: one of the names the APIs define is borrowed, not held, so a
    /// kind is copied without allocating (a history's kinds are copied on every request).
    pub fn name(&self, field: &str) -> Option<Cow<'static, str>> {
        let text = self.text(field)?;
        Some(match KNOWN_NAMES.iter().find(|known| **known == text) {
            Some(known) => Cow::Borrowed(known),
            None => Cow::Owned(text),
        })
    }
}

/// Roles and Responses item types common enough to be worth borrowing; any other name is
/// kept as sent.
const KNOWN_NAMES: [&str; 15] = [
    "user",
    "assistant",
    "model",
    "function",
    "system",
    "developer",
    "tool",
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
];

/// The name of a tool definition (its raw JSON) in the provider's shape: Chat's is under
/// `function` (when that is an object), else at the top, as the other providers put it.
/// Only a string is a name.
pub fn tool_name(endpoint: Endpoint, raw: &[u8]) -> Option<String> {
    let start = scan::skip_ws(raw, 0);
    let nested = || {
        let function = scan::field(raw, start, "function")?;
        (raw.get(function.start) == Some(&b'{'))
            .then(|| scan::field(raw, function.start, "name"))
            .flatten()
    };
    let name = match endpoint {
        Endpoint::Chat => nested().or_else(|| scan::field(raw, start, "name"))?,
        _ => scan::field(raw, start, "name")?,
    };
    scan::decode_str(raw, &name)
}

/// The text a message carries for a reader (retrieval): string content, or its text parts
/// joined by newlines; a part longer than a few times `ends` bytes is read only at its ends
/// ([`scan::decode_str_ends`]), so a pasted file of megabytes is never decoded whole.
pub fn text_of(b: &[u8], ends: usize) -> String {
    let Some(content) = scan::field(b, scan::skip_ws(b, 0), "content") else {
        return String::new();
    };
    if let Some(text) = scan::decode_str_ends(b, &content, ends) {
        return text;
    }
    // Text, input_text and output_text parts all carry `text`.
    scan::elements(b, content.start)
        .unwrap_or_default()
        .iter()
        .filter_map(|part| {
            let text = scan::field(b, part.start, "text")?;
            scan::decode_str_ends(b, &text, ends)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Tool definitions as clients send them, and odd ones.
#[cfg(test)]
pub(crate) const TOOL_SHAPES: [&str; 14] = [
    // Claude Code / Anthropic SDK.
    r#"{"name":"Read","description":"Reads a file","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}"#,
    r#"{"type":"web_search_20250305","name":"web_search","max_uses":5}"#,
    // OpenAI Chat (pi, SDK).
    r#"{"type":"function","function":{"name":"read","description":"Read","parameters":{"type":"object"}}}"#,
    // Codex / Responses.
    r#"{"type":"function","name":"shell","description":"Runs","strict":false,"parameters":{"type":"object"}}"#,
    r#"{"type":"local_shell"}"#,
    // Odd ones: escaped names, names that are not strings, `function` not an object.
    r#" { "name" : "re\u0061d\n" , "function" : { "name" : "inner" } } "#,
    r#"{"function":{"description":"no name"},"name":"outer"}"#,
    r#"{"function":{"name":7},"name":"outer"}"#,
    r#"{"function":["name"],"name":"outer"}"#,
    r#"{"function":"f","name":null}"#,
    r#"{"name":{"first":"x"}}"#,
    r#"{}"#,
    r#"[1,2]"#,
    r#""read""#,
];

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use std::borrow::Cow;

    use super::{tool_name, Endpoint, TOOL_SHAPES};
    use crate::providers::message_kind;

    /// The names the APIs define are borrowed (a copied kind allocates nothing); any other
    /// is kept exactly as sent, escapes decoded.
    #[test]
    fn known_names_are_borrowed_and_others_kept() {
        let kind = message_kind(
            Endpoint::Responses,
            br#"{"type":"function_call_output","call_id":"c","output":"ok"}"#,
        );
        assert!(matches!(
            kind.item_type,
            Cow::Borrowed("function_call_output")
        ));
        assert!(kind.tool_result);
        let kind = message_kind(Endpoint::Messages, br#"{"role":"user","content":"hi"}"#);
        assert!(matches!(kind.role, Cow::Borrowed("user")));
        let kind = message_kind(
            Endpoint::Responses,
            br#"{"type":"apply_patch_call","role":"n\u00e9w"}"#,
        );
        assert!(matches!(&kind.item_type, Cow::Owned(t) if t == "apply_patch_call"));
        assert_eq!(kind.role, "n\u{e9}w");
        assert!(kind.calls_tool);
    }

    /// Tool names read from bytes are what the whole-value reading found (`/function/name`,
    /// else `name`, for Chat; `name` for the others; only strings).
    #[test]
    fn tool_name_from_bytes_equals_the_value_reading() {
        fn from_value(endpoint: Endpoint, v: &Value) -> Option<String> {
            let name = match endpoint {
                Endpoint::Chat => v.pointer("/function/name").or_else(|| v.get("name")),
                _ => v.get("name"),
            };
            name.and_then(Value::as_str).map(str::to_owned)
        }
        for endpoint in [Endpoint::Messages, Endpoint::Chat, Endpoint::Responses] {
            for raw in TOOL_SHAPES {
                let v: Value = serde_json::from_str(raw).unwrap();
                assert_eq!(
                    tool_name(endpoint, raw.as_bytes()),
                    from_value(endpoint, &v),
                    "{endpoint:?} {raw}"
                );
            }
        }
        let chat = TOOL_SHAPES[2].as_bytes();
        assert_eq!(tool_name(Endpoint::Chat, chat).as_deref(), Some("read"));
        assert_eq!(tool_name(Endpoint::Messages, chat), None);
        let escaped = TOOL_SHAPES[5].as_bytes();
        assert_eq!(tool_name(Endpoint::Chat, escaped).as_deref(), Some("inner"));
        assert_eq!(
            tool_name(Endpoint::Messages, escaped).as_deref(),
            Some("read\n")
        );
    }
}

#[cfg(test)]
mod memo_tests {
    use super::*;
    use crate::providers::{message_kind, openai_chat, openai_responses};

    /// The remembered kind is the classification itself, for every message of real
    /// clients' requests on each API, asked twice (the second answer comes from the memo),
    /// and the API is part of the key: a message classified for one API is not answered
    /// for another.
    #[test]
    fn remembered_kinds_equal_the_classification_on_real_clients() {
        let fixtures: [(&str, Endpoint, &str); 5] = [
            (
                include_str!("../../tests/data/clients/claude_code_tool_loop.json"),
                Endpoint::Messages,
                "messages",
            ),
            (
                include_str!("../../tests/data/clients/pi_anthropic_tool_loop.json"),
                Endpoint::Messages,
                "messages",
            ),
            (
                include_str!("../../tests/data/clients/pi_chat_tool_loop.json"),
                Endpoint::Chat,
                "messages",
            ),
            (
                include_str!("../../tests/data/clients/pi_responses_tool_loop.json"),
                Endpoint::Responses,
                "input",
            ),
            (
                include_str!("../../tests/data/clients/codex_tool_loop.json"),
                Endpoint::Responses,
                "input",
            ),
        ];
        let mut seen = 0;
        for (body, endpoint, field) in fixtures {
            let body: serde_json::Value = serde_json::from_str(body).unwrap();
            for message in body[field].as_array().unwrap() {
                let raw = serde_json::to_vec(message).unwrap();
                let direct = crate::providers::wire(endpoint).unwrap().classify(&raw);
                assert_eq!(crate::providers::message_kind(endpoint, &raw), direct);
                assert_eq!(crate::providers::message_kind(endpoint, &raw), direct);
                seen += 1;
            }
        }
        assert!(seen > 20, "{seen} messages");
        // One byte string read as a Chat message and as a Responses item: two answers.
        let tool = br#"{"role":"tool","tool_call_id":"c1","content":"ok"}"#;
        assert_ne!(
            openai_chat::message_kind(tool),
            openai_responses::message_kind(tool)
        );
        assert_eq!(
            message_kind(Endpoint::Chat, tool),
            openai_chat::message_kind(tool)
        );
        assert_eq!(
            message_kind(Endpoint::Responses, tool),
            openai_responses::message_kind(tool)
        );
    }
}
