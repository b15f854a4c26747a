//! Bedrock's Converse API (`POST /model/{modelId}/converse` and `/converse-stream`): its
//! own body (`system` and `messages` of content blocks such as `{"text": ...}`,
//! `{"toolUse": ...}`, `{"toolResult": ...}`, `toolConfig.tools` of `{"toolSpec": ...}`;
//! cache checkpoints are blocks of their own, `{"cachePoint": {"type": "default"}}`) and its
//! own answers. cachet forwards it as the client sent it, signs it, and reads its usage.
//!
//! Usage (API reference, `TokenUsage`): `inputTokens` (the input neither read from nor
//! written to the cache), `outputTokens`, `totalTokens`, `cacheReadInputTokens`,
//! `cacheWriteInputTokens`. A whole answer carries it in `usage`; a stream in its last
//! event, `metadata` (`{"usage": ..., "metrics": ...}`), after `messageStop`.

use serde::Deserialize;

use crate::providers::{Api, Terminal};
use crate::route::Endpoint;
use crate::usage::Usage;

/// Converse and ConverseStream.
pub struct Converse;

pub static CONVERSE: Converse = Converse;

/// The stream event that closes an answer.
pub const MESSAGE_STOP: &str = "messageStop";
/// The stream event that carries the usage, after [`MESSAGE_STOP`].
pub const METADATA: &str = "metadata";

impl Api for Converse {
    fn endpoint(&self) -> Endpoint {
        Endpoint::Converse
    }

    fn terminal(&self, event: &str, _data: &[u8]) -> Option<Terminal> {
        match event {
            METADATA => Some(Terminal::Done),
            super::eventstream::EXCEPTION => Some(Terminal::Error),
            _ => None,
        }
    }
}

/// `TokenUsage`, as Converse reports it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct TokenUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WithUsage {
    usage: Option<TokenUsage>,
}

impl TokenUsage {
    fn usage(&self) -> Usage {
        let write = self.cache_write_input_tokens.unwrap_or(0);
        Usage {
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            cache_write: write,
            // Converse's default checkpoint lives 5 minutes; a 1-hour one is asked per
            // checkpoint (`cachePoint.ttl`), and the answer's total does not split them.
            uncached: self.input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
            ..Usage::default()
        }
    }
}

/// The usage of a whole Converse answer, or of a stream's `metadata` event.
pub fn usage_of(json: &[u8]) -> Option<Usage> {
    let read: WithUsage = serde_json::from_slice(json).ok()?;
    read.usage.map(|u| u.usage())
}

/// The assistant message of a whole Converse answer (`output.message`).
pub fn assistant_from_body(answer: &[u8]) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    v.get("output")?.get("message").cloned()
}

/// Whether an event of a Converse stream is one cachet reads.
pub fn reads(event: &str) -> bool {
    event == METADATA
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of `TokenUsage` (API reference): `inputTokens` is the input outside the
    /// cache, so the three kinds add up to what `totalTokens` counts of the input.
    #[test]
    fn usage_with_cache_counters() {
        let u = usage_of(br#"{"usage":{"inputTokens":10,"outputTokens":3,"totalTokens":1598,"cacheReadInputTokens":0,"cacheWriteInputTokens":1585},"metrics":{"latencyMs":100}}"#).unwrap();
        assert_eq!(
            (u.uncached, u.cache_read, u.cache_write, u.output),
            (10, 0, 1585, 3)
        );
        assert_eq!(u.uncached + u.cache_read + u.cache_write + u.output, 1598);
        assert!(usage_of(br#"{"stopReason":"end_turn"}"#).is_none());
    }
}
