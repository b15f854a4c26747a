//! `[sessions]` of `cachet.toml`: where sessions are kept, and for how long.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// `./path/` for the embedded store, `redis://host:port/db` for Redis.
    pub store: String,
    /// `fail-open` (forward without replay) or `fail-closed` (503) when the store is down.
    pub on_store_error: StoreFailure,
    /// Keep sessions, the request log and prefix-break diagnoses for every generation
    /// request, policy or not (computed after the response, never changing bytes).
    pub monitor: bool,
    /// Budget in bytes of the in-memory cache in front of the store (session logs and
    /// content), weighed by the bytes each item holds.
    pub cache_bytes: u64,
    /// Sessions idle longer than this many days are deleted (0: kept forever).
    pub retention_days: u64,
    /// When the store holds more session logs and content than this many bytes, the least
    /// recently active sessions are deleted (0: no limit).
    pub max_store_bytes: u64,
    /// How often retention is enforced, in seconds (also at start; 0: only at start).
    pub sweep_interval_secs: u64,
    /// A PEM file of CA certificates to trust for `rediss://`, instead of the public roots.
    pub redis_ca_file: Option<PathBuf>,
    /// With monitoring on, predict (off by default) what each candidate policy would
    /// have cost on every session (the overview's "could save", `GET /sessions/{id}`,
    /// `cachet_whatif_cost_usd_total`).
    pub whatif: bool,
    /// The what-if's candidates, as `cachet advise --candidate`: `NAME=POLICY_FILE[,...]`.
    /// Empty: the shipped policies that only change how requests are cached. Each candidate
    /// is evaluated on the sessions of the APIs its policies match, and only there.
    pub whatif_candidates: Vec<String>,
    /// The what-if's budget: a session past this many requests is no longer followed.
    pub whatif_max_requests: usize,
    /// A session followed longer than this many seconds since its first request is no
    /// longer followed.
    pub whatif_max_age_secs: u64,
    /// At most this many sessions are followed at once (the one idle longest is let go).
    pub whatif_max_sessions: usize,
    /// A session that sends a body larger than this many bytes is no longer followed.
    pub whatif_max_request_bytes: usize,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            store: "./cachet-data/".into(),
            on_store_error: StoreFailure::FailOpen,
            monitor: true,
            cache_bytes: super::store::DEFAULT_CACHE_BYTES,
            retention_days: 30,
            max_store_bytes: 1024 * 1024 * 1024,
            sweep_interval_secs: 600,
            redis_ca_file: None,
            whatif: false,
            whatif_candidates: Vec::new(),
            whatif_max_requests: 2000,
            whatif_max_age_secs: 24 * 3600,
            whatif_max_sessions: 256,
            whatif_max_request_bytes: 4 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreFailure {
    FailOpen,
    FailClosed,
}
