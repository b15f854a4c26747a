//! cachet: a prompt-cache-aware proxy for LLM provider APIs.
//!
//! Module map (one concern each):
//! - `cli`, `config`: command line and `cachet.toml`.
//! - `server`, `shape`, `json_check`, `forward`, `tap`, `sse`, `usage`: the proxy hot path —
//!   accept, check the body, forward, stream back untouched, read usage on the side.
//! - `pipeline`: the request pipeline of DESIGN §1 for requests a policy matches.
//! - `envelope`, `patch`: the context envelope and its patch operations.
//! - `json_edit`: JSON Patch, merge patch and a replacement document, applied to a body's
//!   bytes (`before_provider_request` edits).
//! - `policy`, `hooks`: declarative policies and external hook servers.
//! - `session`: session identity, persisted patches and their stores.
//! - `inject`, `replay`: memory injection modes and offline replay.
//! - `cache_model`, `emulator`: provider prompt-cache accounting and the emulator.
//! - `metrics`, `admin`: Prometheus metrics and the admin listener.
//! - `telemetry`: logs (a span per request) and OpenTelemetry export.
//! - `memo`: bounded memos of what is derived from one message's bytes (kinds, keys,
//!   markers, token counts), since agents resend their history on every request.

#[cfg(test)]
mod alloc_meter;
pub mod cache_model;
pub mod cli;
pub mod commands;
pub mod config;
pub mod content_encoding;
pub mod emulator;
pub mod envelope;
pub mod error;
pub mod hooks;
pub mod http_serve;
pub mod inject;
pub mod json;
pub mod json_edit;
pub mod known_prefix;
pub mod measure;
pub mod memo;
pub mod memory;
pub mod metrics;
pub mod models;
pub mod patch;
pub mod persistent;
pub mod pipeline;
pub mod policy;
pub mod providers;
pub mod replay;
pub mod route;
pub mod secret;
pub mod server;
pub mod session;
pub mod sse;
pub mod svg;
pub mod tap;
pub mod telemetry;
pub mod tokens;
pub mod trace;
pub mod transport;
pub mod ttl;
pub mod usage;
