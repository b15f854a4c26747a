//! A moka cache in front of a store, bounded in bytes (`sessions.cache_bytes`).
//!
//! It keeps three kinds of item under one budget, each weighed by the bytes it holds:
//! session logs, content blobs read back, and marks of the tool and system lists a session
//! has already stored (so a request record does not send them again). Written content is
//! never kept: a client that sends a 20 MB system prompt costs the cache a mark, not 20 MB.
//! Messages get no mark: a record stores only the messages its base did not send, which
//! are new to the session but for a rare rewind, so a mark per message would cost memory
//! for every message of a session's life and save nearly nothing (the store skips content
//! it holds either way).
//!
//! A session's log is append-only, so a cached copy is checked against the store's
//! current length on every load and only the missing tail is fetched; appends by other
//! cachet instances sharing a Redis store are therefore always seen. The grown log shares
//! every earlier entry with the cached one ([`SessionLog`]): loading costs O(new entries).
//! Writes go to the store first; a request record or a persisted patch the store has taken
//! joins the cached log only when it lands right after it (the store says where it landed),
//! so the cache holds nothing the store does not, and the next load need not read it back.
//! A store that answers records before committing them says when it lost some
//! ([`SessionStore::lost_writes`]); the cache then forgets everything it holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use moka::future::Cache;
use moka::ops::compute::Op;

use super::{
    Appended, Blob, Retention, SessionStore, SessionSummary, StoreHealth, StoreResult, StoreStats,
    SweepReport,
};
use crate::providers::cache_key::MessageKey;
use crate::session::entry::decode_key;
use crate::session::entry::Entry;
use crate::session::log::SessionLog;

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Log(Arc<str>),
    /// The session holds this content already.
    Stored(Arc<str>, MessageKey),
    Blob(Arc<str>, MessageKey),
}

#[derive(Clone)]
enum Item {
    Log(SessionLog),
    Stored,
    Blob(Arc<Vec<u8>>),
}

/// What an item costs beyond its contents (key, moka's bookkeeping).
const OVERHEAD: usize = 96;

fn weigh(key: &Key, item: &Item) -> u32 {
    let key_bytes = match key {
        Key::Log(s) => s.len(),
        Key::Stored(s, _) | Key::Blob(s, _) => s.len() + 32,
    };
    let item_bytes = match item {
        Item::Log(log) => log.weight(),
        Item::Stored => 0,
        Item::Blob(bytes) => bytes.len(),
    };
    u32::try_from(OVERHEAD + key_bytes + item_bytes).unwrap_or(u32::MAX)
}

pub struct CachedStore {
    inner: Arc<dyn SessionStore>,
    cache: Cache<Key, Item>,
    /// The store's lost writes when the cache last looked.
    lost_seen: AtomicU64,
}

impl CachedStore {
    /// A cache of at most `budget` bytes in front of `inner`.
    pub fn new(inner: Arc<dyn SessionStore>, budget: u64) -> CachedStore {
        CachedStore {
            inner,
            cache: Cache::builder().max_capacity(budget).weigher(weigh).build(),
            lost_seen: AtomicU64::new(0),
        }
    }

    /// Records the store answered for but then lost may be in cached logs and marks:
    /// forget everything when there are new ones.
    fn forget_lost(&self) {
        let lost = self.inner.lost_writes();
        if self.lost_seen.swap(lost, Ordering::Relaxed) != lost {
            self.cache.invalidate_all();
        }
    }

    /// The bytes the cache holds now (after pending evictions are applied).
    pub async fn weighted_size(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.weighted_size()
    }

    /// The blobs the session is not known to hold (content it holds needs no second
    /// write), and the keys of the tool and system lists among them (`entry`'s), to mark
    /// once written.
    fn unstored(
        &self,
        session: &Arc<str>,
        entry: &Entry,
        mut blobs: Vec<Blob>,
    ) -> (Vec<Blob>, Vec<MessageKey>) {
        blobs.retain(|blob| {
            !self
                .cache
                .contains_key(&Key::Stored(session.clone(), blob.key))
        });
        let lists: Vec<MessageKey> = match entry {
            Entry::Request(r) => [&r.tools_key, &r.system_key]
                .into_iter()
                .filter_map(|k| k.as_deref().and_then(decode_key))
                .collect(),
            _ => Vec::new(),
        };
        let keys = blobs
            .iter()
            .map(|blob| blob.key)
            .filter(|key| lists.contains(key))
            .collect();
        (blobs, keys)
    }

    /// Content the session now holds needs no second write.
    async fn mark_stored(&self, session: &Arc<str>, keys: Vec<MessageKey>) {
        for key in keys {
            self.cache
                .insert(Key::Stored(session.clone(), key), Item::Stored)
                .await;
        }
    }

    /// The entries just written from position `at` join the cached log when that log ends
    /// right before them, so the next load need not read them back. Any other cached log is
    /// left to the length check of the next load (another write came first, or a load
    /// still in flight will put back a shorter log).
    async fn extend_cached_log(&self, session: Arc<str>, at: u64, entries: &[Entry]) {
        self.cache
            .entry(Key::Log(session))
            .and_compute_with(|cached| {
                let op = match cached.map(|c| c.into_value()) {
                    Some(Item::Log(log)) if log.len() as u64 == at => {
                        Op::Put(Item::Log(log.extended(entries.to_vec())))
                    }
                    _ => Op::Nop,
                };
                std::future::ready(op)
            })
            .await;
    }

    async fn cached_log(&self, session: &str) -> Option<SessionLog> {
        match self.cache.get(&Key::Log(session.into())).await {
            Some(Item::Log(log)) => Some(log),
            _ => None,
        }
    }
}

impl SessionStore for CachedStore {
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        Box::pin(async move {
            self.forget_lost();
            let at = self.inner.append(session, entries).await?;
            if let Some(at) = at {
                self.extend_cached_log(session.into(), at, entries).await;
            }
            Ok(at)
        })
    }

    fn append_once<'a>(
        &'a self,
        session: &'a str,
        key: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Appended>> {
        Box::pin(async move {
            self.forget_lost();
            let appended = self.inner.append_once(session, key, entries).await?;
            if let Appended::Written { at } = appended {
                self.extend_cached_log(session.into(), at, entries).await;
            }
            Ok(appended)
        })
    }

    fn record<'a>(
        &'a self,
        session: &'a str,
        entry: &'a Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<u64>> {
        Box::pin(async move {
            self.forget_lost();
            let id: Arc<str> = session.into();
            let (blobs, written) = self.unstored(&id, entry, blobs);
            let at = self.inner.record(session, entry, blobs).await?;
            self.mark_stored(&id, written).await;
            self.extend_cached_log(id, at, std::slice::from_ref(entry))
                .await;
            Ok(at)
        })
    }

    fn record_next<'a>(
        &'a self,
        session: &'a str,
        entry: Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<(u64, u64)>> {
        Box::pin(async move {
            self.forget_lost();
            let id: Arc<str> = session.into();
            let (blobs, written) = self.unstored(&id, &entry, blobs);
            let (index, at) = self
                .inner
                .record_next(session, entry.clone(), blobs)
                .await?;
            self.mark_stored(&id, written).await;
            let entry = entry.with_request_index(index);
            self.extend_cached_log(id, at, std::slice::from_ref(&entry))
                .await;
            Ok((index, at))
        })
    }

    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        self.inner.entry_count(session)
    }

    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        // Every entry is asked for: a cached log holds only what requests read.
        self.inner.load_from(session, start)
    }

    fn load<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<SessionLog>> {
        Box::pin(async move {
            self.forget_lost();
            let stored = self.inner.entry_count(session).await?;
            let log = match self.cached_log(session).await {
                Some(log) if log.len() == stored => return Ok(log),
                Some(log) if log.len() < stored => {
                    let tail = self.inner.load_from(session, log.len()).await?;
                    log.extended(tail)
                }
                // Not cached, or the store holds less than the cache (it was reset).
                _ => SessionLog::from(self.inner.load_from(session, 0).await?),
            };
            self.cache
                .insert(Key::Log(session.into()), Item::Log(log.clone()))
                .await;
            Ok(log)
        })
    }

    fn get_blobs<'a>(
        &'a self,
        session: &'a str,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        Box::pin(async move {
            self.forget_lost();
            let id: Arc<str> = session.into();
            let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(keys.len());
            let mut missing = Vec::new();
            for (i, key) in keys.iter().enumerate() {
                match self.cache.get(&Key::Blob(id.clone(), *key)).await {
                    Some(Item::Blob(bytes)) => out.push(Some(bytes.as_ref().clone())),
                    _ => {
                        out.push(None);
                        missing.push(i);
                    }
                }
            }
            if missing.is_empty() {
                return Ok(out);
            }
            let wanted: Vec<MessageKey> = missing.iter().map(|&i| keys[i]).collect();
            let found = self.inner.get_blobs(session, &wanted).await?;
            for (&i, bytes) in missing.iter().zip(found) {
                if let Some(bytes) = bytes {
                    self.cache
                        .insert(
                            Key::Blob(id.clone(), keys[i]),
                            Item::Blob(Arc::new(bytes.clone())),
                        )
                        .await;
                    out[i] = Some(bytes);
                }
            }
            Ok(out)
        })
    }

    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        self.inner.next_request_index(session)
    }

    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>> {
        self.inner.list_sessions(limit)
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        self.inner.stats()
    }

    fn sweep<'a>(
        &'a self,
        retention: &'a Retention,
        now_ms: u64,
    ) -> BoxFuture<'a, StoreResult<SweepReport>> {
        Box::pin(async move {
            let report = self.inner.sweep(retention, now_ms).await?;
            if report.expired + report.evicted > 0 {
                // Deleted sessions must not live on here (a later session of the same id
                // starts empty, and content marks would skip writes it needs).
                self.cache.invalidate_all();
            }
            Ok(report)
        })
    }

    fn health(&self) -> BoxFuture<'_, StoreHealth> {
        self.inner.health()
    }

    fn lost_writes(&self) -> u64 {
        self.inner.lost_writes()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.cache.invalidate_all();
            self.inner.close().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::RequestRecord;
    use crate::session::store::SqliteStore;

    /// A record marks the tool and system lists it stored, so the next record of the
    /// session does not send them again; the messages it stored get no mark.
    #[tokio::test]
    async fn a_record_marks_its_tool_and_system_lists_not_its_messages() {
        let dir = tempfile::tempdir().unwrap();
        let inner = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        let cache = CachedStore::new(Arc::new(inner), 1 << 20);
        let (tools, system, message) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        let entry = Entry::Request(RequestRecord {
            tools_key: Some(hex::encode(tools)),
            system_key: Some(hex::encode(system)),
            ..RequestRecord::default()
        });
        let blobs = [tools, system, message]
            .map(|key| Blob::canonical(key, b"[]".to_vec()))
            .to_vec();
        cache.record("s", &entry, blobs.clone()).await.unwrap();
        let marked = |key| cache.cache.contains_key(&Key::Stored("s".into(), key));
        assert!(marked(tools) && marked(system));
        assert!(!marked(message));
        let (unsent, _) = cache.unstored(&"s".into(), &entry, blobs);
        let unsent: Vec<MessageKey> = unsent.iter().map(|b| b.key).collect();
        assert_eq!(unsent, [message]);
    }
}
