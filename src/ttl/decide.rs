//! The per-request choice between a 5-minute and a 1-hour cache write.
//!
//! A 1h write costs more than a 5m one (Anthropic: 2x input against 1.25x) and pays only
//! when the prefix is next used more than 5 minutes later and within the hour: then it is
//! read (0.1x) instead of written again. So the request writes 1h when
//!
//! ```text
//! P(late reuse) x (5m write - read) x prefix  >  (1h write - 5m write) x new tokens
//! ```
//!
//! where `new tokens` is what this request writes (what its previous request did not
//! leave in the cache) and `P(late reuse)` mixes the session's learned gaps: the chance
//! that this request ends its turn times the share of late turn gaps, plus the chance
//! that it does not times the share of late tool-loop gaps. Which request ends a turn is
//! known only once its answer is in; the chance comes from how many requests the
//! session's earlier turns took (their assistant messages in the history).
//!
//! `prefix` is what the later request can read of this one's write, as the cache model
//! says ([`crate::cache_model::next_turn`]): the next step of a tool loop reads it all,
//! the next turn only as far as the thinking it drops lets it (on older models, none of
//! the turn's own messages; `auto` markers reach that far whatever the lookback); and
//! nothing below the model's minimum cacheable length.

use crate::session::TtlDecision;

use crate::cache_model::next_turn;
use crate::envelope::MsgKind;
use crate::envelope::{Envelope, Ttl};
use crate::measure::MarkTtl;
use crate::models::ModelInfo;
use crate::session::gaps::{lifetime_ms, Gaps};
use crate::session::log::Previous;
use crate::session::PrefixHashes;

/// Bytes per token assumed before the session has a request to measure it on.
const DEFAULT_BYTES_PER_TOKEN: f64 = 4.0;
/// The chance that a request ends its turn before any turn has been seen.
const DEFAULT_END_CHANCE: f64 = 0.1;
/// How many turns the session's average turn length counts for, against the turns seen.
const PRIOR_WEIGHT: f64 = 0.5;

/// What the decision needs besides the envelope.
pub struct Inputs<'a> {
    /// The session's log when the request arrived.
    pub log: &'a crate::session::log::SessionLog,
    /// The client's history (before any patch), as the session layer hashed it.
    pub history: &'a PrefixHashes,
    /// When the request arrived (its recorded time in replay).
    pub now_ms: u64,
    /// Keep-warm is on and allowed for this request, after this many seconds: late turns
    /// are its to catch where it pays, so markers weigh only late tool-loop gaps there.
    pub keep_warm_after_secs: Option<u64>,
}

/// Decide 5m or 1h for `env` (an Anthropic Messages request). `None` for a model the
/// model table does not know: its prices are not known either, and it stays at 5m.
pub fn decide(env: &Envelope, inputs: &Inputs<'_>) -> Option<TtlDecision> {
    let prices = crate::models::lookup(&env.meta.model)?;
    let kinds = env.history_kinds();
    let (gaps, previous) = Gaps::learn(inputs.log, inputs.history, inputs.now_ms, env.turn_index());
    let ends_turn = end_chance(&kinds);
    let size = Size::of(env, previous.as_ref());
    let min = prices.min_cacheable_tokens as f64;
    let readable = |tokens: f64| if tokens < min { 0.0 } else { tokens };
    // `auto` markers reach what the next turn keeps, whatever the lookback.
    let (at_turn, at_step) = (
        readable(size.tokens(size.kept_bytes)),
        readable(size.prefix_tokens()),
    );
    let keep_warm_after_secs = inputs
        .keep_warm_after_secs
        .filter(|&after| keep_warm_pays(&gaps, prices, after * 1000, at_turn));
    // Late turns are the keep-warm's to catch where it goes out; where it does not pay,
    // the markers weigh them as without one.
    let late_turn = match keep_warm_after_secs {
        Some(_) => 0.0,
        None => gaps.late_turn_share(),
    };
    let late_tool = gaps.late_tool_share();
    let late_reuse = ends_turn * late_turn + (1.0 - ends_turn) * late_tool;
    let read_late = ends_turn * late_turn * at_turn + (1.0 - ends_turn) * late_tool * at_step;
    let saving = (prices.cache_write_5m - prices.cache_read) * read_late;
    let extra = (prices.cache_write_1h - prices.cache_write_5m) * size.new_tokens();
    let net = (saving - extra) / 1e6;
    Some(TtlDecision {
        ttl: if net > 0.0 {
            MarkTtl::OneHour
        } else {
            MarkTtl::FiveMinutes
        },
        late_reuse,
        expected_saving_usd: net,
        keep_warm_after_secs,
    })
}

/// A keep-warm reads the prefix the next turn keeps (`kept` tokens, see
/// [`super::keep_warm`]) and holds it for an hour; it pays when the chance that the next
/// turn comes within the hour after it, times the rewrite of that prefix it spares,
/// outweighs the read.
fn keep_warm_pays(gaps: &Gaps, prices: &ModelInfo, after_ms: u64, kept: f64) -> bool {
    let chance = gaps.within_hour_after(after_ms);
    kept > 0.0 && chance * (prices.cache_write_5m - prices.cache_read) > prices.cache_read
}

/// The chance that the current request ends its turn, from how many requests the
/// session's earlier turns took: of the earlier turns that reached this step, the share
/// that ended at it, with the session's average (one turn in so many requests) as a
/// prior worth half a turn: a turn length seen once already counts for more than the
/// average, while a step no turn ended at keeps a small chance.
fn end_chance(kinds: &[MsgKind]) -> f64 {
    let starts = crate::envelope::turns::prompt_starts(kinds);
    let Some(&current) = starts.last() else {
        return DEFAULT_END_CHANCE;
    };
    let answers = |from: usize, to: usize| kinds[from..to].iter().filter(|k| k.from_model).count();
    let step = answers(current, kinds.len());
    let turns: Vec<usize> = starts
        .windows(2)
        .map(|w| answers(w[0], w[1]))
        .filter(|&n| n > 0)
        .collect();
    if turns.is_empty() {
        return DEFAULT_END_CHANCE;
    }
    let prior = turns.len() as f64 / turns.iter().sum::<usize>() as f64;
    let reached = turns.iter().filter(|&&n| n > step).count() as f64;
    let ended = turns.iter().filter(|&&n| n == step + 1).count() as f64;
    (ended + PRIOR_WEIGHT * prior) / (reached + PRIOR_WEIGHT)
}

/// The request's prompt size, what the next turn reads of it and what it writes, in
/// bytes, with the session's measured tokens per byte.
struct Size {
    prefix_bytes: f64,
    /// What the next turn keeps as this request writes it
    /// ([`next_turn::messages_kept_at_next_turn`]).
    kept_bytes: f64,
    new_bytes: f64,
    tokens_per_byte: f64,
}

impl Size {
    fn of(env: &Envelope, previous: Option<&Previous>) -> Size {
        let head: usize =
            env.tools_raw().map(<[u8]>::len).sum::<usize>() + env.system_compiled().len();
        let messages: Vec<usize> = env.history_raw().map(<[u8]>::len).collect();
        let prefix = head + messages.iter().sum::<usize>();
        let kept = (head + messages[..next_turn_keeps(env)].iter().sum::<usize>()) as f64;
        let Some(previous) = previous else {
            return Size {
                prefix_bytes: prefix as f64,
                kept_bytes: kept,
                new_bytes: prefix as f64,
                tokens_per_byte: 1.0 / DEFAULT_BYTES_PER_TOKEN,
            };
        };
        let count = previous.record.history_count.min(messages.len());
        let before = head + messages[..count].iter().sum::<usize>();
        let lifetime = lifetime_ms(match previous.record.last_mark_ttl {
            Some(MarkTtl::OneHour) => Ttl::OneHour,
            _ => Ttl::FiveMinutes,
        });
        let alive = previous.gap_ms < lifetime;
        let tokens_per_byte = previous
            .record
            .usage
            .map(|u| u.total_input() as f64 / before.max(1) as f64)
            .filter(|t| (0.05..=1.0).contains(t))
            .unwrap_or(1.0 / DEFAULT_BYTES_PER_TOKEN);
        Size {
            prefix_bytes: prefix as f64,
            kept_bytes: kept,
            new_bytes: if alive {
                prefix.saturating_sub(before) as f64
            } else {
                prefix as f64
            },
            tokens_per_byte,
        }
    }

    fn prefix_tokens(&self) -> f64 {
        self.prefix_bytes * self.tokens_per_byte
    }

    fn tokens(&self, bytes: f64) -> f64 {
        bytes * self.tokens_per_byte
    }

    fn new_tokens(&self) -> f64 {
        self.new_bytes * self.tokens_per_byte
    }
}

/// How many of the history's first messages the next turn keeps as this request writes
/// them (the cache model's answer for this request's thinking).
pub(crate) fn next_turn_keeps(env: &Envelope) -> usize {
    let keep = crate::cache_model::thinking::retention_of(
        env.option_raw("thinking"),
        env.option_raw("context_management"),
        &env.meta.model,
    );
    let kinds = env.history_kinds();
    let messages: Vec<next_turn::Message> = kinds
        .iter()
        .zip(env.history_blocks())
        .map(|(kind, (blocks, thinking_blocks))| next_turn::Message {
            kind: kind.clone(),
            blocks,
            thinking_blocks,
        })
        .collect();
    next_turn::messages_kept_at_next_turn(&messages, keep)
}

#[cfg(test)]
mod tests;
