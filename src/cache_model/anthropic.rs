//! Anthropic prompt-cache accounting: explicit and automatic markers, the 20-block
//! lookback, stored prefixes readable at any block boundary, per-model minimums, 5m/1h
//! lifetimes refreshed on read, and mixed-TTL billing.

use std::collections::HashMap;

use serde_json::Value;

use super::anthropic_prompt::{flatten, Prompt, Ttl};
use super::hash::PrefixHash;
use super::{Accounting, BlockUnit, CacheModelConfig, Compaction, Detail, Marker};
use crate::error::ApiError;
use crate::providers::anthropic;

/// Markers allowed per request (explicit plus automatic).
pub const MAX_MARKERS: usize = 4;
/// Minimum when the model table has no entry.
pub(super) const FALLBACK_MIN_TOKENS: u64 = 1024;

/// A stored prefix: every block boundary inside it can be read.
#[derive(Debug, Clone)]
struct Entry {
    boundaries: Vec<PrefixHash>,
    ttl: Ttl,
    expires_at_ms: u64,
}

/// The stored prefixes of one provider account.
#[derive(Debug, Clone, Default)]
pub struct AnthropicCache {
    /// By the key of the entry's last block.
    entries: HashMap<PrefixHash, Entry>,
    /// Boundary key → keys of the entries containing it.
    index: HashMap<PrefixHash, Vec<PrefixHash>>,
}

impl AnthropicCache {
    /// Account one request at `now_ms` and store what it writes. The request's own writes
    /// become readable for the next request, not for itself.
    ///
    /// A request whose `compact_20260112` edit's trigger its prompt reaches is sampled
    /// twice, as the API does: the compaction over the prompt as sent, then the answer
    /// over the summary (tools, system, and the summary's `compaction` block, which the
    /// client sends back and the provider keys on from then on). The accounting returned
    /// is the answer's, as the top-level usage reports it, with the compaction's beside.
    pub fn account(
        &mut self,
        req: &Value,
        now_ms: u64,
        config: &CacheModelConfig,
    ) -> Result<Accounting, ApiError> {
        let trigger = anthropic::compaction_trigger(req).map_err(ApiError::invalid)?;
        // Tool results the provider clears before sampling are not in the prompt it caches.
        let edited = super::context_editing::apply(req, Self::count_tokens)?;
        let (req, cleared) = match &edited {
            Some((edited, cleared)) => (edited, Some(*cleared)),
            None => (req, None),
        };
        let mut first = self.account_prompt(req, now_ms, config)?;
        if trigger.is_none_or(|t| first.input_tokens < t) {
            first.cleared = cleared;
            return Ok(first);
        }
        let summary = format!(
            "Summary of the conversation so far: {} tokens of context before this point, compacted.",
            first.input_tokens
        );
        let mut compacted = req.clone();
        compacted["messages"] = serde_json::json!([{"role": "assistant", "content": [
            {"type": anthropic::COMPACTION_BLOCK, "content": summary}
        ]}]);
        let mut answer = self.account_prompt(&compacted, now_ms, config)?;
        answer.cleared = cleared;
        answer.compaction = Some(Box::new(Compaction {
            output_tokens: super::tokens::count(&summary),
            summary,
            sampling: first,
        }));
        Ok(answer)
    }

    fn account_prompt(
        &mut self,
        req: &Value,
        now_ms: u64,
        config: &CacheModelConfig,
    ) -> Result<Accounting, ApiError> {
        let prompt = flatten(req)?;
        let markers = resolve_markers(&prompt)?;
        self.purge(now_ms);
        let min = crate::models::lookup(&prompt.model)
            .map_or(FALLBACK_MIN_TOKENS, |m| m.min_cacheable_tokens);
        let cum = |i: usize| prompt.blocks[i].cumulative_tokens;

        // Longest stored prefix reachable from any marker within the lookback window.
        let mut hit: Option<(usize, PrefixHash)> = None;
        for &(m, _) in &markers {
            let mut steps = 0;
            for j in (0..=m).rev() {
                let boundary = j == m
                    || config.block_unit == BlockUnit::ContentBlock
                    || prompt.blocks[j].ends_message;
                if !boundary {
                    continue;
                }
                steps += 1;
                if steps > config.lookback_blocks.max(1) || cum(j) < min {
                    break;
                }
                if let Some(entry_key) = self.live_entry_with(prompt.blocks[j].key, now_ms) {
                    if hit.is_none_or(|(h, _)| j > h) {
                        hit = Some((j, entry_key));
                    }
                    break;
                }
            }
        }
        if let Some((_, entry_key)) = hit {
            if let Some(entry) = self.entries.get_mut(&entry_key) {
                entry.expires_at_ms = now_ms + entry.ttl.millis();
            }
        }
        let read = hit.map_or(0, |(j, _)| cum(j));

        // Markers past the hit write their prefix, if it reaches the model's minimum.
        let writers: Vec<(usize, Ttl)> = markers
            .iter()
            .copied()
            .filter(|&(m, _)| hit.is_none_or(|(h, _)| m > h) && cum(m) >= min)
            .collect();
        let last_write = writers.last().map_or(read, |&(m, _)| cum(m));
        let last_1h = writers
            .iter()
            .rev()
            .find(|(_, ttl)| *ttl == Ttl::OneHour)
            .map_or(read, |&(m, _)| cum(m));
        for &(m, ttl) in &writers {
            let boundaries = prompt.blocks[..=m].iter().map(|b| b.key).collect();
            self.store(boundaries, ttl, now_ms);
        }

        Ok(Accounting {
            input_tokens: prompt.total_tokens(),
            cache_read: read,
            cache_write_1h: last_1h - read,
            cache_write_5m: last_write - last_1h,
            cache_write_30m: 0,
            cache_write_12h: 0,
            storage_token_secs: 0,
            fast: prompt.fast,
            flex: false,
            us_only: prompt.us_only,
            detail: Detail {
                blocks: prompt.blocks.len(),
                markers: markers
                    .iter()
                    .map(|&(block, ttl)| Marker {
                        block,
                        ttl: ttl.label(),
                        prefix_tokens: cum(block),
                    })
                    .collect(),
                hit_block: hit.map(|(j, _)| j),
                min_cacheable_tokens: min,
                partition: None,
            },
            compaction: None,
            cleared: None,
        })
    }

    /// Input tokens of a request, as `count_tokens` reports them.
    pub fn count_tokens(req: &Value) -> Result<u64, ApiError> {
        Ok(flatten(req)?.total_tokens())
    }

    fn live_entry_with(&self, key: PrefixHash, now_ms: u64) -> Option<PrefixHash> {
        self.index.get(&key)?.iter().copied().find(|k| {
            self.entries
                .get(k)
                .is_some_and(|e| e.expires_at_ms > now_ms)
        })
    }

    fn store(&mut self, boundaries: Vec<PrefixHash>, ttl: Ttl, now_ms: u64) {
        let Some(&last) = boundaries.last() else {
            return;
        };
        let expires_at_ms = now_ms + ttl.millis();
        if let Some(e) = self.entries.get_mut(&last) {
            e.expires_at_ms = e.expires_at_ms.max(expires_at_ms);
            e.ttl = e.ttl.max(ttl);
            return;
        }
        for &b in &boundaries {
            self.index.entry(b).or_default().push(last);
        }
        self.entries.insert(
            last,
            Entry {
                boundaries,
                ttl,
                expires_at_ms,
            },
        );
    }

    fn purge(&mut self, now_ms: u64) {
        let expired: Vec<PrefixHash> = self
            .entries
            .iter()
            .filter(|(_, e)| e.expires_at_ms <= now_ms)
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            if let Some(entry) = self.entries.remove(&key) {
                for b in entry.boundaries {
                    if let Some(list) = self.index.get_mut(&b) {
                        list.retain(|k| *k != key);
                        if list.is_empty() {
                            self.index.remove(&b);
                        }
                    }
                }
            }
        }
    }
}

/// Explicit markers plus the automatic one, in block order, validated like the API does.
pub(super) fn resolve_markers(prompt: &Prompt) -> Result<Vec<(usize, Ttl)>, ApiError> {
    let mut markers: Vec<(usize, Ttl)> = prompt
        .blocks
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.marker.map(|t| (i, t)))
        .collect();
    if markers.len() > MAX_MARKERS {
        return Err(ApiError::invalid(format!(
            "A maximum of {MAX_MARKERS} blocks with cache_control may be provided. Found {}.",
            markers.len()
        )));
    }
    if let Some(ttl) = prompt.automatic {
        if let Some(last) = prompt.blocks.iter().rposition(|b| b.markable) {
            match prompt.blocks[last].marker {
                Some(own) if own != ttl => {
                    return Err(ApiError::invalid(
                        "cache_control: the last cacheable block already has cache_control with a different ttl",
                    ))
                }
                Some(_) => {}
                None if markers.len() == MAX_MARKERS => {
                    return Err(ApiError::invalid(format!(
                        "A maximum of {MAX_MARKERS} blocks with cache_control may be provided; \
                         top-level cache_control needs a free slot but {MAX_MARKERS} blocks are marked."
                    )))
                }
                None => markers.push((last, ttl)),
            }
        }
    }
    markers.sort_by_key(|&(i, _)| i);
    let mut seen_5m = false;
    for &(_, ttl) in &markers {
        match ttl {
            Ttl::FiveMinutes => seen_5m = true,
            Ttl::OneHour if seen_5m => {
                return Err(ApiError::invalid(
                    "a cache_control block with ttl='1h' must not come after a block with ttl='5m'",
                ))
            }
            Ttl::OneHour => {}
        }
    }
    Ok(markers)
}
