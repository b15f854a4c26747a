//! Per-model facts (cache minimums, context windows, prices) from `data/models.toml`.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use globset::{Glob, GlobMatcher};
use serde::Deserialize;

use crate::usage::Usage;

const DEFAULT_TABLE: &str = include_str!("../data/models.toml");

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
}

impl ModelInfo {
    /// What the request cost.
    pub fn cost_usd(&self, u: &Usage) -> f64 {
        let unsplit_write = u
            .cache_write
            .saturating_sub(u.cache_write_5m + u.cache_write_1h);
        (u.uncached as f64 * self.input
            + u.cache_read as f64 * self.cache_read
            + (u.cache_write_5m + unsplit_write) as f64 * self.cache_write_5m
            + u.cache_write_1h as f64 * self.cache_write_1h
            + u.output as f64 * self.output)
            / 1e6
    }

    /// What caching saved against sending every input token uncached (negative when
    /// writes cost more than the reads they earned).
    pub fn savings_usd(&self, u: &Usage) -> f64 {
        let without_cache =
            (u.total_input() as f64 * self.input + u.output as f64 * self.output) / 1e6;
        without_cache - self.cost_usd(u)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    model: Vec<ModelInfo>,
}

/// The model table with compiled globs.
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
        let mut entries = Vec::with_capacity(table.model.len());
        for info in table.model {
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

    /// The built-in table.
    pub fn builtin() -> &'static ModelTable {
        static TABLE: OnceLock<ModelTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            ModelTable::parse(DEFAULT_TABLE).expect("data/models.toml is valid (tested)")
        })
    }

    /// The first entry matching `model`; the table ends with a catch-all.
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

/// Look a model up in the built-in table.
pub fn lookup(model: &str) -> Option<&'static ModelInfo> {
    ModelTable::builtin().lookup(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_orders_specific_first() {
        assert_eq!(
            lookup("claude-opus-4-5-20251101")
                .unwrap()
                .min_cacheable_tokens,
            4096
        );
        assert_eq!(
            lookup("claude-sonnet-4-6").unwrap().min_cacheable_tokens,
            2048
        );
        assert_eq!(
            lookup("claude-sonnet-4-5-20250929")
                .unwrap()
                .min_cacheable_tokens,
            1024
        );
        assert_eq!(lookup("gpt-4o-mini").unwrap().input, 0.15);
    }

    #[test]
    fn mixed_ttl_cost() {
        let m = lookup("claude-sonnet-4-5").unwrap();
        let u = Usage {
            cache_read: 1_000_000,
            cache_write: 2_000_000,
            cache_write_5m: 1_000_000,
            cache_write_1h: 1_000_000,
            uncached: 1_000_000,
            output: 0,
        };
        // 0.30 read + 3.75 5m + 6.00 1h + 3.00 uncached
        assert!((m.cost_usd(&u) - 13.05).abs() < 1e-9);
        assert!((m.savings_usd(&u) - (12.0 - 13.05)).abs() < 1e-9);
    }
}
