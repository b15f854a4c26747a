//! How the cache model counts tokens, per block. All text goes through the real BPE
//! tokenizer (`crate::tokens::count`, o200k_base):
//!
//! - Anthropic text / thinking blocks and string content: the tokens of the text.
//! - Anthropic tool definitions: the tokens of the definition's compact JSON
//!   (`cache_control` removed).
//! - `tool_use`: tokens of the name plus tokens of the compact JSON of `input`.
//! - `tool_result`: tokens of its text content (nested blocks counted by these rules).
//! - Images and non-text documents: a fixed [`IMAGE_TOKENS`] (Anthropic) or
//!   [`OPENAI_IMAGE_TOKENS`] (OpenAI).
//! - Any other block: tokens of its compact JSON.
//! - OpenAI messages: [`OPENAI_MESSAGE_OVERHEAD`] per message plus their content by the
//!   same rules; `tool_calls`, tools and output schemas as compact JSON.
//!
//! `count_tokens` answers with the same numbers, so a client that sizes its prompt with it
//! sees exactly what the accounting bills.

/// An Anthropic image or non-text document (about a 1.2-megapixel image).
pub const IMAGE_TOKENS: u64 = 1600;
/// An OpenAI image at high detail (a 1024×1024 image: 85 + 4·170).
pub const OPENAI_IMAGE_TOKENS: u64 = 765;
/// Role and separator tokens around each OpenAI message.
pub const OPENAI_MESSAGE_OVERHEAD: u64 = 3;

pub fn count(text: &str) -> u64 {
    crate::tokens::count(text)
}
