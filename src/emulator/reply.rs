//! What the emulator answers: deterministic text, or a scripted tool call so agent tool
//! loops can be exercised.
//!
//! A tool call is made only when the request offers tools and fewer than
//! [`ReplyScript::max_tool_steps`] tool steps followed the user's prompt (see
//! [`super::tool_loop`]); then the reply is text, so a loop always ends.
//! Per request, the header `x-cachet-emulate-reply` overrides the script:
//! `text`, `text:SOME REPLY`, `tool` (the first offered tool) or `tool:NAME`.

use serde_json::Value;

use super::tool_loop::{allowed_tool, example_input, steps_since_prompt};
use crate::error::ApiError;
use crate::route::Endpoint;

/// The reply text when none is configured.
pub const DEFAULT_TEXT: &str = "Hello from the cachet emulator. This reply is deterministic.";

/// When the emulator calls a tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolCalls {
    /// Always answer with text.
    #[default]
    Never,
    /// Call the first offered tool on the allow-list
    /// ([`super::tool_loop::ALLOWED_TOOLS`]; text when none is offered).
    FirstAllowed,
    /// Call the first offered tool, whatever it is (asked for per request).
    FirstOffered,
    /// Call this tool when it is offered (text otherwise).
    Named(String),
}

impl ToolCalls {
    /// `never` (or empty), `first`, or a tool name: the values of `--tool-calls`.
    pub fn parse(value: &str) -> ToolCalls {
        match value.trim() {
            "" | "never" => ToolCalls::Never,
            "first" => ToolCalls::FirstAllowed,
            name => ToolCalls::Named(name.to_string()),
        }
    }
}

/// Tool steps per user prompt unless configured otherwise.
pub const DEFAULT_TOOL_STEPS: u32 = 1;

/// The configured reply behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyScript {
    pub text: String,
    pub tool_calls: ToolCalls,
    /// Tool calls in a row after one user prompt; the next reply is text.
    pub max_tool_steps: u32,
}

impl Default for ReplyScript {
    fn default() -> Self {
        ReplyScript {
            text: DEFAULT_TEXT.to_string(),
            tool_calls: ToolCalls::Never,
            max_tool_steps: DEFAULT_TOOL_STEPS,
        }
    }
}

/// One reply, decided for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    ToolCall { name: String, input: Value },
}

impl Reply {
    /// Output tokens, counted with the same tokenizer as the input.
    pub fn output_tokens(&self) -> u64 {
        match self {
            Reply::Text(t) => crate::tokens::count(t),
            Reply::ToolCall { name, input } => {
                crate::tokens::count(name) + crate::tokens::count(&input.to_string())
            }
        }
    }
}

impl ReplyScript {
    /// The reply to `req`, honouring the per-request header value.
    pub fn decide(
        &self,
        header: Option<&str>,
        endpoint: Endpoint,
        req: &Value,
    ) -> Result<Reply, ApiError> {
        let (text, tool_calls) = match header.map(str::trim) {
            None | Some("") => (self.text.clone(), self.tool_calls.clone()),
            Some("text") => (self.text.clone(), ToolCalls::Never),
            Some("tool") => (self.text.clone(), ToolCalls::FirstOffered),
            Some(h) if h.starts_with("text:") => (h["text:".len()..].to_string(), ToolCalls::Never),
            Some(h) if h.starts_with("tool:") => (self.text.clone(), ToolCalls::Named(h["tool:".len()..].to_string())),
            Some(other) => {
                return Err(ApiError::invalid(format!(
                    "x-cachet-emulate-reply: unknown value `{other}` (expected text, text:REPLY, tool or tool:NAME)"
                )))
            }
        };
        if tool_calls == ToolCalls::Never
            || steps_since_prompt(endpoint, req) >= self.max_tool_steps
        {
            return Ok(Reply::Text(text));
        }
        let tools = offered_tools(endpoint, req);
        let chosen = match &tool_calls {
            ToolCalls::Named(name) => tools.iter().find(|(n, _)| n == name),
            ToolCalls::FirstOffered => tools.first(),
            _ => allowed_tool(&tools),
        };
        Ok(match chosen {
            Some((name, schema)) => Reply::ToolCall {
                name: name.clone(),
                input: example_input(schema),
            },
            None => Reply::Text(text),
        })
    }
}

/// (name, JSON schema) of each function tool the request offers.
fn offered_tools(endpoint: Endpoint, req: &Value) -> Vec<(String, Value)> {
    let Some(Value::Array(tools)) = req.get("tools") else {
        return Vec::new();
    };
    if endpoint == Endpoint::GenerateContent {
        // Gemini: each `Tool` holds function declarations, their schema in
        // `parametersJsonSchema` or `parameters`.
        let declarations = tools
            .iter()
            .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
            .flatten();
        return declarations
            .filter_map(|d| {
                let schema = d.get("parametersJsonSchema").or(d.get("parameters"));
                Some((
                    d.get("name")?.as_str()?.to_string(),
                    schema.cloned().unwrap_or(Value::Null),
                ))
            })
            .collect();
    }
    tools
        .iter()
        .filter_map(|t| {
            let (name, schema) = match endpoint {
                Endpoint::Chat => (
                    t.pointer("/function/name"),
                    t.pointer("/function/parameters"),
                ),
                Endpoint::Responses => (t.get("name"), t.get("parameters")),
                _ => (t.get("name"), t.get("input_schema")),
            };
            Some((
                name?.as_str()?.to_string(),
                schema.cloned().unwrap_or(Value::Null),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn anthropic(last: Value) -> Value {
        json!({
            "tools": [{"name": "read_file", "input_schema": {"type": "object",
                "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
                "required": ["path", "lines"]}}],
            "messages": [{"role": "user", "content": "hi"}, last]
        })
    }

    #[test]
    fn tool_loop_calls_then_answers_text() {
        let script = ReplyScript {
            tool_calls: ToolCalls::FirstOffered,
            ..Default::default()
        };
        let ask = anthropic(json!({"role": "user", "content": "read it"}));
        let reply = script.decide(None, Endpoint::Messages, &ask).unwrap();
        assert_eq!(
            reply,
            Reply::ToolCall {
                name: "read_file".into(),
                input: json!({"path": "example path", "lines": 1})
            }
        );
        let result = anthropic(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}));
        assert!(matches!(
            script.decide(None, Endpoint::Messages, &result).unwrap(),
            Reply::Text(_)
        ));
    }

    #[test]
    fn header_overrides_and_unknown_values_are_refused() {
        let script = ReplyScript::default();
        let req = anthropic(json!({"role": "user", "content": "x"}));
        assert!(matches!(
            script
                .decide(Some("tool:read_file"), Endpoint::Messages, &req)
                .unwrap(),
            Reply::ToolCall { .. }
        ));
        assert!(matches!(
            script
                .decide(Some("tool:missing"), Endpoint::Messages, &req)
                .unwrap(),
            Reply::Text(_)
        ));
        assert_eq!(
            script
                .decide(Some("text:pong"), Endpoint::Messages, &req)
                .unwrap(),
            Reply::Text("pong".into())
        );
        assert!(script
            .decide(Some("dance"), Endpoint::Messages, &req)
            .is_err());
        let chat = json!({"tools": [{"type": "function", "function": {"name": "f"}}],
            "messages": [{"role": "tool", "content": "done"}]});
        assert!(matches!(
            script.decide(Some("tool"), Endpoint::Chat, &chat).unwrap(),
            Reply::Text(_)
        ));
    }
}
