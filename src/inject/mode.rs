//! Injection modes: the patch ops that place content, and whether they are persisted.
//!
//! Injected text is wrapped in a recognisable envelope, `<memory>\n…\n</memory>`, so a
//! reader of the prompt (or of a trace) can tell injected memory from the client's own
//! content. The same content always gives the same bytes.

use serde_json::{json, Value};

use crate::patch::Op;

pub const MEMORY_OPEN: &str = "<memory>\n";
pub const MEMORY_CLOSE: &str = "\n</memory>";

/// Where injected content goes (DESIGN §6). `ab` is resolved to one of these per session
/// by [`super::choose_arm`] before placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// A named system part, recomputed per user turn.
    SystemPrompt,
    /// An ephemeral message before the latest user prompt, re-inserted on every call.
    ContextHook,
    /// The same message, persisted with its anchor so later turns carry it unchanged.
    Pinned,
    /// Appended to the request-only uncached tail.
    Tail,
}

impl Mode {
    pub const ALL: [Mode; 4] = [
        Mode::SystemPrompt,
        Mode::ContextHook,
        Mode::Pinned,
        Mode::Tail,
    ];

    /// The name used in policies and as the metric `variant` label.
    pub fn label(self) -> &'static str {
        match self {
            Mode::SystemPrompt => "system-prompt",
            Mode::ContextHook => "context-hook",
            Mode::Pinned => "pinned",
            Mode::Tail => "tail",
        }
    }

    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.label() == name)
    }

    /// Whether the placement is stored in the session (anchored) rather than redone on
    /// every call.
    pub fn persisted(self) -> bool {
        self == Mode::Pinned
    }
}

/// The ops of one injection and how the pipeline must treat them.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub ops: Vec<Op>,
    /// `true`: persist the ops with their anchor once per turn (pinned); `false`: apply
    /// them to every call of the turn and never store them.
    pub persisted: bool,
    /// Context-hook: put a cache breakpoint on the last history message before the
    /// injection point (DESIGN §6), so the history before it stays readable next turn.
    pub marker_before_insertion: bool,
}

/// The injected text inside its envelope.
pub fn wrap(content: &str) -> String {
    format!("{MEMORY_OPEN}{}{MEMORY_CLOSE}", content.trim_end())
}

/// The neutral message carrying injected content (`custom` is sent as a user message).
pub fn memory_message(content: &str) -> Value {
    json!({"role": "custom", "content": wrap(content)})
}

/// The placement of `content` in `mode`; `part` names the system part of `system-prompt`.
/// Empty content places nothing.
pub fn ops_for(mode: Mode, part: &str, content: &str) -> Placement {
    if content.trim().is_empty() {
        return Placement {
            ops: Vec::new(),
            persisted: mode.persisted(),
            marker_before_insertion: false,
        };
    }
    let reason = |what: &str| Some(format!("memory injection ({what})"));
    let insert = || Op::MessagesInsert {
        at: crate::patch::Selector::BeforeLastUserPrompt,
        messages: vec![memory_message(content)],
        invalidate_cache_reason: reason(mode.label()),
    };
    let ops = match mode {
        Mode::SystemPrompt => vec![Op::SystemPartSet {
            part_name: part.to_string(),
            text: wrap(content),
            before: None,
            after: None,
            invalidate_cache_reason: reason("system-prompt; recomputed per user turn"),
        }],
        Mode::ContextHook | Mode::Pinned => vec![insert()],
        Mode::Tail => vec![Op::MessagesUncachedAppend {
            messages: vec![memory_message(content)],
            invalidate_cache_reason: None,
        }],
    };
    Placement {
        ops,
        persisted: mode.persisted(),
        marker_before_insertion: mode == Mode::ContextHook,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::ops::Scope;

    #[test]
    fn each_mode_places_content_with_valid_ops() {
        for mode in Mode::ALL {
            let p = ops_for(mode, "memory", "use sqlx\n");
            assert_eq!(p.ops.len(), 1, "{mode:?}");
            assert!(p.ops[0].check_reason().is_ok(), "{mode:?}");
            assert_eq!(p.persisted, mode == Mode::Pinned);
            assert_eq!(p.marker_before_insertion, mode == Mode::ContextHook);
            assert_eq!(Mode::parse(mode.label()), Some(mode));
        }
        let wire = serde_json::to_value(&ops_for(Mode::ContextHook, "m", "x").ops[0]).unwrap();
        assert_eq!(wire["op"], "messages_insert");
        assert_eq!(wire["at"], "before_last_user_prompt");
        assert_eq!(wire["messages"][0]["content"], "<memory>\nx\n</memory>");
        let wire =
            serde_json::to_value(&ops_for(Mode::SystemPrompt, "memory", "x").ops[0]).unwrap();
        assert_eq!(wire["partName"], "memory");
        assert_eq!(
            ops_for(Mode::Tail, "m", "x").ops[0].scope(),
            Scope::Uncached
        );
    }

    #[test]
    fn empty_content_places_nothing_and_bytes_are_stable() {
        assert!(ops_for(Mode::Pinned, "m", "  \n").ops.is_empty());
        assert_eq!(memory_message("a"), memory_message("a\n"));
        assert_eq!(Mode::parse("ab"), None);
    }
}
