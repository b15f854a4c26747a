//! What the envelope asks of a provider API's request wire: where its system prompt, tools
//! and history sit, what a message is, and how its cache markers are written. Each API
//! implements [`Wire`] in `providers/` (`providers::wire` finds it for an endpoint); every
//! envelope holds the one it was read with, so the envelope itself names no API.

use bytes::Bytes;
use serde_json::Value;

use super::{Block, BreakpointMode, CompileOptions, Edit, Envelope, MsgKind, Payload, Plan};
use super::{SystemForm, Ttl};
use crate::error::ApiError;
use crate::route::{Endpoint, Provider};

/// A top-level value the envelope owns, as the compile step writes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned {
    /// The tool definitions.
    Tools,
    /// The history array, with leading system messages when the system prompt is sent so.
    History,
    /// The system prompt as one string.
    TextSystem,
    /// The system prompt as text blocks, one per part.
    BlockSystem,
    /// The system prompt in a shape of the wire's own, written by [`Wire::system_value`]
    /// (Gemini's `systemInstruction` content object).
    WireSystem,
}

/// What a request's history must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryShape {
    /// An array, always sent.
    Array,
    /// An array or one string, or absent (Responses `input`).
    ArrayOrText,
}

/// One provider API's request wire.
pub trait Wire: Send + Sync {
    fn provider(&self) -> Provider;

    fn endpoint(&self) -> Endpoint;

    /// Whether the body names the model (`model`); `false` where the route's path does
    /// (Gemini, Bedrock, Vertex).
    fn model_in_body(&self) -> bool {
        true
    }

    /// The top-level key of the history array (`messages`; Responses `input`).
    fn history_key(&self) -> &'static str;

    /// What the history must be for the request to be valid.
    fn history_shape(&self) -> HistoryShape {
        HistoryShape::Array
    }

    /// The top-level key of the tool definitions.
    fn tools_key(&self) -> &'static str {
        "tools"
    }

    /// The top-level keys the envelope owns (the model, the system prompt's, the history's
    /// and the tools'): every other key is an option, carried as sent.
    fn owned_keys(&self) -> &'static [&'static str];

    /// Read the system prompt and the history of a body whose top level `top` has been
    /// split (the tools are read already).
    fn split_prompt(&self, env: &mut Envelope, top: &super::parse::Top<'_>)
        -> Result<(), ApiError>;

    /// How an owned key's value is written back (`None`: as the client sent it). `form` is
    /// how the client sent its system prompt; `marks_system`: the marker plan changes a
    /// system part.
    fn owned(&self, key: &str, form: &SystemForm, marks_system: bool) -> Option<Owned>;

    /// The system prompt's value for [`Owned::WireSystem`], from the envelope's parts
    /// (`None`: no system prompt, the key is removed).
    fn system_value(&self, _env: &Envelope) -> Option<Vec<u8>> {
        None
    }

    /// The role system parts take as leading messages when the client sent no system
    /// prompt and the API has no other place for one (Chat's `system`).
    fn leading_system_role(&self) -> Option<&'static str> {
        None
    }

    /// What a history message is (uncached: the envelope remembers kinds itself).
    fn classify(&self, message: &[u8]) -> MsgKind;

    /// The cacheable content blocks of a history message, for APIs with cache markers; one
    /// of `among` messages read together (a body's history).
    fn message_blocks(&self, _message: &[u8], _among: usize) -> Vec<Block> {
        Vec::new()
    }

    /// The text a message carries for a reader (retrieval); a part longer than a few times
    /// `ends` bytes is read only at its ends.
    fn message_text(&self, message: &[u8], ends: usize) -> String;

    /// A message in the neutral patch shape (`{role, content}`, DESIGN §3) in this API's
    /// own shape; why not, when it cannot be.
    fn to_wire_message(&self, neutral: &Value) -> Result<Value, String>;

    /// A tool given in the neutral patch shape (`{name, description, parameters}`) in this
    /// API's own shape.
    fn to_wire_tool(&self, name: &Value, description: &Value, parameters: &Value) -> Value;

    /// The marker mode that applies for `opts` and the markers it changes (`preserve` and
    /// no change for APIs without markers).
    fn plan_markers(&self, _env: &Envelope, _opts: &CompileOptions) -> (BreakpointMode, Plan) {
        (BreakpointMode::Preserve, Plan::default())
    }

    /// Edits of the top-level options that compiling with `opts` makes, after `mode` was
    /// chosen (`prompt_cache_key`, a top-level marker that placed markers replace).
    fn option_edits(
        &self,
        _env: &Envelope,
        _mode: BreakpointMode,
        _opts: &CompileOptions,
        _edits: &mut Vec<(String, Option<Bytes>)>,
    ) {
    }

    /// A tool definition or system block with `want` as its marker; `None` when it is
    /// already so.
    fn set_marker(&self, _raw: &[u8], _want: Option<Ttl>) -> Option<Vec<u8>> {
        None
    }

    /// The edits that give a message's content blocks the markers `changes` lists
    /// (`(block, marker)`).
    fn marker_edits(&self, _raw: &[u8], _changes: &[(usize, Option<Ttl>)]) -> Option<Vec<Edit>> {
        None
    }

    /// The edits a message of the request-only tail needs (it never carries a marker).
    fn tail_edits(&self, _raw: &[u8]) -> Option<Vec<Edit>> {
        None
    }

    /// The compiled payload with what the API's marker rules add after compiling (OpenAI's
    /// explicit breakpoints), where `opts` asks for them.
    fn after_compile(&self, _env: &Envelope, compiled: Payload, _opts: &CompileOptions) -> Payload {
        compiled
    }

    /// The marked blocks of the tools, the system prompt and the first `history` messages:
    /// each one's number in prompt order, its marker, and the message it sits in.
    fn prefix_marks(&self, _env: &Envelope, _history: usize) -> Vec<(u32, Ttl, Option<u32>)> {
        Vec::new()
    }
}

impl std::fmt::Debug for dyn Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Wire({})", self.endpoint().label())
    }
}
