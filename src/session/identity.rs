//! Session identity: which session a request belongs to, first source that applies.
//!
//! 1. header `x-cachet-session`;
//! 2. Claude Code: header `x-claude-code-session-id`, else the session inside
//!    `metadata.user_id` (a JSON string with `session_id`, or `user_…_session_<uuid>`);
//! 3. OpenAI `prompt_cache_key` (Chat and Responses bodies);
//! 4. the Responses `conversation` (the Conversations API's id);
//! 5. Codex's `session-id` header (`session_id` in versions before 0.169);
//! 6. otherwise a fingerprint of the system prompt, the tools and the first user message
//!    (which `pipeline::identify` replaces with the session of the answer a Responses
//!    `previous_response_id` names, of the history the request extends, or of the messages
//!    a compacted history kept; and tells apart two conversations with one fingerprint).

use http::{HeaderMap, HeaderName};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::envelope::Envelope;
use crate::providers::cache_key::{canonical_bytes, canonical_field_of_raw};

/// Where a session id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdSource {
    /// `x-cachet-session`.
    Header,
    /// `x-claude-code-session-id`.
    ClaudeCodeHeader,
    /// The session inside Anthropic `metadata.user_id`.
    ClaudeCodeMetadata,
    /// OpenAI `prompt_cache_key`.
    PromptCacheKey,
    /// The Responses `conversation` id.
    Conversation,
    /// Codex's `session-id` (or older `session_id`) header.
    CodexHeader,
    /// Hash of system prompt, tools and first user message.
    Fingerprint,
    /// No identifier: the session whose latest request this request's history extends.
    History,
    /// No identifier: the session of the answer the Responses `previous_response_id` names.
    PreviousResponse,
    /// No identifier: the session whose messages a compacted history kept after its
    /// summary.
    Compacted,
}

impl IdSource {
    pub fn label(self) -> &'static str {
        match self {
            IdSource::Header => "header",
            IdSource::ClaudeCodeHeader => "claude_code_header",
            IdSource::ClaudeCodeMetadata => "claude_code_metadata",
            IdSource::PromptCacheKey => "prompt_cache_key",
            IdSource::Conversation => "conversation",
            IdSource::CodexHeader => "codex_header",
            IdSource::Fingerprint => "fingerprint",
            IdSource::History => "history",
            IdSource::PreviousResponse => "previous_response",
            IdSource::Compacted => "compacted",
        }
    }

    /// Whether the session was inferred from the history, the client naming none.
    pub fn is_inferred(self) -> bool {
        matches!(
            self,
            IdSource::Fingerprint | IdSource::History | IdSource::Compacted
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionId {
    pub id: String,
    pub source: IdSource,
}

const CACHET_HEADER: HeaderName = HeaderName::from_static("x-cachet-session");
use crate::providers::clients::CLAUDE_CODE_HEADER;
/// Codex 0.169 sends `session-id`; older versions `session_id`.
const CODEX_HEADERS: [HeaderName; 2] = [
    HeaderName::from_static("session-id"),
    HeaderName::from_static("session_id"),
];

/// Longest id used as given; longer ones, or ones with other characters, are hashed.
const MAX_ID_LEN: usize = 128;

/// Identify the session of a generation request, from its headers and its envelope (the
/// one parse of its body).
pub fn identify(headers: &HeaderMap, env: &Envelope) -> SessionId {
    let found = header(headers, &CACHET_HEADER)
        .map(|id| (id, IdSource::Header))
        .or_else(|| header(headers, &CLAUDE_CODE_HEADER).map(|id| (id, IdSource::ClaudeCodeHeader)))
        .or_else(|| {
            crate::providers::anthropic::metadata_session(env)
                .map(|id| (id, IdSource::ClaudeCodeMetadata))
        })
        .or_else(|| {
            crate::providers::openai::prompt_cache_key(env).map(|id| (id, IdSource::PromptCacheKey))
        })
        .or_else(|| conversation(env).map(|id| (id, IdSource::Conversation)))
        .or_else(|| {
            CODEX_HEADERS
                .iter()
                .find_map(|name| header(headers, name))
                .map(|id| (id, IdSource::CodexHeader))
        });
    match found {
        Some((id, source)) => SessionId {
            id: safe_id(&id),
            source,
        },
        None => SessionId {
            id: fingerprint(env),
            source: IdSource::Fingerprint,
        },
    }
}

/// The session a request names in its headers alone, in `identify`'s order of header
/// sources: what the pass-through path can log without reading the body. When the body
/// names one (`metadata.user_id`, `prompt_cache_key`), `identify` may answer otherwise.
pub fn named_in_headers(headers: &HeaderMap) -> Option<String> {
    [CACHET_HEADER, CLAUDE_CODE_HEADER]
        .iter()
        .chain(CODEX_HEADERS.iter())
        .find_map(|name| header(headers, name))
        .map(|id| safe_id(&id))
}

fn header(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    non_empty(headers.get(name).and_then(|v| v.to_str().ok()))
}

fn non_empty(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// The Responses `conversation` a request names.
pub fn conversation(env: &Envelope) -> Option<String> {
    crate::providers::openai_responses::conversation_of_envelope(env)
}

/// The answer a Responses request continues (`previous_response_id`), if it names one.
pub fn previous_response(env: &Envelope) -> Option<String> {
    crate::providers::openai_responses::previous_response(env)
}

/// Ids are used in store keys and admin URLs: keep short, plain ones as given, hash others.
fn safe_id(id: &str) -> String {
    let plain = id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b));
    if plain {
        id.to_owned()
    } else {
        format!("h-{}", &hex::encode(Sha256::digest(id.as_bytes()))[..32])
    }
}

/// Fingerprints remembered, by the 128-bit hash of their inputs (see [`fingerprint`]).
/// Bounded: cleared when full, as a miss costs only one canonical computation.
const FINGERPRINTS_KEPT: usize = 4096;
static FINGERPRINTS: crate::memo::Memo<String> = crate::memo::Memo::new(FINGERPRINTS_KEPT);

/// `fp-` and 32 hex digits of sha256 over the canonical system prompt (its parts' texts,
/// without what does not key the cache), the tools and the first user message.
///
/// An agent without a session id sends the same system prompt, tools and first message on
/// every request of a session, so the fingerprint is remembered by a 128-bit hash of
/// exactly what [`canonical_fingerprint`] reads: the keyed system texts, each tool's raw
/// bytes and the first user message's raw bytes, each tagged and length-prefixed so that
/// no two different inputs feed the hash the same bytes. Only inputs not seen before are
/// parsed and canonicalised.
///
/// Assumption: xxh3-128 (seeded per process) does not collide on the inputs one process
/// sees. Under it the memo answers exactly what the canonical path would; a lookup among
/// the 4,096 entries kept meets an accidental collision with probability below 2^-116. A
/// crafted one would only make a request take another input's id inside its own client's
/// namespace (see `pipeline::identify`), where it could name any session by header anyway.
pub fn fingerprint(env: &Envelope) -> String {
    let endpoint = env.endpoint();
    let first_user = first_user_message(env);
    let mut hasher = crate::memo::hasher();
    let mut piece = |tag: u8, bytes: &[u8]| {
        hasher.update(&[tag]);
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    for part in env.system_parts() {
        if !crate::providers::api(endpoint).is_cache_neutral_system_text(&part.text) {
            piece(b's', part.text.as_bytes());
        }
    }
    for tool in env.tools_raw() {
        piece(b't', tool);
    }
    if let Some(m) = first_user {
        piece(b'u', m);
    }
    FINGERPRINTS.get_or_insert_with(hasher.digest128(), || canonical_fingerprint(env))
}

/// The first user message of the history, as the fingerprint reads it.
fn first_user_message(env: &Envelope) -> Option<&[u8]> {
    let endpoint = env.endpoint();
    env.history_raw()
        .find(|m| crate::providers::message_kind(endpoint, m).role == "user")
}

/// The system texts and tools the fingerprint reads, as values.
fn system_and_tools(env: &Envelope) -> (Vec<Value>, Vec<Value>) {
    let endpoint = env.endpoint();
    let system = env
        .system_parts()
        .iter()
        .filter(|p| !crate::providers::api(endpoint).is_cache_neutral_system_text(&p.text))
        .map(|p| json!({"type": "text", "text": p.text}))
        .collect();
    let tools = env
        .tools_raw()
        .map(|t| serde_json::from_slice(t).unwrap_or(Value::Null))
        .collect();
    (system, tools)
}

/// [`fingerprint`] computed from scratch: what the memo must always agree with.
pub(crate) fn canonical_fingerprint(env: &Envelope) -> String {
    let (system, tools) = system_and_tools(env);
    let first_user = first_user_message(env);
    // `canonical_bytes` of the material below, its keys in their sorted order, hashed as it
    // is written: the prompt's content is made canonical from its bytes straight into the
    // hash, since a first prompt can be a pasted file of megabytes, which a `Value` would
    // hold two or three times over.
    let mut hasher = Sha256::new();
    hasher.update(br#"{"first_user":{"content":"#);
    let copied = first_user.and_then(|m| canonical_field_of_raw(m, "content", &mut hasher));
    let digest = match copied {
        Some(()) => {
            hasher.update(br#"},"system":"#);
            hasher.update(canonical_bytes(&Value::Array(system)));
            hasher.update(br#","tools":"#);
            hasher.update(canonical_bytes(&Value::Array(tools)));
            hasher.update(b"}");
            hasher.finalize()
        }
        None => {
            let first_user = first_user
                .and_then(|m| serde_json::from_slice::<Value>(m).ok())
                .and_then(|mut m| m.get_mut("content").map(Value::take))
                .unwrap_or(Value::Null);
            // Under a `content` key so a string and its one-text-block form hash alike.
            let material =
                json!({"system": system, "tools": tools, "first_user": {"content": first_user}});
            Sha256::digest(canonical_bytes(&material))
        }
    };
    format!("fp-{}", &hex::encode(digest)[..32])
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
