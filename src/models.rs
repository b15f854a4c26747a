//! Per-model facts (cache minimums, context windows, prices, cache behaviour) from
//! `data/models.toml`, extended without a release by a user file (`--models PATH` or the
//! `models` configuration field) whose rows are tried first.
//!
//! A model no row matches is *unknown*: it is never priced as another model. Its cost is
//! not computed, it is logged once per name (for a bounded number of names) and counted
//! in `cachet_unknown_models_total`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, OnceLock, RwLock};

use globset::{Glob, GlobMatcher};
use serde::Deserialize;

use crate::usage::Usage;

const DEFAULT_TABLE: &str = include_str!("../data/models.toml");

/// Markers a request may carry where the provider takes explicit ones and the row does
/// not say otherwise (Anthropic `cache_control`: at most 4 per request).
const ANTHROPIC_BREAKPOINTS: u32 = 4;

/// Facts about one model family. Prices are USD per million tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    #[serde(rename = "match")]
    pub pattern: String,
    pub provider: String,
    pub min_cacheable_tokens: u64,
    pub context_window: u64,
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write_5m: f64,
    pub cache_write_1h: f64,
    /// OpenAI: the price of a write with `prompt_cache_options.ttl: "12h"`; such writes are
    /// priced at `cache_write_5m` (the 30-minute write) when the row gives none.
    #[serde(default)]
    pub cache_write_12h: Option<f64>,
    /// Anthropic: with thinking on, thinking blocks of earlier turns stay in the prompt by
    /// default (otherwise only the current turn's are kept). `context_management` can
    /// change it per request.
    #[serde(default)]
    pub keeps_earlier_thinking: bool,
    /// Explicit cache breakpoints a request may write: Anthropic `cache_control` (4 when
    /// unset), OpenAI `prompt_cache_breakpoint` (GPT-5.6 and later; none when unset).
    #[serde(default)]
    pub cache_breakpoints: Option<u32>,
    /// A request of more input tokens than this (cached ones included) is billed at the
    /// long-context rates, all of it, not only the tokens past the line.
    #[serde(default)]
    pub long_context_above: Option<u64>,
    /// Above `long_context_above`: the factor on every input price (uncached, cached,
    /// writes).
    #[serde(default = "one")]
    pub long_context_input_factor: f64,
    /// Above `long_context_above`: the factor on the output price.
    #[serde(default = "one")]
    pub long_context_output_factor: f64,
    /// Fast mode (Anthropic `usage.speed: "fast"`, OpenAI `service_tier: "priority"`): the
    /// factor on every price. An answer served fast by a row without it is priced at the
    /// standard rates.
    #[serde(default)]
    pub fast_factor: Option<f64>,
    /// Gemini: the storage price of an explicit cache (`cachedContents`), USD per million
    /// tokens per hour.
    #[serde(default)]
    pub cache_storage_per_hour: Option<f64>,
}

fn one() -> f64 {
    1.0
}

impl ModelInfo {
    /// What the request cost.
    pub fn cost_usd(&self, u: &Usage) -> f64 {
        let (input, output) = self.factors(u);
        let unsplit_write = u
            .cache_write
            .saturating_sub(u.cache_write_5m + u.cache_write_1h + u.cache_write_12h);
        (input
            * (u.uncached as f64 * self.input
                + u.cache_read as f64 * self.cache_read
                + (u.cache_write_5m + unsplit_write) as f64 * self.cache_write_5m
                + u.cache_write_1h as f64 * self.cache_write_1h
                + u.cache_write_12h as f64 * self.cache_write_12h.unwrap_or(self.cache_write_5m))
            + output * u.output as f64 * self.output)
            / 1e6
            + self.storage_cost_usd(u.cache_storage_token_secs)
    }

    /// What storing an explicit cache costs (Gemini `cachedContents`): `token_secs`
    /// token-seconds at the row's price per million tokens per hour; nothing for a row
    /// without one.
    pub fn storage_cost_usd(&self, token_secs: u64) -> f64 {
        self.cache_storage_per_hour
            .map_or(0.0, |price| token_secs as f64 / 3600.0 * price / 1e6)
    }

    /// What caching saved against sending every input token uncached (negative when
    /// writes cost more than the reads they earned).
    pub fn savings_usd(&self, u: &Usage) -> f64 {
        let (input, output) = self.factors(u);
        let without_cache = (input * u.total_input() as f64 * self.input
            + output * u.output as f64 * self.output)
            / 1e6;
        without_cache - self.cost_usd(u)
    }

    /// The factors on the input and output prices of a request with usage `u`: the
    /// long-context ones past `long_context_above` input tokens, else 1; times the fast-mode
    /// factor for an answer served fast, or [`FLEX_FACTOR`] for one served by flex; times
    /// [`US_ONLY_FACTOR`] for inference run in the US only.
    fn factors(&self, u: &Usage) -> (f64, f64) {
        let (input, output) = match self.long_context_above {
            Some(above) if u.total_input() > above => (
                self.long_context_input_factor,
                self.long_context_output_factor,
            ),
            _ => (1.0, 1.0),
        };
        let tier = if u.fast {
            self.fast_factor.unwrap_or(1.0)
        } else if u.flex {
            FLEX_FACTOR
        } else {
            1.0
        };
        let geo = if u.us_only { US_ONLY_FACTOR } else { 1.0 };
        (input * tier * geo, output * tier * geo)
    }

    /// Whether the row is a Claude model on Anthropic's rules: Anthropic's API, Bedrock or
    /// Vertex.
    pub fn serves_claude(&self) -> bool {
        matches!(self.provider.as_str(), "anthropic" | "bedrock" | "vertex")
    }

    /// How many explicit cache breakpoints a request for this model may write (`None`:
    /// the model takes none).
    pub fn explicit_breakpoints(&self) -> Option<u32> {
        let n = match self.cache_breakpoints {
            Some(n) => n,
            None if self.serves_claude() => ANTHROPIC_BREAKPOINTS,
            None => 0,
        };
        (n > 0).then_some(n)
    }
}

/// The factor on every price of an answer served by OpenAI's flex processing
/// (`providers::openai::FLEX_TIER`): "Tokens are priced at Batch API rates"
/// (developers.openai.com, Flex processing), which are half the standard ones. The answer
/// saying `flex` is what counts: a model without flex refuses the request instead.
pub const FLEX_FACTOR: f64 = 0.5;

/// The factor on every price of an Anthropic answer whose inference ran in the US only
/// (`usage.inference_geo: "us"`, [`crate::providers::anthropic::US_INFERENCE_GEO`]), on top
/// of any other: "A 1.1x pricing multiplier applies".
pub const US_ONLY_FACTOR: f64 = 1.1;

/// Whether a request on `model` that asks for flex processing (`providers::openai::asks_flex`) is
/// served so by the emulator: every OpenAI model it knows. (The API refuses flex on the
/// models its pricing page does not list; cachet keeps no such list.)
pub fn serves_flex(model: &str, asks_flex: bool) -> bool {
    asks_flex && lookup(model).is_some_and(|m| m.provider == "openai")
}

/// Whether a request on `model` that asks for fast mode (`providers::asks_fast`) is served
/// so: the model has a fast-mode price.
pub fn serves_fast(model: &str, asks_fast: bool) -> bool {
    asks_fast && lookup(model).is_some_and(|m| m.fast_factor.is_some())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    model: Vec<ModelInfo>,
}

/// The model table with compiled globs.
#[derive(Debug)]
pub struct ModelTable {
    entries: Vec<(GlobMatcher, ModelInfo)>,
    /// Which entry each model name seen so far resolved to: the lookup runs per request.
    memo: RwLock<HashMap<String, Option<usize>>>,
}

/// Model names remembered by the lookup memo before it stops growing.
const MEMO_LIMIT: usize = 1024;

impl ModelTable {
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: Table = toml::from_str(text).map_err(|e| e.to_string())?;
        Self::from_rows(table.model)
    }

    fn from_rows(rows: Vec<ModelInfo>) -> Result<Self, String> {
        let mut entries = Vec::with_capacity(rows.len());
        for info in rows {
            if !matches!(
                info.provider.as_str(),
                "anthropic" | "openai" | "gemini" | "bedrock" | "vertex"
            ) {
                return Err(format!(
                    "model `{}`: provider must be `anthropic`, `openai`, `gemini`, `bedrock` or \
                     `vertex`, not `{}`",
                    info.pattern, info.provider
                ));
            }
            let glob = Glob::new(&info.pattern)
                .map_err(|e| format!("model glob `{}`: {e}", info.pattern))?
                .compile_matcher();
            entries.push((glob, info));
        }
        Ok(ModelTable {
            entries,
            memo: RwLock::new(HashMap::new()),
        })
    }

    /// The shipped table.
    pub fn builtin() -> &'static ModelTable {
        static TABLE: OnceLock<ModelTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            ModelTable::parse(DEFAULT_TABLE).expect("data/models.toml is valid (tested)")
        })
    }

    /// `user` rows first, then `self`'s: a user row overrides a shipped one for the models
    /// it matches.
    pub fn merged_under(&self, user: ModelTable) -> ModelTable {
        let rows = user
            .entries
            .into_iter()
            .map(|(_, info)| info)
            .chain(self.entries.iter().map(|(_, info)| info.clone()))
            .collect();
        // Both tables were validated row by row; their union is too.
        Self::from_rows(rows).unwrap_or_else(|_| ModelTable {
            entries: Vec::new(),
            memo: RwLock::new(HashMap::new()),
        })
    }

    /// The first entry matching `model`; `None` for a model the table does not know.
    pub fn lookup(&self, model: &str) -> Option<&ModelInfo> {
        let remembered = self.memo.read().ok().and_then(|m| m.get(model).copied());
        let index = match remembered {
            Some(index) => index,
            None => {
                let index = self.entries.iter().position(|(g, _)| g.is_match(model));
                if let Ok(mut memo) = self.memo.write() {
                    if memo.len() < MEMO_LIMIT {
                        memo.insert(model.to_string(), index);
                    }
                }
                index
            }
        };
        index.map(|i| &self.entries[i].1)
    }
}

/// The table in use: the shipped one, or the shipped one under a user file.
static ACTIVE: RwLock<Option<&'static ModelTable>> = RwLock::new(None);

fn active() -> &'static ModelTable {
    ACTIVE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .unwrap_or_else(ModelTable::builtin)
}

/// Read a user model file (same format as `data/models.toml`). Errors name the file.
pub fn read_user_table(path: &Path) -> Result<ModelTable, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    ModelTable::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Use `path`'s rows before the shipped ones for the rest of the process (`None`: the
/// shipped table only).
pub fn install_user_table(path: Option<&Path>) -> Result<(), String> {
    let table: &'static ModelTable = match path {
        // Installed once per process; leaking it lets lookups hand out `'static` rows.
        Some(p) => Box::leak(Box::new(
            ModelTable::builtin().merged_under(read_user_table(p)?),
        )),
        None => ModelTable::builtin(),
    };
    *ACTIVE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(table);
    Ok(())
}

/// Look a model up in the table in use (no side effect; see [`price`] for billing).
pub fn lookup(model: &str) -> Option<&'static ModelInfo> {
    active().lookup(model)
}

/// How many explicit cache breakpoints a request for `model` may write: `Some(4)` for
/// Anthropic models (`cache_control`) and OpenAI GPT-5.6 and later
/// (`prompt_cache_breakpoint`), `None` for models that take none or are unknown.
pub fn explicit_breakpoints(model: &str) -> Option<u32> {
    lookup(model).and_then(ModelInfo::explicit_breakpoints)
}

/// The row to bill `model` by. An unknown model gets `None` (its cost is not computed) and
/// is logged the first time it is seen.
pub fn price(model: &str) -> Option<&'static ModelInfo> {
    let info = lookup(model);
    if info.is_none() {
        note_unknown(model);
    }
    info
}

/// Unknown model names logged before the log stops naming new ones.
const UNKNOWN_LOG_LIMIT: usize = 256;

/// The unknown model names already logged, up to a limit (a client chooses the names).
#[derive(Debug, Default)]
struct UnknownNames {
    seen: HashSet<String>,
}

impl UnknownNames {
    /// Whether `model` should be logged now: the first time it is seen, while fewer than
    /// `limit` names were logged. The last one logged says no more will be named.
    fn first_sighting(&mut self, model: &str, limit: usize) -> Option<bool> {
        if self.seen.len() >= limit || self.seen.contains(model) {
            return None;
        }
        self.seen.insert(model.to_string());
        Some(self.seen.len() == limit)
    }
}

/// Log an unknown model once per name; returns whether this call logged it.
pub fn note_unknown(model: &str) -> bool {
    static SEEN: OnceLock<Mutex<UnknownNames>> = OnceLock::new();
    let sighting = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .first_sighting(model, UNKNOWN_LOG_LIMIT);
    let shown: String = model.chars().take(128).collect();
    match sighting {
        None => return false,
        Some(false) => tracing::warn!(
            model = %shown,
            "model is not in the model table: its cost is not computed (add a row with --models)"
        ),
        Some(true) => tracing::warn!(
            model = %shown,
            "model is not in the model table: its cost is not computed (no further unknown models will be named)"
        ),
    }
    true
}

#[cfg(test)]
mod tests;
