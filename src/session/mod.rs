//! Sessions: identity, the versioned session log, anchored replay of persisted patches,
//! and the stores that keep them (embedded SQLite or shared Redis, a moka cache in front).
//!
//! Per request the pipeline: [`identify`]s the session; [`prepare`]s it (takes the request
//! index, loads the log, hashes the client history's prefixes); asks
//! [`SessionContext::plan`] which persisted patches apply; appends new persisted patches
//! with [`SessionContext::persist`] before the request is forwarded; and records the
//! request with [`record_request`] once its usage is known.

pub mod anchor;
pub mod clock;
pub mod config;
pub mod entry;
pub mod flow;
pub mod gaps;
pub mod identity;
pub mod lanes;
pub mod log;
pub mod pages;
pub mod patch_plan;
pub mod record;
pub mod store;
pub mod whatif;

pub use crate::providers::cache_key::{message_key, MessageKey};
pub use anchor::{Anchor, PrefixHashes};
pub use clock::SessionClock;
pub use config::{SessionsConfig, StoreFailure};
pub use entry::{
    is_persisted_reason, now_ms, ContextTransform, Entry, PatchEvent, PatchOutcome, RequestRecord,
    SentMessages, TtlDecision, ENTRY_VERSION,
};
pub use flow::{observed, prepare, PersistedOnce, SessionContext};
pub use gaps::{lifetime_ms, Gaps, Learned};
pub use identity::{identify, IdSource, SessionId};
pub use log::sent_keys;
pub use log::{Entries, SessionLog};
pub use pages::json::{admin_route, session_json, sessions_json};
pub use patch_plan::PatchPlan;
pub use record::{compact_request, record_request, RequestDraft};
pub use store::{
    open_store, open_store_with, Appended, Blob, CachedStore, RedisStore, SessionStore,
    SessionSummary, SqliteStore, StoreError, StoreHealth, StoreOptions, StoreResult, StoreStats,
};
