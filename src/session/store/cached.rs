//! A moka cache in front of a store.
//!
//! Content blobs are immutable, so they are cached as they are. A session's log is
//! append-only, so a cached copy is checked against the store's current length on every
//! load and only the missing tail is fetched; appends by other cachet instances sharing a
//! Redis store are therefore always seen. Appends go straight to the store and never into
//! the cache, so the cache holds nothing the store does not.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use moka::future::Cache;

use super::{Blob, SessionStore, SessionSummary, StoreResult, StoreStats};
use crate::session::entry::Entry;
use crate::session::normalize::MessageKey;

pub struct CachedStore {
    inner: Arc<dyn SessionStore>,
    logs: Cache<String, Arc<Vec<Entry>>>,
    blobs: Cache<MessageKey, Arc<Vec<u8>>>,
}

impl CachedStore {
    pub fn new(inner: Arc<dyn SessionStore>, sessions: u64, blobs: u64) -> CachedStore {
        CachedStore {
            inner,
            logs: Cache::new(sessions),
            blobs: Cache::new(blobs),
        }
    }
}

impl SessionStore for CachedStore {
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<()>> {
        self.inner.append(session, entries)
    }

    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        self.inner.entry_count(session)
    }

    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        Box::pin(async move {
            let all = self.load(session).await?;
            Ok(all.get(start..).map(<[Entry]>::to_vec).unwrap_or_default())
        })
    }

    fn load<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<Arc<Vec<Entry>>>> {
        Box::pin(async move {
            let stored = self.inner.entry_count(session).await?;
            let cached = self.logs.get(session).await;
            let log = match cached {
                Some(log) if log.len() == stored => return Ok(log),
                Some(log) if log.len() < stored => {
                    let tail = self.inner.load_from(session, log.len()).await?;
                    let mut all = Vec::with_capacity(log.len() + tail.len());
                    all.extend_from_slice(&log);
                    all.extend(tail);
                    Arc::new(all)
                }
                // Not cached, or the store holds less than the cache (it was reset).
                _ => Arc::new(self.inner.load_from(session, 0).await?),
            };
            self.logs.insert(session.to_owned(), Arc::clone(&log)).await;
            Ok(log)
        })
    }

    fn put_blobs<'a>(&'a self, blobs: &'a [Blob]) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            // Blobs this instance has already seen stored need no second write.
            let mut missing = Vec::new();
            for blob in blobs {
                if !self.blobs.contains_key(&blob.key) {
                    missing.push(blob.clone());
                }
            }
            self.inner.put_blobs(&missing).await?;
            for blob in missing {
                self.blobs.insert(blob.key, Arc::new(blob.bytes)).await;
            }
            Ok(())
        })
    }

    fn get_blobs<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        Box::pin(async move {
            let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(keys.len());
            let mut missing = Vec::new();
            for (i, key) in keys.iter().enumerate() {
                match self.blobs.get(key).await {
                    Some(bytes) => out.push(Some(bytes.as_ref().clone())),
                    None => {
                        out.push(None);
                        missing.push(i);
                    }
                }
            }
            if missing.is_empty() {
                return Ok(out);
            }
            let wanted: Vec<MessageKey> = missing.iter().map(|&i| keys[i]).collect();
            let found = self.inner.get_blobs(&wanted).await?;
            for (&i, bytes) in missing.iter().zip(found) {
                if let Some(bytes) = bytes {
                    self.blobs.insert(keys[i], Arc::new(bytes.clone())).await;
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
}
