//! Everything a provider renderer needs to answer one request.

use serde_json::Value;

use super::reply::Reply;
use crate::cache_model::Accounting;

pub struct Turn<'a> {
    /// Sequence number of the request in this emulator, for deterministic ids.
    pub seq: u64,
    pub model: &'a str,
    pub request: &'a Value,
    pub reply: &'a Reply,
    pub accounting: &'a Accounting,
    pub output_tokens: u64,
    /// Seconds since the epoch on the emulator's clock.
    pub created: u64,
    /// A Responses request that asks for a compaction inline: its one output item is the
    /// compaction, the reply's text its summary.
    pub compaction: bool,
    /// A Responses warmup (`generate: false`): no output, only the request state prepared.
    pub warmup: bool,
    /// The cache diagnostics the request asked for: Anthropic's `diagnostics`, or the
    /// Responses `prompt_cache_diagnostics` of the completed response.
    pub diagnostics: Option<&'a Value>,
}

impl Turn<'_> {
    /// A deterministic id such as `msg_emu00000000000000000007` (prefix `msg_`).
    pub fn id(&self, prefix: &str) -> String {
        format!("{prefix}emu{:020}", self.seq)
    }

    /// The tool call's arguments as the JSON text the providers send.
    pub fn arguments(input: &Value) -> String {
        input.to_string()
    }
}

/// Split JSON text in two deltas, as providers stream arguments in pieces.
pub fn json_pieces(text: &str) -> Vec<String> {
    let mid = text
        .char_indices()
        .nth(text.chars().count() / 2)
        .map_or(0, |(i, _)| i);
    if mid == 0 {
        return vec![text.to_string()];
    }
    vec![text[..mid].to_string(), text[mid..].to_string()]
}
