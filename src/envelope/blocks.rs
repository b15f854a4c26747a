//! Cacheable blocks: the units a provider's prompt cache hashes, and the markers that ask
//! it to write a prefix. Which JSON is a block, and how a marker is written, is each
//! provider's (`providers::anthropic::blocks`); this is what the envelope and the layers
//! above read of them.

use crate::json::scan::Span;

/// An edit of a value's bytes: the range replaced, and what replaces it.
pub type Edit = (Span, Vec<u8>);

/// A marker lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord, Hash)]
pub enum Ttl {
    #[default]
    FiveMinutes,
    OneHour,
}

impl Ttl {
    pub fn label(self) -> &'static str {
        match self {
            Ttl::FiveMinutes => "5m",
            Ttl::OneHour => "1h",
        }
    }

    pub fn seconds(self) -> u64 {
        match self {
            Ttl::FiveMinutes => 300,
            Ttl::OneHour => 3600,
        }
    }
}

/// One cacheable block: a tool definition, a system block or a message content block.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The block's object (or, for string content, the string literal).
    pub span: Span,
    /// Whether a marker may sit here (not thinking, not empty text).
    pub markable: bool,
    pub marker: Option<Ttl>,
    /// A `thinking` or `redacted_thinking` block.
    pub thinking: bool,
    /// A server-side compaction's summary: the provider ignores every block before the
    /// last one.
    pub compaction: bool,
}
