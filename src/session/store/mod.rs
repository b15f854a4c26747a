//! Session stores: where logs, request counters and message contents live.
//!
//! The log is append-only; an entry never changes once written. That is what lets a cache
//! in front of a shared store stay correct: it only needs to know how long the log is now
//! (see [`cached::CachedStore`]).

mod cached;
mod redis;
mod sqlite;

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Serialize;

pub use cached::CachedStore;
pub use redis::RedisStore;
pub use sqlite::SqliteStore;

use super::entry::Entry;
use super::normalize::MessageKey;

/// Content-addressed bytes: a message, a system prompt or a tool list in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub key: MessageKey,
    pub bytes: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or refused the operation; the caller applies
    /// `on_store_error` (fail-open or fail-closed).
    #[error("session store unavailable: {0}")]
    Unavailable(String),
    /// The `store` setting is not a usable path or Redis URL.
    #[error("invalid session store '{spec}': {reason}")]
    InvalidSpec { spec: String, reason: String },
}

pub type StoreResult<T> = Result<T, StoreError>;

/// One session as listed by `GET /sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub id: String,
    /// Unix milliseconds of the first and the latest activity.
    pub created: u64,
    pub updated: u64,
    pub entries: u64,
    pub requests: u64,
}

/// Totals over the whole store, for the storage benchmark and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    pub sessions: u64,
    pub entries: u64,
    pub entry_bytes: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
}

/// A durable session store. Every write is durable when its future resolves.
pub trait SessionStore: Send + Sync {
    /// Append entries to a session's log, in order, atomically.
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<()>>;

    /// Number of entries in a session's log (0 for an unknown session).
    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>>;

    /// Entries from position `start` to the end, in log order.
    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>>;

    /// The whole log of a session.
    fn load<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<Arc<Vec<Entry>>>> {
        Box::pin(async move { Ok(Arc::new(self.load_from(session, 0).await?)) })
    }

    /// Store content blobs; a key already present is left as it is.
    fn put_blobs<'a>(&'a self, blobs: &'a [Blob]) -> BoxFuture<'a, StoreResult<()>>;

    /// Blobs by key, `None` where missing.
    fn get_blobs<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>>;

    /// The session's next request index: 0 for its first request, atomic across restarts
    /// and across cachet instances sharing the store.
    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>>;

    /// The most recently active sessions, newest first.
    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>>;

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>>;
}

/// The embedded database's file name inside the store folder.
pub const SQLITE_FILE: &str = "sessions.sqlite3";

/// How many sessions' logs the cache in front of a store keeps.
const CACHED_SESSIONS: u64 = 10_000;
/// How many content blobs it keeps.
const CACHED_BLOBS: u64 = 100_000;

/// Open the store named by `store = "..."` / `--store`: `redis://host:port/db` (or
/// `rediss://`) for Redis, anything else a path for the embedded store (a folder, or a
/// file ending in `.sqlite3`, `.sqlite` or `.db`). A moka cache sits in front of either.
pub async fn open_store(spec: &str) -> StoreResult<Arc<dyn SessionStore>> {
    let inner: Arc<dyn SessionStore> = if is_redis(spec) {
        match RedisStore::connect(spec).await {
            Ok(store) => Arc::new(store),
            // A Redis that is down at start-up may come back: connect on use, and let
            // `on_store_error` decide what requests do meanwhile.
            Err(StoreError::Unavailable(reason)) => {
                tracing::warn!("session store not reachable yet ({reason}); retrying on use");
                Arc::new(RedisStore::lazy(spec)?)
            }
            Err(e) => return Err(e),
        }
    } else {
        Arc::new(SqliteStore::open(&sqlite_path(spec)?).await?)
    };
    Ok(Arc::new(CachedStore::new(
        inner,
        CACHED_SESSIONS,
        CACHED_BLOBS,
    )))
}

fn is_redis(spec: &str) -> bool {
    spec.starts_with("redis://") || spec.starts_with("rediss://")
}

/// The database file for a path spec.
pub fn sqlite_path(spec: &str) -> StoreResult<PathBuf> {
    if spec.trim().is_empty() {
        return Err(StoreError::InvalidSpec {
            spec: spec.into(),
            reason: "empty path".into(),
        });
    }
    let path = PathBuf::from(spec);
    let is_file = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "sqlite3" | "sqlite" | "db"));
    Ok(if is_file {
        path
    } else {
        path.join(SQLITE_FILE)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_choose_the_store() {
        assert!(is_redis("redis://127.0.0.1:6379/0"));
        assert!(!is_redis("./cachet-data/"));
        assert_eq!(
            sqlite_path("./cachet-data/").unwrap(),
            PathBuf::from("./cachet-data/").join(SQLITE_FILE)
        );
        assert_eq!(
            sqlite_path("/var/lib/cachet/s.db").unwrap(),
            PathBuf::from("/var/lib/cachet/s.db")
        );
        assert!(sqlite_path("").is_err());
    }
}
