//! The context envelope (DESIGN §2): a request split into named system parts, tools,
//! cached history, an uncached tail, options and metadata — kept as byte ranges of the
//! client's body so that compiling it back copies every untouched element verbatim.
//!
//! ```text
//! crate::providers::parse_envelope(endpoint, body) ──► apply(ops, transformer)* ──► compile(opts)
//! ```
//! With no patch and default options, `compile` returns the very bytes that were parsed.

mod blocks;
mod client;
mod compile;
mod facts;
mod kinds;
mod markers;
pub mod message;
pub mod parse;
mod payload;
mod seq;
pub mod turns;
mod view;
mod wire;

use bytes::Bytes;

use crate::route::{Endpoint, Provider};

use crate::json::scan;
pub(crate) use crate::json::scan::Span;
pub use blocks::{Block, Edit, Ttl};
pub use client::{Client, Meta};
pub use compile::CompileOptions;
pub use facts::OrigFacts;
pub use kinds::MsgKind;
pub use markers::{BreakpointMode, Plan};
pub use payload::Payload;
pub use wire::{HistoryShape, Owned, Wire};

/// The bytes of one element: a range of the client's body, or bytes cachet produced.
#[derive(Debug, Clone)]
pub(crate) enum Raw {
    Orig(Span),
    New(Bytes),
}

/// One tool, system block or message.
#[derive(Debug, Clone)]
pub(crate) struct Element {
    /// Index in the client's original array, so separators between untouched neighbours
    /// can be copied as they were.
    pub origin: Option<usize>,
    pub raw: Raw,
    /// Inserted by `messages_insert` at `before_last_user_prompt` (an injection point).
    pub injected: bool,
}

impl Element {
    pub fn orig(index: usize, span: Span) -> Self {
        Element {
            origin: Some(index),
            raw: Raw::Orig(span),
            injected: false,
        }
    }

    pub fn new(bytes: Bytes) -> Self {
        Element {
            origin: None,
            raw: Raw::New(bytes),
            injected: false,
        }
    }
}

/// A named system part. `element` is the client's block/message it came from; a part
/// whose text a patch changed keeps it, so that the rewritten block keeps the client's
/// other fields (its cache marker above all) and only its text changes.
#[derive(Debug, Clone)]
pub struct SystemPart {
    pub name: String,
    pub text: String,
    pub(crate) element: Option<Element>,
    /// The text differs from the element's.
    pub(crate) rewritten: bool,
}

impl SystemPart {
    pub(crate) fn new(name: String, text: String, element: Option<Element>) -> Self {
        SystemPart {
            name,
            text,
            element,
            rewritten: false,
        }
    }

    /// The client's element, while the part is untouched.
    pub(crate) fn untouched(&self) -> Option<&Element> {
        self.element.as_ref().filter(|_| !self.rewritten)
    }
}

/// How the client sent its system prompt; decides how parts compile back.
#[derive(Debug, Clone)]
pub enum SystemForm {
    /// No system prompt was sent.
    Absent,
    /// One JSON string (Anthropic `system`, Responses `instructions`).
    Text,
    /// Anthropic `system` text blocks (the array span).
    Blocks(Span),
    /// Leading `system`/`developer` messages: OpenAI Chat, and Responses input items when
    /// there are no `instructions` (pi sends its prompt so). Their role is used for new
    /// parts.
    LeadingMessages { role: String },
}

/// A top-level array the envelope splits (tools, messages/input): where it sat and the
/// spans of its original elements.
#[derive(Debug, Clone, Default)]
pub struct OrigArray {
    pub span: Option<Span>,
    pub elems: Vec<Span>,
}

/// The context envelope of one request.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The API the body was read as: its rules split it and write it back.
    pub(crate) wire: &'static dyn Wire,
    pub(crate) body: Bytes,
    /// Top-level entries of the client's body: (key, value).
    pub(crate) top: Vec<scan::Entry>,
    pub(crate) top_span: Span,
    pub(crate) system_form: SystemForm,
    pub(crate) system: Vec<SystemPart>,
    pub(crate) system_dirty: bool,
    pub(crate) tools_orig: OrigArray,
    pub(crate) tools: Vec<Element>,
    pub(crate) tools_dirty: bool,
    /// The client's messages array (`messages`, or Responses `input`).
    pub(crate) messages_orig: OrigArray,
    /// Responses `input` sent as a plain string.
    pub(crate) input_text: Option<Span>,
    pub(crate) cached: Vec<Element>,
    pub(crate) uncached: Vec<Element>,
    pub(crate) messages_dirty: bool,
    /// Option edits in order: key and new raw value (`None` removes the key).
    pub(crate) option_edits: Vec<(String, Option<Bytes>)>,
    pub meta: Meta,
    /// What each element of the client's messages array is and holds, read once when
    /// first asked (see [`facts`]).
    pub(crate) orig_facts: OrigFacts,
}

impl Envelope {
    /// Parse a request body of the API `wire` reads. Errors are 400-style and say what is
    /// wrong.
    pub fn parse(wire: &'static dyn Wire, body: Bytes) -> Result<Envelope, crate::error::ApiError> {
        parse::parse(wire, body, None, None)
    }

    /// [`Envelope::parse`] of a body that repeats a remembered one's first history
    /// messages (`known`): only what follows them is scanned. When the body check passed
    /// the body, what it gathered (`gathered`) stands for the scan of the top-level
    /// entries, the history and the tools. The same envelope as [`Envelope::parse`] gives.
    pub fn parse_checked(
        wire: &'static dyn Wire,
        body: Bytes,
        known: Option<&parse::Resume<'_>>,
        gathered: Option<&crate::json::check::Gathered>,
    ) -> Result<Envelope, crate::error::ApiError> {
        parse::parse(wire, body, known, gathered)
    }

    /// The client's history array as scanned, for [`crate::known_prefix::KnownPrefixes`]:
    /// its key, where it starts, the top-level entries before it and its elements.
    pub fn scanned(&self) -> Option<parse::Scanned<'_>> {
        let array = self.messages_orig.span.as_ref()?;
        let at = self.top.iter().position(|e| e.value == *array)?;
        Some(parse::Scanned {
            facts: self.orig_facts.share(),
            body: &self.body,
            key: self.top[at].key.clone(),
            array_start: array.start,
            array_end: array.end,
            before: &self.top[..at],
            elems: &self.messages_orig.elems,
            after: &self.top[at + 1..],
            arrays: (self.tools_orig.span.as_ref())
                .map(|span| (span.start, self.tools_orig.elems.as_slice()))
                .into_iter()
                .collect(),
            deepest: 0,
        })
    }

    pub fn provider(&self) -> Provider {
        self.wire.provider()
    }

    pub fn endpoint(&self) -> Endpoint {
        self.wire.endpoint()
    }

    /// The rules of the API the body was read as.
    pub fn wire(&self) -> &'static dyn Wire {
        self.wire
    }

    /// The body as the client sent it.
    pub fn original_body(&self) -> &Bytes {
        &self.body
    }

    pub(crate) fn bytes_of<'a>(&'a self, raw: &'a Raw) -> &'a [u8] {
        match raw {
            Raw::Orig(span) => &self.body[span.clone()],
            Raw::New(bytes) => bytes,
        }
    }

    /// The system parts in order.
    pub fn system_parts(&self) -> &[SystemPart] {
        &self.system
    }

    /// The system prompt the provider receives: the parts' texts, no separator added.
    pub fn system_compiled(&self) -> String {
        self.system.iter().map(|p| p.text.as_str()).collect()
    }

    /// The client's raw bytes of each system part (its block, message or string), or
    /// `None` for parts a patch created or changed.
    pub fn system_raw(&self) -> impl Iterator<Item = Option<&[u8]>> {
        self.system
            .iter()
            .map(|p| p.untouched().map(|e| self.bytes_of(&e.raw)))
    }

    /// The client's raw bytes of each system part's block or message, also when a patch
    /// changed its text (`None` for parts a patch created).
    pub fn system_client_raw(&self) -> impl Iterator<Item = Option<&[u8]>> {
        self.system
            .iter()
            .map(|p| p.element.as_ref().map(|e| self.bytes_of(&e.raw)))
    }

    /// The raw bytes of each tool definition.
    pub fn tools_raw(&self) -> impl Iterator<Item = &[u8]> {
        self.tools.iter().map(|t| self.bytes_of(&t.raw))
    }

    /// Number of history messages (`messages.cached`).
    pub fn history_len(&self) -> usize {
        self.cached.len()
    }

    /// The raw bytes of each history message, in order (what the client sent for untouched
    /// messages). The session layer hashes these for anchors.
    pub fn history_raw(&self) -> impl Iterator<Item = &[u8]> {
        self.cached.iter().map(|m| self.bytes_of(&m.raw))
    }

    /// The history messages as [`history_raw`](Self::history_raw) gives them, sharing the
    /// body's memory rather than borrowing it.
    pub fn history_shared(&self) -> impl Iterator<Item = Bytes> + '_ {
        self.cached.iter().map(|m| match &m.raw {
            Raw::Orig(span) => self.body.slice(span.clone()),
            Raw::New(bytes) => bytes.clone(),
        })
    }

    /// Where each history message sat in the client's array (`None`: not the client's).
    pub fn history_origins(&self) -> impl Iterator<Item = Option<usize>> + '_ {
        self.cached.iter().map(|m| self.client_element(m))
    }

    /// The index of `m` in the client's messages array while it is that element, untouched
    /// (the facts read of the client's elements hold for it).
    fn client_element(&self, m: &Element) -> Option<usize> {
        match (&m.raw, m.origin) {
            (Raw::Orig(span), Some(o)) if !m.injected => {
                (self.messages_orig.elems.get(o) == Some(span)).then_some(o)
            }
            _ => None,
        }
    }

    /// The raw bytes of each message of the uncached tail.
    pub fn uncached_raw(&self) -> impl Iterator<Item = &[u8]> {
        self.uncached.iter().map(|m| self.bytes_of(&m.raw))
    }

    /// What each history message is, in order: borrowed from the client's elements while
    /// the history is theirs, untouched.
    pub fn history_kinds(&self) -> std::borrow::Cow<'_, [MsgKind]> {
        let orig = self.orig_kinds();
        let offset = self.cached.first().and_then(|m| m.origin).unwrap_or(0);
        let untouched = self
            .cached
            .iter()
            .enumerate()
            .all(|(i, m)| self.client_element(m) == Some(offset + i));
        match orig.get(offset..offset + self.cached.len()) {
            Some(kinds) if untouched => std::borrow::Cow::Borrowed(kinds),
            _ => self.cached.iter().map(|m| self.kind_of(m)).collect(),
        }
    }

    /// What one message is.
    pub(crate) fn kind_of(&self, m: &Element) -> MsgKind {
        match self.client_element(m) {
            Some(o) => self.orig_kinds()[o].clone(),
            None => self.read_kind(self.bytes_of(&m.raw), 1),
        }
    }

    /// The kinds of the client's messages-array elements: those it repeats of a kept
    /// body are that body's, the rest are read.
    fn orig_kinds(&self) -> &[MsgKind] {
        let elems = &self.messages_orig.elems;
        self.orig_facts.kinds.get(elems.len(), |i| {
            self.read_kind(&self.body[elems[i].clone()], elems.len())
        })
    }

    /// What a message is, as the wire reads it, remembered across requests; one of `among`
    /// messages read together.
    pub(crate) fn read_kind(&self, b: &[u8], among: usize) -> MsgKind {
        let wire = self.wire;
        MsgKind::remembered(wire.endpoint(), b, among, |b| wire.classify(b))
    }

    /// `f` of the content blocks of one history message (spans within its bytes): the
    /// client's element's, read once per body (or taken from the kept body) and borrowed,
    /// so a walk over every message of a long history touches no reference count; else
    /// read now.
    pub(crate) fn with_blocks<R>(&self, m: &Element, f: impl FnOnce(&[Block]) -> R) -> R {
        match self.client_element(m) {
            Some(o) => f(&self.client_blocks()[o]),
            None => f(&self.wire.message_blocks(self.bytes_of(&m.raw), 1)),
        }
    }

    /// The blocks of each of the client's messages-array elements.
    fn client_blocks(&self) -> &[std::sync::Arc<[Block]>] {
        let elems = &self.messages_orig.elems;
        self.orig_facts.blocks.get(elems.len(), |i| {
            self.wire
                .message_blocks(&self.body[elems[i].clone()], elems.len())
                .into()
        })
    }

    /// Whether history message `i` carries a thinking block (Anthropic).
    pub fn history_has_thinking(&self, i: usize) -> bool {
        self.cached
            .get(i)
            .is_some_and(|m| self.with_blocks(m, |blocks| blocks.iter().any(|b| b.thinking)))
    }

    /// The marked content blocks of the tools, the system prompt and the first `history`
    /// messages: each one's number in prompt order (from 0, over every block, marked or
    /// not), its marker, and the history message it sits in. Empty for APIs without markers.
    pub fn prefix_marks(&self, history: usize) -> Vec<(u32, Ttl, Option<u32>)> {
        self.wire.prefix_marks(self, history)
    }

    /// For each history message, its content blocks and how many of them are thinking
    /// blocks (Anthropic).
    pub fn history_blocks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.cached.iter().map(|m| {
            self.with_blocks(m, |blocks| {
                (blocks.len(), blocks.iter().filter(|b| b.thinking).count())
            })
        })
    }

    /// Index in the history where the current turn's prompt starts (see
    /// [`turns`]): the `before_last_user_prompt` insertion point.
    pub fn last_user_prompt_index(&self) -> Option<usize> {
        turns::last_prompt_start(&self.history_kinds())
    }

    /// `meta.turn_index` of this history: user prompts before the current one.
    pub fn turn_index(&self) -> u64 {
        turns::turn_index(&self.history_kinds())
    }

    /// The current turn's prompt: where it starts in the history, and its text (the user
    /// messages of the turn, joined by newlines; a text part longer than `4 * ends` bytes
    /// read only at its ends). What memory
    /// retrieval runs against.
    pub fn latest_user_prompt(&self, ends: usize) -> Option<(usize, String)> {
        let range = turns::last_prompt_range(&self.history_kinds())?;
        let texts: Vec<String> = self.cached[range.clone()]
            .iter()
            .filter(|m| self.kind_of(m).is_user_content())
            .map(|m| self.wire.message_text(self.bytes_of(&m.raw), ends))
            .collect();
        Some((range.start, texts.join("\n")))
    }

    /// The raw value of a top-level field as the client sent it (after option edits).
    pub fn option_raw(&self, key: &str) -> Option<&[u8]> {
        if let Some((_, v)) = self.option_edits.iter().rev().find(|(k, _)| k == key) {
            return v.as_deref();
        }
        self.top
            .iter()
            .find(|e| scan::key_is(&self.body, &e.key, key))
            .map(|e| &self.body[e.value.clone()])
    }

    /// Set a top-level option (JSON bytes) outside any patch: what cachet itself adds, such
    /// as the provider's cache-diagnostics field.
    pub fn set_option(&mut self, key: &str, value: Bytes) {
        self.option_edits.push((key.to_owned(), Some(value)));
    }

    /// Whether anything was changed by patches.
    pub fn is_patched(&self) -> bool {
        self.system_dirty
            || self.tools_dirty
            || self.messages_dirty
            || !self.uncached.is_empty()
            || !self.option_edits.is_empty()
    }
}
