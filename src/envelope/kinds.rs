//! What a history message is, in terms every provider API fills in: who said it, whether
//! it calls a tool or carries a tool's result, and whether it carries anything else. Each
//! API reads its own messages (`providers::*::message_kind`); turns, retrieval and the
//! ordering rules read only this.

use std::borrow::Cow;

use crate::route::Endpoint;

/// The facts about one history message that ordering rules, turns and retrieval need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MsgKind {
    pub role: Cow<'static, str>,
    /// Responses item `type` (empty for other providers).
    pub item_type: Cow<'static, str>,
    /// Said by the model: an assistant message, or a Responses reasoning or call item.
    pub from_model: bool,
    /// Carries a tool call (Anthropic `tool_use`, Chat `tool_calls`, Responses `*_call`).
    pub calls_tool: bool,
    /// Carries a tool result (Anthropic `tool_result`, Chat role `tool`, Responses `*_output`).
    pub tool_result: bool,
    /// Carries something besides tool results (text, images, ...).
    pub other_content: bool,
    /// Carries the provider's summary of everything before it (an Anthropic `compaction`
    /// block, a Responses `compaction` item): the provider's prompt starts there.
    pub compaction: bool,
    /// Carries the client's own instructions inside the history rather than a turn:
    /// Anthropic `role: "system"` messages (Claude Code sends them), OpenAI `system` and
    /// `developer` messages.
    pub instruction: bool,
}

impl MsgKind {
    /// The kind `classify` reads of a message (a Responses input item) of `endpoint`, one
    /// of `among` messages read together (a body's history). Remembered across requests by
    /// a hash of the bytes: an agent resends its history every time, and the reading scans
    /// every block of every message.
    pub fn remembered(
        endpoint: Endpoint,
        b: &[u8],
        among: usize,
        classify: impl FnOnce(&[u8]) -> MsgKind,
    ) -> MsgKind {
        static SEEN: crate::memo::Memo<MsgKind> = crate::memo::Memo::new(65_536);
        // Each API reads other fields: the endpoint is part of the key.
        let key = || crate::memo::key(endpoint.label().as_bytes(), b);
        SEEN.get_or_insert_among(among, key, || classify(b))
    }

    /// The client's own instructions inside the history.
    pub fn is_instruction(&self) -> bool {
        self.instruction
    }

    /// A user message with content of its own (text, images), as opposed to one that only
    /// carries tool results.
    pub fn is_user_content(&self) -> bool {
        self.role == "user" && self.other_content && !self.from_model
    }
}
