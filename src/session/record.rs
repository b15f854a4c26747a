//! Recording a forwarded request in compact form: the messages sent are stored once each,
//! by content address, and the log entry names only the messages new since an earlier
//! request of the session. The request-only tail is kept apart, so that a request carrying
//! one still extends the previous request's history.

use serde_json::Value;

use super::anchor::PrefixHashes;
use super::entry::{Entry, PatchEvent, RequestRecord, SentMessages, ENTRY_VERSION};
use super::log::Entries;
use super::store::{Blob, SessionStore, StoreResult};
use crate::measure::{Diagnosis, Named, PromptShape};
use crate::providers::cache_key::MessageKey;
use crate::usage::Usage;

/// How many earlier requests are tried as the base of the delta (newest first).
const BASE_CANDIDATES: usize = 8;

/// What the pipeline knows about a forwarded request.
#[derive(Debug, Clone)]
pub struct RequestDraft<'a> {
    pub request_index: u64,
    pub turn_index: Option<u64>,
    /// When the request was recorded (Unix milliseconds).
    pub time_ms: u64,
    pub provider: &'a str,
    pub endpoint: &'a str,
    pub client: Option<&'a str>,
    /// What the request's prefix keys on (model, tools, system, history, tail, markers).
    pub shape: &'a PromptShape,
    /// The raw bytes of `shape.messages`, in order: the content stored for new messages.
    pub history: &'a [bytes::Bytes],
    /// The prefix hashes of `shape.messages`, when the session's anchors already hold them
    /// (a request sent as the client wrote it); computed otherwise.
    pub hashes: Option<&'a PrefixHashes>,
    pub usage: Option<Usage>,
    pub status: Option<u16>,
    /// How the answer ended, when not whole (see [`RequestRecord::outcome`]).
    pub outcome: Option<&'a str>,
    pub lane: u32,
    /// The client's own history, before any patch.
    pub conversation: super::entry::Conversation,
    pub diagnosis: Option<Diagnosis>,
    pub patches: Vec<PatchEvent>,
    pub variant: Option<String>,
    pub response_id: Option<String>,
    /// The Conversations API conversation the request named.
    pub conversation_id: Option<String>,
}

/// A tool list or system prompt's key as a record holds it, and its blob (each element's
/// name and address) unless `stored` is that key: the latest request of the session
/// recorded the same list, so the session holds it already. Agents send the same tools and
/// system prompt on every request; building the list again was a hex key and a JSON array
/// per tool, on every record.
fn list_blob(
    key: Option<MessageKey>,
    items: &[Named],
    stored: Option<&str>,
) -> Option<(String, Option<Blob>)> {
    let key = key?;
    let hex_key = hex::encode(key);
    if stored == Some(hex_key.as_str()) {
        return Some((hex_key, None));
    }
    let list: Vec<Value> = items
        .iter()
        .map(|n| Value::Array(vec![n.name.clone().into(), hex::encode(n.key).into()]))
        .collect();
    let bytes = serde_json::to_vec(&list).unwrap_or_default();
    Some((hex_key, Some(Blob::canonical(key, bytes))))
}

/// The elements of a list blob written by [`compact_request`].
pub fn named_list(bytes: &[u8]) -> Option<Vec<Named>> {
    let list: Vec<(String, String)> = serde_json::from_slice(bytes).ok()?;
    list.into_iter()
        .map(|(name, hex_key)| {
            let mut key = [0u8; 32];
            hex::decode_to_slice(hex_key, &mut key).ok()?;
            Some(Named { name, key })
        })
        .collect()
}

/// The compact record of a request and the blobs it needs stored (the contents of
/// messages not covered by an earlier request of `prior`, and the tool and system lists).
pub fn compact_request(
    prior: &(impl Entries + ?Sized),
    draft: &RequestDraft<'_>,
) -> (RequestRecord, Vec<Blob>) {
    let shape = draft.shape;
    let computed;
    let hashes = match draft.hashes.filter(|h| h.keys() == shape.messages) {
        Some(known) => known,
        None => {
            computed = PrefixHashes::from_keys(shape.messages.clone());
            &computed
        }
    };
    let (extends, base) = find_base(prior, hashes);
    let full = hashes.full();
    let keys = shape.messages[base..].to_vec();
    // Made canonical as they were keyed, or else by the store as it writes them. Room for
    // the tool and system lists: growing a vector of 100,000 blobs would hold it twice for
    // a moment.
    let fresh = |key: &MessageKey| draft.hashes.and_then(|h| h.fresh(key)).cloned();
    let mut blobs: Vec<Blob> = Vec::with_capacity(shape.messages.len().saturating_sub(base) + 2);
    blobs.extend(draft.history.iter().zip(&shape.messages).skip(base).map(
        |(raw, key)| match fresh(key) {
            Some(bytes) => Blob::canonical(*key, bytes),
            None => Blob::sent(*key, raw.clone()),
        },
    ));
    let latest = latest_request(prior);
    let tools = list_blob(
        shape.tools_key,
        &shape.tools,
        latest.and_then(|r| r.tools_key.as_deref()),
    );
    let system = list_blob(
        shape.system_key,
        &shape.system,
        latest.and_then(|r| r.system_key.as_deref()),
    );
    let tools_key = tools.map(|(k, b)| {
        blobs.extend(b);
        k
    });
    let system_key = system.map(|(k, b)| {
        blobs.extend(b);
        k
    });
    dedup(&mut blobs);
    let record = RequestRecord {
        version: ENTRY_VERSION,
        time: draft.time_ms,
        sent_ms: None,
        request_index: draft.request_index,
        turn_index: draft.turn_index,
        model: shape.model.clone(),
        provider: draft.provider.to_owned(),
        endpoint: draft.endpoint.to_owned(),
        client: draft.client.map(str::to_owned),
        sent: SentMessages {
            count: full.count,
            hash: full.hash,
            extends,
            base,
            keys,
        },
        tail: shape.tail.clone(),
        system_key,
        tools_key,
        marks: shape.marks.clone(),
        lane: draft.lane,
        conversation: draft.conversation.clone(),
        usage: draft.usage,
        status: draft.status,
        outcome: draft.outcome.map(str::to_string),
        diagnosis: draft.diagnosis.clone(),
        provider_diagnosis: None,
        patches: draft.patches.clone(),
        variant: draft.variant.clone(),
        response_id: draft.response_id.clone(),
        conversation_id: draft.conversation_id.clone(),
        ttl_decision: None,
        warmup: false,
    };
    (record, blobs)
}

/// The session's latest recorded request of its conversations (not a warmup).
fn latest_request(prior: &(impl Entries + ?Sized)) -> Option<&RequestRecord> {
    prior.entries().rev().find_map(|e| match e {
        Entry::Request(r) if r.in_conversation() => Some(r),
        _ => None,
    })
}

/// The newest earlier request whose sent messages are a prefix of these.
fn find_base(prior: &(impl Entries + ?Sized), hashes: &PrefixHashes) -> (Option<u64>, usize) {
    prior
        .entries()
        .rev()
        .filter_map(|e| match e {
            Entry::Request(r) => Some(r),
            _ => None,
        })
        .take(BASE_CANDIDATES)
        // An empty history (a warmup's) starts every history and covers none of it.
        .find(|r| r.sent.count > 0 && hashes.matches(&r.sent.anchor()))
        .map(|r| (Some(r.request_index), r.sent.count))
        .unwrap_or((None, 0))
}

/// Drop the blobs whose key came earlier. The set holds references, sized once: a set of
/// the keys themselves, grown by doubling, held 6 MiB for a history of 111,000 messages.
fn dedup(blobs: &mut Vec<Blob>) {
    let mut seen = std::collections::HashSet::with_capacity(blobs.len());
    let first: Vec<bool> = blobs.iter().map(|b| seen.insert(&b.key)).collect();
    drop(seen);
    let mut first = first.into_iter();
    blobs.retain(|_| first.next().unwrap_or(true));
}

/// Store a request's new content and its log entry (one write). `prior` is the session's
/// log as loaded for this request.
pub async fn record_request(
    store: &dyn SessionStore,
    session: &str,
    prior: &(impl Entries + ?Sized),
    draft: &RequestDraft<'_>,
) -> StoreResult<RequestRecord> {
    let (record, blobs) = compact_request(prior, draft);
    store
        .record(session, &Entry::Request(record.clone()), blobs)
        .await?;
    Ok(record)
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
