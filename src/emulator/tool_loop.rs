//! The emulator's scripted tool loop: where in a tool loop a request stands, which offered
//! tool the emulator may call, and arguments that are harmless when an agent runs them.
//!
//! A request continues a tool loop when its last user turn carries tool results, whatever
//! else that turn holds: providers merge consecutive user messages into one turn and
//! accept text after the tool results (Claude Code appends system reminders there, and a
//! proxy policy may append a message). The steps of a loop are the user turns, counted
//! back from the last one, that carry tool results; the first turn without any is the
//! prompt that started the loop.

use serde_json::{Map, Value};

use crate::envelope::MsgKind;

use crate::route::Endpoint;

/// Tools the emulator calls on its own choice, by name (case-insensitive), in order of
/// preference: tools that read, list or search, then shells. Tools that spawn agents
/// (`Agent`, `Task`) or change files are never chosen; an agent's subagents would call
/// them again without end.
pub const ALLOWED_TOOLS: &[&str] = &[
    "read",
    "read_file",
    "ls",
    "list_dir",
    "grep",
    "glob",
    "find",
    "bash",
    "shell",
    "exec_command",
];

/// The command given to shell tools: lists the working folder and nothing else.
pub const SHELL_COMMAND: &str = "ls";

/// How many tool steps the request's last user turn is into: 0 for a new prompt, 1 when
/// the last user turn answers the first tool call, and so on.
pub fn steps_since_prompt(endpoint: Endpoint, req: &Value) -> u32 {
    let items = match endpoint {
        Endpoint::Responses => match req.get("input") {
            Some(Value::Array(items)) => items.as_slice(),
            _ => return 0,
        },
        Endpoint::GenerateContent => match req.get("contents") {
            Some(Value::Array(contents)) => contents.as_slice(),
            _ => return 0,
        },
        _ => match req.get("messages") {
            Some(Value::Array(messages)) => messages.as_slice(),
            _ => return 0,
        },
    };
    let kinds: Vec<MsgKind> = items
        .iter()
        .map(|m| {
            crate::providers::message_kind(endpoint, &serde_json::to_vec(m).unwrap_or_default())
        })
        .collect();
    let mut steps = 0;
    let mut end = kinds.len();
    loop {
        // The user turn ending at `end`: every item back to the model's last output.
        let start = kinds[..end]
            .iter()
            .rposition(|k| k.from_model)
            .map_or(0, |i| i + 1);
        if start == end || !kinds[start..end].iter().any(|k| k.tool_result) {
            return steps;
        }
        steps += 1;
        // Skip the model's output before this turn to reach the previous user turn.
        end = kinds[..start]
            .iter()
            .rposition(|k| !k.from_model)
            .map_or(0, |i| i + 1);
        if end == 0 {
            return steps;
        }
    }
}

/// The first tool of [`ALLOWED_TOOLS`] that `offered` holds, as the request spells it.
pub fn allowed_tool(offered: &[(String, Value)]) -> Option<&(String, Value)> {
    ALLOWED_TOOLS.iter().find_map(|want| {
        offered
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(want))
    })
}

/// A deterministic argument object satisfying the schema's required properties. Shell
/// tools get [`SHELL_COMMAND`]; other strings are `"example NAME"`, which names no file
/// or command an agent could harm.
pub fn example_input(schema: &Value) -> Value {
    let mut out = Map::new();
    let required = schema.get("required").and_then(Value::as_array);
    let props = schema.get("properties").and_then(Value::as_object);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        let ty = props
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let value = match (ty, name) {
            ("integer" | "number", _) => Value::from(1),
            ("boolean", _) => Value::from(true),
            ("array", _) => Value::Array(Vec::new()),
            ("object", _) => Value::Object(Map::new()),
            (_, "command" | "cmd") => Value::from(SHELL_COMMAND),
            _ => Value::from(format!("example {name}")),
        };
        out.insert(name.to_string(), value);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_count_the_answered_tool_calls_since_the_prompt() {
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "read", "input": {}}]});
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]});
        let prompt = json!({"role": "user", "content": "go"});
        let mut messages = vec![prompt.clone()];
        assert_eq!(
            steps_since_prompt(Endpoint::Messages, &json!({"messages": messages})),
            0
        );
        messages.extend([call.clone(), result.clone()]);
        assert_eq!(
            steps_since_prompt(Endpoint::Messages, &json!({"messages": messages})),
            1
        );
        messages.extend([call.clone(), result.clone()]);
        assert_eq!(
            steps_since_prompt(Endpoint::Messages, &json!({"messages": messages})),
            2
        );
        messages.extend([json!({"role": "assistant", "content": "done"}), prompt]);
        assert_eq!(
            steps_since_prompt(Endpoint::Messages, &json!({"messages": messages})),
            0
        );
        messages.extend([call, result]);
        assert_eq!(
            steps_since_prompt(Endpoint::Messages, &json!({"messages": messages})),
            1
        );
    }

    #[test]
    fn responses_reasoning_and_calls_are_the_model_s_output() {
        let input = json!([
            {"role": "user", "content": "go"},
            {"type": "reasoning", "encrypted_content": "x"},
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"type": "reasoning", "encrypted_content": "y"},
            {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "ok"},
            {"role": "user", "content": [{"type": "input_text", "text": "reminder"}]},
        ]);
        assert_eq!(
            steps_since_prompt(Endpoint::Responses, &json!({"input": input})),
            2
        );
        assert_eq!(
            steps_since_prompt(Endpoint::Responses, &json!({"input": "hi"})),
            0
        );
    }

    #[test]
    fn subagent_and_writing_tools_are_never_chosen() {
        let offered: Vec<(String, Value)> = ["Agent", "Task", "Edit", "Write", "Bash", "Grep"]
            .iter()
            .map(|n| (n.to_string(), Value::Null))
            .collect();
        assert_eq!(allowed_tool(&offered).map(|t| t.0.as_str()), Some("Grep"));
        assert_eq!(allowed_tool(&offered[..4]), None);
    }
}
