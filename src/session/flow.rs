//! The session steps of one request, in the order the pipeline takes them: prepare (take
//! the request index, load the log, hash the client history), plan the replay, persist new
//! patches before forwarding (once per key when concurrent requests would each make one).

use serde_json::Value;

use super::anchor::{Anchor, PrefixHashes};
use super::entry::{is_persisted_reason, now_ms, ContextTransform, Entry, ENTRY_VERSION};
use super::identity::SessionId;
use super::log::SessionLog;
use super::patch_plan::PatchPlan;
use super::store::{Appended, SessionStore, StoreResult};
use crate::patch::ops::Op;

/// A request's session, ready for replay.
#[derive(Debug, Clone)]
pub struct SessionContext {
    pub id: SessionId,
    /// `meta.request_index`: 0 for the session's first request.
    pub request_index: u64,
    /// The session's log as it was when the request arrived.
    pub log: SessionLog,
    /// Prefix hashes of the client's history (before any patch).
    pub history: PrefixHashes,
}

/// Take the request's index and load its session's log. `hashes` are the prefix hashes of
/// the client's history as sent (the envelope's history: Anthropic and Chat messages after
/// the system prompt, Responses input items), before any patch.
pub async fn prepare(
    store: &dyn SessionStore,
    id: SessionId,
    hashes: PrefixHashes,
) -> StoreResult<SessionContext> {
    let (request_index, log) =
        tokio::try_join!(store.next_request_index(&id.id), store.load(&id.id))?;
    Ok(SessionContext {
        id,
        request_index,
        log,
        history: hashes,
    })
}

/// Load an observed request's session after its answer. Its request index is not taken
/// here: nothing read it before the answer, so the store takes it as it writes the record
/// ([`SessionStore::record_next`]), in one write instead of two. Until then it reads 0.
pub async fn observed(
    store: &dyn SessionStore,
    id: SessionId,
    hashes: PrefixHashes,
) -> StoreResult<SessionContext> {
    Ok(SessionContext {
        log: store.load(&id.id).await?,
        id,
        request_index: 0,
        history: hashes,
    })
}

impl SessionContext {
    /// Which persisted patches apply to this request, and which are stale.
    pub fn plan(&self) -> PatchPlan<'_> {
        self.log.replay_plan(&self.history)
    }

    /// The anchor for a patch made during this request: the whole client history.
    pub fn anchor(&self) -> Anchor {
        self.history.full()
    }

    /// A patch to persist, anchored at this request's client history; `None` for reasons
    /// whose patches are not persisted (`ephemeral`).
    pub fn transform(
        &self,
        transformer: &str,
        reason: &str,
        patch: Vec<Op>,
        display: Option<Value>,
    ) -> Option<ContextTransform> {
        is_persisted_reason(reason).then(|| ContextTransform {
            version: ENTRY_VERSION,
            time: now_ms(),
            transformer: transformer.to_owned(),
            reason: reason.to_owned(),
            anchor: self.anchor(),
            patch,
            display,
            request_index: Some(self.request_index),
        })
    }

    /// Append patches to the log; durable when this returns, so call it before forwarding
    /// the request they shaped.
    pub async fn persist(
        &self,
        store: &dyn SessionStore,
        transforms: Vec<ContextTransform>,
    ) -> StoreResult<()> {
        if transforms.is_empty() {
            return Ok(());
        }
        let entries: Vec<Entry> = transforms
            .into_iter()
            .map(Entry::ContextTransform)
            .collect();
        store.append(&self.id.id, &entries).await.map(drop)
    }

    /// Append a patch unless one was already persisted for this session under `key` (by a
    /// concurrent request, here or on another instance sharing the store): then the
    /// earlier patch is answered instead, for the caller to replay. Durable when this
    /// returns, so call it before forwarding the request the patch shaped.
    pub async fn persist_once(
        &self,
        store: &dyn SessionStore,
        key: &str,
        transform: ContextTransform,
    ) -> StoreResult<PersistedOnce> {
        let entry = [Entry::ContextTransform(transform)];
        Ok(match store.append_once(&self.id.id, key, &entry).await? {
            Appended::Written { .. } => PersistedOnce::Ours,
            Appended::Existing(entries) => PersistedOnce::Theirs(
                entries
                    .into_iter()
                    .filter_map(|e| match e {
                        Entry::ContextTransform(t) => Some(t),
                        _ => None,
                    })
                    .collect(),
            ),
        })
    }
}

/// Who made a patch persisted with [`SessionContext::persist_once`].
#[derive(Debug, Clone, PartialEq)]
pub enum PersistedOnce {
    /// This request's patch is the one in the log.
    Ours,
    /// An earlier request's: these, to replay instead.
    Theirs(Vec<ContextTransform>),
}
