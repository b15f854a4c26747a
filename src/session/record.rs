//! Recording a forwarded request in compact form: the messages sent are stored once each,
//! by content address, and the log entry names only the messages new since an earlier
//! request of the session.

use serde_json::Value;

use super::anchor::PrefixHashes;
use super::entry::{now_ms, Entry, RequestRecord, SentMessages, ENTRY_VERSION};
use super::log::SessionLog;
use super::normalize::{canonical_bytes, key_of_bytes, MessageKey};
use super::store::{Blob, SessionStore, StoreResult};
use crate::usage::Usage;

/// How many earlier requests are tried as the base of the delta (newest first).
const BASE_CANDIDATES: usize = 8;

/// What the pipeline knows about a forwarded request.
#[derive(Debug, Clone)]
pub struct RequestDraft<'a> {
    pub request_index: u64,
    pub turn_index: Option<u64>,
    pub model: &'a str,
    pub provider: &'a str,
    pub endpoint: &'a str,
    pub client: Option<&'a str>,
    /// The messages sent upstream (after patches), in order.
    pub sent: &'a [Value],
    pub system: Option<&'a Value>,
    pub tools: Option<&'a Value>,
    pub usage: Option<Usage>,
    pub status: Option<u16>,
    pub breaks: Option<Value>,
    pub variant: Option<String>,
}

fn blob_of(value: &Value) -> Blob {
    let bytes = canonical_bytes(value);
    Blob {
        key: key_of_bytes(&bytes),
        bytes,
    }
}

/// The compact record of a request and the blobs it needs stored (only those for messages
/// not covered by an earlier request of `prior`, plus system and tools).
pub fn compact_request(prior: &SessionLog, draft: &RequestDraft<'_>) -> (RequestRecord, Vec<Blob>) {
    let message_blobs: Vec<Blob> = draft.sent.iter().map(blob_of).collect();
    let hashes = PrefixHashes::from_keys(message_blobs.iter().map(|b| b.key).collect());
    let (extends, base) = find_base(prior, &hashes);
    let full = hashes.full();
    let mut blobs: Vec<Blob> = message_blobs.into_iter().skip(base).collect();
    let keys = blobs.iter().map(|b| hex::encode(b.key)).collect();
    let system_key = draft.system.map(|s| {
        let blob = blob_of(s);
        let key = hex::encode(blob.key);
        blobs.push(blob);
        key
    });
    let tools_key = draft.tools.map(|t| {
        let blob = blob_of(t);
        let key = hex::encode(blob.key);
        blobs.push(blob);
        key
    });
    dedup(&mut blobs);
    let record = RequestRecord {
        version: ENTRY_VERSION,
        time: now_ms(),
        request_index: draft.request_index,
        turn_index: draft.turn_index,
        model: draft.model.to_owned(),
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
        system_key,
        tools_key,
        usage: draft.usage,
        status: draft.status,
        breaks: draft.breaks.clone(),
        variant: draft.variant.clone(),
    };
    (record, blobs)
}

/// The newest earlier request whose sent messages are a prefix of these.
fn find_base(prior: &SessionLog, hashes: &PrefixHashes) -> (Option<u64>, usize) {
    prior
        .iter()
        .rev()
        .filter_map(|e| match e {
            Entry::Request(r) => Some(r),
            _ => None,
        })
        .take(BASE_CANDIDATES)
        .find(|r| hashes.matches(&r.sent.anchor()))
        .map(|r| (Some(r.request_index), r.sent.count))
        .unwrap_or((None, 0))
}

fn dedup(blobs: &mut Vec<Blob>) {
    let mut seen = std::collections::HashSet::new();
    blobs.retain(|b| seen.insert(b.key));
}

/// Store a request's new content and its log entry (one write). `prior` is the session's
/// log as loaded for this request.
pub async fn record_request(
    store: &dyn SessionStore,
    session: &str,
    prior: &SessionLog,
    draft: &RequestDraft<'_>,
) -> StoreResult<RequestRecord> {
    let (record, blobs) = compact_request(prior, draft);
    store
        .record(session, &Entry::Request(record.clone()), &blobs)
        .await?;
    Ok(record)
}

/// The full list of message keys a recorded request sent, following its chain of bases.
/// `None` when a base is missing from the log.
pub fn sent_keys(log: &SessionLog, request_index: u64) -> Option<Vec<MessageKey>> {
    let find = |index: u64| {
        log.iter().rev().find_map(|e| match e {
            Entry::Request(r) if r.request_index == index => Some(r),
            _ => None,
        })
    };
    let mut chain = Vec::new();
    let mut current = find(request_index)?;
    loop {
        chain.push(current);
        match current.sent.extends {
            Some(base) if current.sent.base > 0 && chain.len() <= log.len() => {
                current = find(base)?;
            }
            _ => break,
        }
    }
    let mut keys = Vec::new();
    for record in chain.iter().rev() {
        keys.truncate(record.sent.base);
        if keys.len() != record.sent.base {
            return None;
        }
        for hex_key in &record.sent.keys {
            let mut key = [0u8; 32];
            hex::decode_to_slice(hex_key, &mut key).ok()?;
            keys.push(key);
        }
    }
    Some(keys)
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
