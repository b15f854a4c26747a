//! The policy file as written (DESIGN §5.1): strict raw structs, unknown fields refused.
//! Values that need checking beyond their TOML type stay strings here; `validate` turns
//! them into the typed `Policy`.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_order")]
    pub order: i64,
    #[serde(rename = "match", default)]
    pub matcher: RawMatch,
    pub breakpoints: Option<RawBreakpoints>,
    pub prompt_cache_key: Option<RawPromptCacheKey>,
    pub diagnostics: Option<RawDiagnostics>,
    #[serde(default)]
    pub context: Vec<RawContext>,
    #[serde(default)]
    pub payload: Vec<RawPayload>,
    #[serde(default)]
    pub inject: Vec<RawInject>,
    #[serde(default)]
    pub hook: Vec<RawHook>,
}

/// Policies without an `order` run after those that ask to run early.
pub const DEFAULT_ORDER: i64 = 100;

fn default_order() -> i64 {
    DEFAULT_ORDER
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    #[serde(default)]
    pub provider: Vec<String>,
    #[serde(default)]
    pub endpoint: Vec<String>,
    #[serde(default)]
    pub model: Vec<String>,
    #[serde(default)]
    pub client: Vec<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Credential kinds the policy shapes: `api-key`, `oauth` (default: `api-key` only).
    #[serde(default)]
    pub auth: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreakpoints {
    pub mode: String,
    pub ttl: Option<String>,
    pub keep_warm: Option<bool>,
    pub keep_warm_after_secs: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPromptCacheKey {
    pub from: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiagnostics {
    /// Ask the provider for its own cache-miss reason (Anthropic's cache diagnostics).
    #[serde(default)]
    pub provider: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawContext {
    pub reason: String,
    pub transformer: Option<String>,
    /// Patch ops, checked against the op wire form after conversion to JSON.
    pub patch: Option<Vec<toml::Value>>,
    pub transform: Option<RawTransform>,
    pub display: Option<RawDisplay>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransform {
    pub move_lines: Option<RawMoveLines>,
    #[serde(rename = "invalidateCacheReason")]
    pub invalidate_cache_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMoveLines {
    #[serde(default = "default_from")]
    pub from: String,
    pub pattern: String,
    #[serde(default = "default_to")]
    pub to: String,
    /// `always` (the default) or `changed`.
    pub when: Option<String>,
}

fn default_from() -> String {
    "system".into()
}

fn default_to() -> String {
    "uncached_tail".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDisplay {
    pub title: String,
    pub summary: Option<String>,
    pub markdown: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPayload {
    pub json_patch: Option<Vec<toml::Value>>,
    pub merge_patch: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInject {
    pub source: RawInjectSource,
    pub mode: String,
    pub part: Option<String>,
    pub ab: Option<BTreeMap<String, i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInjectSource {
    pub file: Option<String>,
    pub notes: Option<String>,
    pub top_k: Option<i64>,
    pub url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    pub name: Option<String>,
    pub url: Option<String>,
    pub events: Vec<String>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: i64,
    #[serde(default = "default_on_error")]
    pub on_error: String,
}

/// A hook sits on the request path: a short default keeps a slow hook from stalling agents.
pub const DEFAULT_HOOK_TIMEOUT_MS: i64 = 250;

fn default_timeout_ms() -> i64 {
    DEFAULT_HOOK_TIMEOUT_MS
}

fn default_on_error() -> String {
    "continue".into()
}
