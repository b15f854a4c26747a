//! `cachet replay --ideal`: how much of the traces' input a cache could serve at best.
//!
//! For each recorded request, in time order, the ideal read is the longest block-level
//! prefix it shares with an earlier request (of any session: the provider's cache is
//! per account) that is still alive, at or above the model's minimum. Two variants:
//! - unconstrained: every boundary of every earlier request is stored, and lives as long
//!   as the longest lifetime that request could ask for (5 minutes, or 1 hour when it uses
//!   1h markers; the OpenAI retention), renewed whenever it is shared again;
//! - marked: only what the provider would store and read given the client's own markers:
//!   prefixes stored at the markers (OpenAI: the whole prompt, or GPT-5.6+ breakpoints),
//!   reads walking back from the markers over at most 20 blocks (OpenAI: no limit), in the
//!   provider's steps (OpenAI before GPT-5.6: 128 tokens).
//!
//! Each arm's `share_of_ideal` is its cache-read tokens over the unconstrained ideal's.

use std::collections::HashMap;

use serde::Serialize;

use crate::cache_model::boundaries::Boundaries;
use crate::cache_model::CacheModelConfig;
use crate::trace::record::Record;

/// Cache reads of one variant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IdealFigures {
    pub cache_read_tokens: u64,
    pub input_tokens: u64,
    /// `cache_read_tokens / input_tokens`.
    pub share: f64,
}

/// The `"ideal"` object of `--json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Ideal {
    pub cache_read_tokens: u64,
    pub input_tokens: u64,
    pub share: f64,
    /// Within the client's marker positions and the 20-block lookback.
    pub marked: IdealFigures,
}

impl Ideal {
    /// An arm's cache reads over the ideal's (`None` when the ideal reads nothing).
    pub fn share_of(&self, cache_read_tokens: u64) -> Option<f64> {
        (self.cache_read_tokens > 0)
            .then(|| cache_read_tokens as f64 / self.cache_read_tokens as f64)
    }
}

/// Stored prefix keys with their expiry, for one variant.
#[derive(Default)]
struct Store(HashMap<u128, u64>);

impl Store {
    fn live(&self, key: u128, now_ms: u64) -> bool {
        self.0.get(&key).is_some_and(|&expires| expires > now_ms)
    }

    fn keep(&mut self, keys: &[(u128, u64)], until: u64) {
        for &(k, _) in keys {
            let e = self.0.entry(k).or_insert(0);
            *e = (*e).max(until);
        }
    }
}

/// The ideal of `records` (in time order); `model` replaces every request's model, as the
/// arms do. Records that cannot be read are left out, as the arms skip them.
pub fn ideal(records: &[Record], model: Option<&str>) -> Ideal {
    let config = CacheModelConfig::default();
    let mut free = Store::default();
    let mut marked = Store::default();
    let (mut read, mut read_marked, mut input) = (0u64, 0u64, 0u64);
    for record in records {
        let endpoint = record.endpoint();
        if !endpoint.is_generation() {
            continue;
        }
        let mut body = record.body.clone();
        let named = model.map(str::to_string).or_else(|| record.path_model());
        if let (Some(m), Some(obj)) = (named, body.as_object_mut()) {
            obj.insert("model".into(), m.into());
        }
        let read_boundaries =
            std::panic::AssertUnwindSafe(|| Boundaries::of(endpoint, &body, &config));
        let Ok(Ok(b)) = std::panic::catch_unwind(read_boundaries) else {
            continue;
        };
        let now = record.time_ms;
        input += b.total_tokens;

        // Unconstrained: the longest live prefix at any boundary.
        let hit = b
            .keys
            .iter()
            .rposition(|&(k, cum)| cum >= b.min_tokens && free.live(k, now));
        read += hit.map_or(0, |i| b.keys[i].1);
        free.keep(&b.keys, now + b.ttl_ms);

        // Marked: reads walk back from the request's read points, stores at its markers.
        let mut best: Option<usize> = None;
        for &from in &b.reads_from {
            let window = b.lookback.unwrap_or(usize::MAX);
            let found = (0..=from)
                .rev()
                .take(window)
                .take_while(|&j| b.keys[j].1 >= b.min_tokens)
                .find(|&j| marked.live(b.keys[j].0, now));
            best = best.max(found);
        }
        if let Some(j) = best {
            let tokens = b.keys[j].1 / b.granularity * b.granularity;
            if tokens >= b.min_tokens {
                read_marked += tokens;
            }
            // A read renews the entry it came from (by the request's shortest lifetime, so
            // that a read never lengthens a 5-minute entry to an hour).
            let renew = b.stores.iter().map(|s| s.1).min().unwrap_or(b.ttl_ms);
            marked.keep(&b.keys[..=j], now + renew);
        }
        for &(at, ttl) in &b.stores {
            if b.keys[at].1 >= b.min_tokens {
                marked.keep(&b.keys[..=at], now + ttl);
            }
        }
    }
    let share = |r: u64| {
        if input == 0 {
            0.0
        } else {
            r as f64 / input as f64
        }
    };
    Ideal {
        cache_read_tokens: read,
        input_tokens: input,
        share: share(read),
        marked: IdealFigures {
            cache_read_tokens: read_marked,
            input_tokens: input,
            share: share(read_marked),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::replay::run::replay_arm;
    use crate::replay::shaper::AsRecorded;
    use crate::trace::record::TRACE_VERSION;

    fn record(t_secs: u64, body: Value) -> Record {
        Record {
            v: TRACE_VERSION,
            time_ms: 1_000_000 + t_secs * 1000,
            session: "s".into(),
            provider: "anthropic".into(),
            endpoint: "messages".into(),
            path: "/v1/messages".into(),
            headers: Default::default(),
            body,
            body_text: None,
            body_base64: None,
            usage: None,
            status: Some(200),
            response_id: None,
            output: None,
        }
    }

    fn text(tag: &str) -> String {
        format!(
            "{tag} {}",
            "the service retries with backoff and jitter ".repeat(60)
        )
    }

    /// An SDK app's conversation: `turns` user/assistant exchanges, no `cache_control`
    /// unless `marked`.
    fn conversation(turns: usize, marked: bool) -> Value {
        let mut messages = Vec::new();
        for i in 0..turns {
            messages.push(json!({"role": "user", "content": [{"type": "text", "text": text(&format!("q{i}"))}]}));
            messages.push(json!({"role": "assistant", "content": text(&format!("a{i}"))}));
        }
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": text("now")}]}));
        if marked {
            let last = messages.len() - 1;
            messages[last]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        }
        json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
            "system": text("system"), "messages": messages})
    }

    fn recorded_read(records: &[Record]) -> u64 {
        replay_arm("r", records, &mut AsRecorded, None, &mut || {}).cache_read_tokens
    }

    /// Without markers nothing is read, though every request repeats the last one: the
    /// ideal shows what markers would have earned.
    #[test]
    fn an_unmarked_session_reads_nothing_but_its_ideal_is_most_of_the_input() {
        let records: Vec<Record> = (0..5)
            .map(|i| record(i * 20, conversation(i as usize, false)))
            .collect();
        let ideal = ideal(&records, None);
        assert_eq!(recorded_read(&records), 0);
        assert_eq!(ideal.marked.cache_read_tokens, 0);
        assert!(ideal.share > 0.5, "{ideal:?}");
        assert_eq!(ideal.input_tokens, ideal.marked.input_tokens);
    }

    /// With the client's markers on the last block, the recorded reads reach the marked
    /// ideal; a gap longer than the 5-minute lifetime loses the prefix in both variants.
    #[test]
    fn marked_sessions_reach_the_marked_ideal_and_long_gaps_lose_the_prefix() {
        let records: Vec<Record> = (0..5)
            .map(|i| record(i * 20, conversation(i as usize, true)))
            .collect();
        let ideal_near = ideal(&records, None);
        let recorded = recorded_read(&records);
        assert!(recorded > 0);
        assert!(recorded <= ideal_near.marked.cache_read_tokens);
        assert!(ideal_near.marked.cache_read_tokens <= ideal_near.cache_read_tokens);

        let gapped: Vec<Record> = (0..5)
            .map(|i| record(i * 400, conversation(i as usize, true)))
            .collect();
        let ideal_far = ideal(&gapped, None);
        assert_eq!(
            ideal_far.cache_read_tokens, 0,
            "every gap is over 5 minutes"
        );
        assert_eq!(ideal_far.share_of(0), None);
    }

    /// A tool loop that adds more than 20 blocks after the last marker: the client's
    /// markers cannot reach the earlier prefix, the unconstrained ideal can.
    #[test]
    fn the_lookback_limits_the_marked_ideal_only() {
        let base = conversation(1, true);
        let mut long = conversation(1, false);
        let msgs = long["messages"].as_array_mut().unwrap();
        for i in 0..12 {
            msgs.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": format!("t{i}"), "name": "read", "input": {"i": i}}]}));
            msgs.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("result {i}")}]}));
        }
        let last = msgs.len() - 1;
        msgs[last]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        let records = vec![record(0, base), record(10, long)];
        let ideal = ideal(&records, None);
        assert_eq!(ideal.marked.cache_read_tokens, 0);
        assert!(ideal.cache_read_tokens > 0);
        assert_eq!(recorded_read(&records), 0);
    }

    /// OpenAI: stored whole and read in 128-token steps (the marked variant); the
    /// unconstrained one reads at message boundaries.
    #[test]
    fn openai_marked_reads_are_in_128_token_steps() {
        let chat = |n: usize| {
            let mut messages = vec![json!({"role": "system", "content": text("system")})];
            for i in 0..n {
                messages.push(json!({"role": "user", "content": text(&format!("q{i}"))}));
                messages.push(json!({"role": "assistant", "content": "ok"}));
            }
            Record {
                provider: "openai".into(),
                endpoint: "chat".into(),
                path: "/v1/chat/completions".into(),
                ..record(
                    n as u64 * 10,
                    json!({"model": "gpt-4o", "messages": messages}),
                )
            }
        };
        let records: Vec<Record> = (1..5).map(chat).collect();
        let ideal = ideal(&records, None);
        assert!(ideal.marked.cache_read_tokens > 0);
        assert!(ideal.marked.cache_read_tokens <= ideal.cache_read_tokens);
        assert!(recorded_read(&records) <= ideal.cache_read_tokens);
    }
}
