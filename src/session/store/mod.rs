//! Session stores: where logs, request counters and message contents live.
//!
//! The log is append-only; an entry never changes once written. That is what lets a cache
//! in front of a shared store stay correct: it only needs to know how long the log is now
//! (see [`cached::CachedStore`]).
//!
//! One module per concern: [`spec`] parses the `store` setting, [`sqlite`] and [`redis`]
//! are the two stores, [`cached`] the byte-bounded cache in front of either,
//! [`maintenance`] the retention sweeper, [`unavailable`] the stand-in for a store that
//! could not be opened.

mod cached;
pub mod maintenance;
mod redis;
pub mod spec;
mod sqlite;
mod unavailable;

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use prometheus::IntCounterVec;
use serde::Serialize;

pub use cached::CachedStore;
pub use maintenance::{Maintenance, Retention, SweepReport};
pub use redis::RedisStore;
pub use spec::{StoreSpec, SQLITE_FILE};
pub use sqlite::SqliteStore;

use super::entry::Entry;
use super::log::SessionLog;
use crate::providers::cache_key::MessageKey;
use crate::session::{SessionsConfig, StoreFailure};

/// Content-addressed bytes: a message, a system prompt or a tool list in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub key: MessageKey,
    pub bytes: BlobBytes,
}

/// A blob's bytes: canonical already, or a message as it was sent (a slice of the request
/// body), made canonical only as it is written. A store writes sent messages one at a
/// time, so recording a 30 MB history never holds a second copy of all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobBytes {
    Canonical(std::sync::Arc<[u8]>),
    Sent(bytes::Bytes),
}

impl Blob {
    pub fn canonical(key: MessageKey, bytes: impl Into<std::sync::Arc<[u8]>>) -> Blob {
        Blob {
            key,
            bytes: BlobBytes::Canonical(bytes.into()),
        }
    }

    /// A message as sent; its key is that of its canonical form.
    pub fn sent(key: MessageKey, raw: bytes::Bytes) -> Blob {
        Blob {
            key,
            bytes: BlobBytes::Sent(raw),
        }
    }

    /// The bytes to store; `None` for a sent message that is not JSON (nothing is stored).
    pub fn stored_bytes(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        match &self.bytes {
            BlobBytes::Canonical(bytes) => Some(bytes[..].into()),
            BlobBytes::Sent(raw) => {
                let bytes = crate::providers::cache_key::canonical_bytes_of_raw(raw)?;
                debug_assert_eq!(crate::providers::cache_key::key_of_bytes(&bytes), self.key);
                Some(bytes.into())
            }
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
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

/// Totals over the whole store, for the storage benchmark, retention and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    pub sessions: u64,
    pub entries: u64,
    pub entry_bytes: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
}

/// What [`SessionStore::append_once`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Appended {
    /// The entries were appended, the first at position `at` in the log: this caller made
    /// the patch.
    Written { at: u64 },
    /// Another request already appended under the same key; these are its entries.
    Existing(Vec<Entry>),
}

/// Whether the store can serve requests now, for `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreHealth {
    /// `sqlite`, `redis` or `unavailable`.
    pub store: &'static str,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl StoreHealth {
    pub fn ok(store: &'static str) -> StoreHealth {
        StoreHealth {
            store,
            ok: true,
            reason: None,
        }
    }

    pub fn failing(store: &'static str, reason: impl Into<String>) -> StoreHealth {
        StoreHealth {
            store,
            ok: false,
            reason: Some(reason.into()),
        }
    }
}

/// A durable session store.
pub trait SessionStore: Send + Sync {
    /// Append entries to a session's log, in order, atomically; durable (on disk, or
    /// acknowledged by Redis) when the future resolves. For persisted patches. Returns the
    /// first entry's position in the log (`None` when there were no entries).
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Option<u64>>>;

    /// Append entries unless entries were already appended for this session under `key`:
    /// one atomic check-and-append across requests and cachet instances, so concurrent
    /// requests that would each make the same patch leave exactly one in the log. Durable
    /// like [`append`](Self::append).
    fn append_once<'a>(
        &'a self,
        session: &'a str,
        key: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Appended>>;

    /// Record a forwarded request: its content blobs (kept once per session) and its log
    /// entry, in one write. Not synced on its own: it reaches the disk with the next synced
    /// write (a record shapes no request, so it never waits for a sync); a store may also
    /// answer before its commit, counting any record it then loses in
    /// [`lost_writes`](Self::lost_writes). Returns the entry's position in the log. The
    /// blobs are handed over, not copied: one message can be most of a 30 MB body.
    fn record<'a>(
        &'a self,
        session: &'a str,
        entry: &'a Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<u64>>;

    /// Take the session's next request index and record a request under it, as
    /// [`next_request_index`](Self::next_request_index) then [`record`](Self::record) would;
    /// for requests nothing read the index of before their answer. Returns the index and
    /// the entry's position. A store that can do both in one write does.
    fn record_next<'a>(
        &'a self,
        session: &'a str,
        entry: Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<(u64, u64)>> {
        Box::pin(async move {
            let index = self.next_request_index(session).await?;
            let at = self
                .record(session, &entry.with_request_index(index), blobs)
                .await?;
            Ok((index, at))
        })
    }

    /// Number of entries in a session's log (0 for an unknown session).
    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>>;

    /// Entries from position `start` to the end, in log order: every one of them (what
    /// pages, exports and the admin API read).
    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>>;

    /// A session's log as requests read it: its indexes, with only the entries they can
    /// reach held whole ([`SessionLog`]). `load_from(session, 0)` has every entry.
    fn load<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<SessionLog>> {
        Box::pin(async move { Ok(SessionLog::from(self.load_from(session, 0).await?)) })
    }

    /// A session's content blobs by key, `None` where missing.
    fn get_blobs<'a>(
        &'a self,
        session: &'a str,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>>;

    /// The session's next request index: 0 for its first request, atomic across restarts
    /// and across cachet instances sharing the store.
    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>>;

    /// The most recently active sessions, newest first.
    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>>;

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>>;

    /// Delete the sessions that retention says go, as of `now_ms`.
    fn sweep<'a>(
        &'a self,
        retention: &'a Retention,
        now_ms: u64,
    ) -> BoxFuture<'a, StoreResult<SweepReport>>;

    /// Whether the store is usable now (the database file still the one opened, Redis
    /// answering).
    fn health(&self) -> BoxFuture<'_, StoreHealth>;

    /// Finish queued writes and release the store; later calls fail as unavailable.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Records whose callers heard they were written, lost since because their commit
    /// failed (counted and logged by the store). A cache in front forgets what it took
    /// from them whenever this grows.
    fn lost_writes(&self) -> u64 {
        0
    }
}

/// How a store is opened, beyond its spec.
#[derive(Clone, Default)]
pub struct StoreOptions {
    /// The cache in front of the store: its budget in bytes.
    pub cache_bytes: u64,
    /// Retention; Redis applies the age limit as key TTLs on every write.
    pub retention: Retention,
    /// `cachet_store_errors_total`, for failures the store finds by itself (a database
    /// file deleted or replaced).
    pub errors: Option<IntCounterVec>,
    /// A PEM file of CA certificates trusted for `rediss://` (besides the public roots).
    pub redis_ca_file: Option<PathBuf>,
}

impl StoreOptions {
    pub fn from_config(config: &SessionsConfig, errors: Option<IntCounterVec>) -> StoreOptions {
        StoreOptions {
            cache_bytes: config.cache_bytes,
            retention: Retention::from_config(config),
            errors,
            redis_ca_file: config.redis_ca_file.clone(),
        }
    }
}

/// The default budget of the cache in front of a store: 64 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Open the store named by `store = "..."` / `--store` with default options.
pub async fn open_store(spec: &str) -> StoreResult<Arc<dyn SessionStore>> {
    let options = StoreOptions {
        cache_bytes: DEFAULT_CACHE_BYTES,
        ..StoreOptions::default()
    };
    open_store_with(spec, &options).await
}

/// Open a store (see [`StoreSpec::parse`]) with the cache in front of it.
pub async fn open_store_with(
    spec: &str,
    options: &StoreOptions,
) -> StoreResult<Arc<dyn SessionStore>> {
    let inner: Arc<dyn SessionStore> = match StoreSpec::parse(spec)? {
        StoreSpec::Redis(url) => match RedisStore::connect(&url, options).await {
            Ok(store) => Arc::new(store),
            // A Redis that is down at start-up may come back: connect on use, and let
            // `on_store_error` decide what requests do meanwhile.
            Err(StoreError::Unavailable(reason)) => {
                tracing::warn!("session store not reachable yet ({reason}); retrying on use");
                Arc::new(RedisStore::lazy(&url, options)?)
            }
            Err(e) => return Err(e),
        },
        StoreSpec::Sqlite(path) => Arc::new(SqliteStore::open_with(&path, options).await?),
    };
    Ok(Arc::new(CachedStore::new(inner, options.cache_bytes)))
}

/// The store for `[sessions]`: an invalid `store` value is an error whatever
/// `on_store_error` says; a store that cannot be opened is, in `fail-open` mode, replaced
/// by a stand-in that fails every call (each failure counted and logged, `/readyz`
/// answering 503) so that nothing is lost silently.
pub async fn open_configured(
    config: &SessionsConfig,
    errors: &IntCounterVec,
) -> anyhow::Result<Arc<dyn SessionStore>> {
    let options = StoreOptions::from_config(config, Some(errors.clone()));
    match open_store_with(&config.store, &options).await {
        Ok(store) => Ok(store),
        Err(e @ StoreError::InvalidSpec { .. }) => Err(e.into()),
        Err(e) if config.on_store_error == StoreFailure::FailOpen => {
            tracing::error!("session store unavailable, running without sessions: {e}");
            errors.with_label_values(&["open"]).inc();
            Ok(Arc::new(unavailable::Unavailable::new(e.to_string())))
        }
        Err(e) => Err(e.into()),
    }
}
