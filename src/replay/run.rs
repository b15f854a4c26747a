//! Feeding records through one arm: shaping, cache accounting, cost and breaks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::keep_warm::KeepWarms;
use super::shaper::Shaper;
use crate::cache_model::{CacheModel, CacheModelConfig};
use crate::measure::breaks::{min_tokens, Current, Previous};
use crate::measure::{diagnose, Diagnosis, SentRequest};
use crate::session::lanes::{self, LaneHead};
use crate::trace::record::Record;
use crate::usage::Usage;

/// Figures of one arm, in the `--json` shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ArmStats {
    pub arm: String,
    pub requests: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub uncached_tokens: u64,
    pub output_tokens: u64,
    /// Cache reads over all input tokens.
    pub hit_ratio: f64,
    /// Cost of the requests whose model the model table knows.
    pub cost_usd: f64,
    pub savings_usd: f64,
    /// Requests whose model the model table does not know: not in `cost_usd`.
    pub unpriced_requests: u64,
    /// Prefix breaks against the previous request of the lane, by section.
    pub breaks: BTreeMap<String, u64>,
    /// The same breaks by reason.
    pub break_reasons: BTreeMap<String, u64>,
    /// Requests per injection variant (`none` without one).
    pub variants: BTreeMap<String, u64>,
    /// Records that could not be shaped or accounted (skipped).
    pub errors: u64,
    /// Stateful Responses requests whose earlier turns are in no trace (recorded before
    /// traces kept answers' output, or the chain started before the traces do): accounted
    /// on their own input, so below what the provider billed.
    pub stateful_unknown: u64,
    /// Keep-warm requests the arm sent after turns' final answers; their tokens and cost
    /// are in the totals above.
    pub keep_warm_requests: u64,
    /// The cache reads of those keep-warms (left out of the share of the ideal, which is
    /// over the recorded requests).
    #[serde(skip)]
    pub keep_warm_cache_read: u64,
    /// After each request: cumulative cost and hit ratio (for the chart).
    #[serde(skip)]
    pub series: Vec<(f64, f64)>,
    /// Per request usage, in replay order (for tests and consistency checks).
    #[serde(skip)]
    pub per_request: Vec<Usage>,
    /// Per accounted request: its position among the records replayed and what it cost,
    /// with the keep-warm the arm sent just before it in its session, if any (the guard
    /// compares these between arms, [`super::guard`]).
    #[serde(skip)]
    pub per_request_cost: Vec<(usize, f64)>,
    /// Keep-warms after a session's last request (no request follows them): their cost.
    #[serde(skip)]
    pub trailing_keep_warm_cost: f64,
    /// Per request diagnosis, in replay order.
    #[serde(skip)]
    pub diagnoses: Vec<Option<Diagnosis>>,
    /// The first error messages, for the report.
    #[serde(skip)]
    pub error_messages: Vec<String>,
    /// Names of the first unknown models, for the report.
    #[serde(skip)]
    pub unknown_models: BTreeSet<String>,
}

/// Unknown model names kept per arm for the report.
const UNKNOWN_MODELS_SHOWN: usize = 16;

/// Replay `records` (in time order) through `shaper` and a fresh cache model.
/// `model` replaces every request's model; `on_record` is called once per record.
pub fn replay_arm(
    arm: &str,
    records: &[Record],
    shaper: &mut dyn Shaper,
    model: Option<&str>,
    on_record: &mut dyn FnMut(),
) -> ArmStats {
    let mut run = ArmRun::new(arm, model);
    for record in records {
        on_record();
        let _ = run.step(shaper, record);
    }
    let last = records.iter().map(|r| r.time_ms).max().unwrap_or(0);
    run.finish(last)
}

/// What one record cost an arm ([`ArmRun::step`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The usage the cache model gave the request as the arm shaped it.
    pub usage: Usage,
    /// Its cost; `None` when the model table does not know the model.
    pub cost_usd: Option<f64>,
    pub diagnosis: Option<Diagnosis>,
    /// A keep-warm the arm sent for the record's session before it: its usage and cost.
    pub keep_warm: Option<(Usage, f64)>,
}

/// One arm's replay, fed a record at a time in time order: [`replay_arm`] over a slice,
/// and live monitoring's what-if over requests as they are answered.
pub struct ArmRun {
    stats: ArmStats,
    model: Option<String>,
    cache: CacheModel,
    sessions: HashMap<String, SessionLanes>,
    // The provider's routing rate, counted over every session as the live path counts it.
    routes: crate::measure::overflow::Routes,
    total: Usage,
    keep_warms: KeepWarms,
    held: super::held::Held,
    /// Records stepped through so far (the position of the next one).
    seen: usize,
    /// The cost of keep-warms sent since the last request accounted (counted with the next).
    carried: f64,
    /// Whether each request is diagnosed (its prefix break); the costs do not depend on it.
    diagnoses: bool,
}

impl ArmRun {
    /// A fresh cache model; `model` replaces every request's model.
    pub fn new(arm: &str, model: Option<&str>) -> ArmRun {
        let mut stats = ArmStats {
            arm: arm.to_string(),
            ..Default::default()
        };
        for name in ["tools", "system", "messages"] {
            stats.breaks.insert(name.into(), 0);
        }
        ArmRun {
            stats,
            model: model.map(str::to_owned),
            cache: CacheModel::new(CacheModelConfig::default()),
            sessions: HashMap::new(),
            routes: Default::default(),
            total: Usage::default(),
            keep_warms: KeepWarms::default(),
            held: Default::default(),
            seen: 0,
            carried: 0.0,
            diagnoses: true,
        }
    }

    /// The run's costs and usage only: no request is diagnosed (the live what-if, which
    /// keeps no diagnosis, saves reading each request twice more per candidate).
    pub fn without_diagnoses(mut self) -> ArmRun {
        self.diagnoses = false;
        self
    }

    /// The figures so far (keep-warms still pending not counted).
    pub fn stats(&self) -> &ArmStats {
        &self.stats
    }

    /// Let go of what is kept for `session` (its lanes and a pending keep-warm): its next
    /// request, if any, is taken as its first.
    pub fn forget(&mut self, session: &str) {
        self.sessions.remove(session);
        self.keep_warms.forget(session);
    }

    /// Let go of the per-request figures kept so far (series, usages, costs, diagnoses):
    /// a run fed without end (the live what-if) keeps only its totals.
    pub fn forget_steps(&mut self) {
        let stats = &mut self.stats;
        stats.series.clear();
        stats.per_request.clear();
        stats.per_request_cost.clear();
        stats.diagnoses.clear();
    }

    /// Sessions whose lanes are kept.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Shape and account one record; `Ok(None)` for a record that is not a generation
    /// request, `Err` for one that cannot be shaped or accounted (counted in the figures).
    pub fn step(
        &mut self,
        shaper: &mut dyn Shaper,
        record: &Record,
    ) -> Result<Option<Step>, String> {
        let ArmRun {
            stats,
            model,
            cache,
            sessions,
            routes,
            total,
            keep_warms,
            held,
            seen,
            carried,
            diagnoses,
        } = self;
        let index = *seen;
        *seen += 1;
        let model = model.as_deref();
        let endpoint = record.endpoint();
        if !endpoint.is_generation() {
            return Ok(None);
        }
        let mut warmed = None;
        if let Some((at, body)) = keep_warms.due(record) {
            warmed = keep_warm(stats, cache, total, &body, at);
            *carried += warmed.map_or(0.0, |(_, cost)| cost);
        }
        let fail = |stats: &mut ArmStats, msg: String| {
            stats.errors += 1;
            if stats.error_messages.len() < 5 {
                stats.error_messages.push(msg.clone());
            }
            Err(msg)
        };
        if record.body_base64.is_some() {
            return fail(
                stats,
                format!(
                    "session {}: the body was recorded as raw bytes (not JSON a replay can read)",
                    record.session
                ),
            );
        }
        let mut shaped = match shaper.shape(record) {
            Ok(s) => s,
            Err(e) => return fail(stats, format!("session {}: {e:#}", record.session)),
        };
        let named = model.map(str::to_string).or_else(|| record.path_model());
        if let (Some(m), Some(obj)) = (named, shaped.body.as_object_mut()) {
            obj.insert("model".into(), m.into());
        }
        // A stateful Responses request is read by the provider after the turns it holds.
        let prompt = held.expand(&shaped.body);
        // A panic in the cache model (a bug) skips the record like any other error
        // instead of ending the replay.
        let accounted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.account(
                endpoint,
                prompt.as_ref().unwrap_or(&shaped.body),
                record.time_ms,
            )
        }));
        let accounting = match accounted {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                return fail(stats, format!("session {}: {}", record.session, e.message));
            }
            Err(_) => {
                return fail(
                    stats,
                    format!(
                        "session {}: the cache model failed on this request",
                        record.session
                    ),
                );
            }
        };
        let usage = accounting.usage(record.usage.map_or(0, |u| u.output));
        held.answered(record, &shaped.body);
        let patches = shaper.patches();
        shaper.answered(record, &usage);
        keep_warms.shaped(record, &shaped);
        let model_name = shaped
            .body
            .get("model")
            .and_then(|m| m.as_str())
            .unwrap_or("");
        let mut cost_usd = None;
        match crate::models::lookup(model_name) {
            Some(info) => {
                cost_usd = Some(info.cost_usd(&usage));
                stats.cost_usd += info.cost_usd(&usage);
                stats.savings_usd += info.savings_usd(&usage);
            }
            None => {
                stats.unpriced_requests += 1;
                if stats.unknown_models.len() < UNKNOWN_MODELS_SHOWN {
                    stats
                        .unknown_models
                        .insert(model_name.chars().take(128).collect());
                }
            }
        }
        let sent = (*diagnoses)
            .then(|| SentRequest::from_json(endpoint, &shaped.body, shaped.uncached_tail).ok())
            .flatten();
        let diagnosis = match sent {
            Some(mut sent) => {
                sent.shape.name_system_parts(&shaped.system);
                let client = match SentRequest::from_json(endpoint, &record.body, 0) {
                    Ok(c) => crate::session::PrefixHashes::of_raw(c.env.history_raw()),
                    Err(_) => crate::session::PrefixHashes::from_keys(Vec::new()),
                };
                let route_requests = crate::measure::overflow::route_of(&sent.env)
                    .map(|route| routes.count(route, record.time_ms));
                let lanes = sessions.entry(record.session.clone()).or_default();
                lanes.diagnose(
                    sent,
                    &client,
                    usage,
                    (record.time_ms, route_requests),
                    patches,
                )
            }
            None => None,
        };
        if let Some(d) = &diagnosis {
            *stats.breaks.entry(d.section.label().into()).or_default() += 1;
            *stats
                .break_reasons
                .entry(d.reason.label().into())
                .or_default() += 1;
        }
        stats.diagnoses.push(diagnosis.clone());
        *stats
            .variants
            .entry(shaped.variant.unwrap_or_else(|| "none".into()))
            .or_default() += 1;
        stats.requests += 1;
        total.add(&usage);
        stats.per_request.push(usage);
        // The keep-warms before this request count with it (or with the next one accounted).
        let with_keep_warms = std::mem::take(carried) + cost_usd.unwrap_or(0.0);
        stats.per_request_cost.push((index, with_keep_warms));
        let hit = ratio(total.cache_read, total.total_input());
        stats.series.push((stats.cost_usd, hit));
        Ok(Some(Step {
            usage,
            cost_usd,
            diagnosis,
            keep_warm: warmed,
        }))
    }

    /// The arm's figures, with the keep-warms still pending that go out by `last_ms` (the
    /// last recorded request).
    pub fn finish(mut self, last_ms: u64) -> ArmStats {
        let ArmRun {
            stats,
            cache,
            total,
            keep_warms,
            held,
            carried,
            ..
        } = &mut self;
        stats.trailing_keep_warm_cost = *carried;
        for (at, body) in std::mem::take(keep_warms).rest(last_ms) {
            let cost = keep_warm(stats, cache, total, &body, at).map_or(0.0, |(_, c)| c);
            stats.trailing_keep_warm_cost += cost;
        }
        stats.stateful_unknown = held.unknown;
        stats.cache_read_tokens = total.cache_read;
        stats.cache_write_tokens = total.cache_write;
        stats.uncached_tokens = total.uncached;
        stats.output_tokens = total.output;
        stats.hit_ratio = ratio(total.cache_read, total.total_input());
        self.stats
    }
}

/// Account one keep-warm request (one output token) in the arm's totals and cost.
fn keep_warm(
    stats: &mut ArmStats,
    cache: &mut CacheModel,
    total: &mut Usage,
    body: &serde_json::Value,
    at_ms: u64,
) -> Option<(Usage, f64)> {
    let Ok(accounting) = cache.account(crate::route::Endpoint::Messages, body, at_ms) else {
        stats.errors += 1;
        return None;
    };
    let usage = accounting.usage(1);
    let model = body.get("model").and_then(|m| m.as_str()).unwrap_or("");
    let mut cost = 0.0;
    if let Some(info) = crate::models::lookup(model) {
        cost = info.cost_usd(&usage);
        stats.cost_usd += cost;
        stats.savings_usd += info.savings_usd(&usage);
    }
    stats.keep_warm_requests += 1;
    stats.keep_warm_cache_read += usage.cache_read;
    total.add(&usage);
    Some((usage, cost))
}

/// A session's lanes during replay: the latest request of each, and the latest answered
/// one (what a diagnosis compares with), as the live session log keeps them.
#[derive(Default)]
struct SessionLanes {
    heads: Vec<LaneHead>,
    answered: HashMap<u32, Answered>,
}

/// The latest answered request of a lane: what it sent, its usage and time, the client's
/// own history and the patches it was shaped with (for a break's blame).
struct Answered {
    sent: SentRequest,
    usage: Usage,
    time_ms: u64,
    client: crate::session::Anchor,
    patches: Vec<crate::session::PatchEvent>,
}

impl SessionLanes {
    fn diagnose(
        &mut self,
        sent: SentRequest,
        client: &crate::session::PrefixHashes,
        usage: Usage,
        (time_ms, route_requests): (u64, Option<usize>),
        patches: Vec<crate::session::PatchEvent>,
    ) -> Option<Diagnosis> {
        let lane = lanes::assign(&self.heads, &sent.shape, client);
        self.heads.retain(|h| h.lane != lane);
        let conversation = crate::session::entry::Conversation::of(client);
        self.heads
            .insert(0, LaneHead::of(lane, &sent.shape, conversation));
        let diagnosis = self.answered.get(&lane).and_then(|answered| {
            let prev = &answered.sent;
            let previous = Previous {
                shape: &prev.shape,
                usage: answered.usage,
                time_ms: answered.time_ms,
            };
            let current = Current {
                shape: &sent.shape,
                usage,
                time_ms,
                min_tokens: min_tokens(&sent.shape.model),
                thinking_stripped_from: crate::measure::breaks::thinking_stripped_from(&sent.env),
                retention: crate::measure::breaks::retention(&sent.env),
            };
            let tokens_through = |block| {
                crate::measure::prompt::tokens_through(&sent.env, block, current.min_tokens)
            };
            let mut d = diagnose(&previous, &current, &tokens_through)?;
            let at = d.message_index.unwrap_or(0);
            if let (Some(before), Some(now)) = (
                prev.env.history_raw().nth(at),
                sent.env.history_raw().nth(at),
            ) {
                match d.as_appended(&previous, &current, &tokens_through, (before, now)) {
                    Some(again) => d = again?,
                    None => d.refine_thinking(before, now),
                }
            }
            if let Some(sent) = route_requests {
                d.refine_overflow(sent);
            }
            let patched: Vec<_> = (answered.patches.iter().filter_map(|p| p.patched(true)))
                .chain(patches.iter().filter_map(|p| p.patched(false)))
                .collect();
            let facts = crate::measure::blame::Facts {
                patches: &patched,
                client_extends: Some(client.matches(&answered.client)),
                markers_by: None,
            };
            crate::measure::blame::attribute(&mut d, &facts);
            Some(d)
        });
        let answered = Answered {
            sent,
            usage,
            time_ms,
            client: client.full(),
            patches,
        };
        self.answered.insert(lane, answered);
        diagnosis
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::shaper::AsRecorded;
    use crate::trace::record::{Record, TRACE_VERSION};
    use serde_json::json;

    fn chat(n: u64, session: &str, system: &str) -> Record {
        let filler = "The retry loop waits with exponential backoff and jitter. ".repeat(150);
        let mut messages = vec![json!({"role": "system", "content": format!("{system} {filler}")})];
        for i in 0..=n {
            messages.push(json!({"role": "user", "content": format!("question {i}")}));
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
        }
        Record {
            v: TRACE_VERSION,
            time_ms: 1_000_000 + n * 1000,
            session: session.into(),
            provider: "openai".into(),
            endpoint: "chat".into(),
            path: "/v1/chat/completions".into(),
            headers: Default::default(),
            body: json!({"model": "gpt-4o", "messages": messages}),
            body_text: None,
            body_base64: None,
            usage: Some(Usage {
                output: 7,
                ..Default::default()
            }),
            status: Some(200),
            response_id: None,
            output: None,
        }
    }

    #[test]
    fn openai_records_are_accounted_and_breaks_are_per_session() {
        let records = vec![
            chat(0, "a", "You are terse."),
            chat(1, "a", "You are terse."),
            chat(2, "a", "You are verbose."),
            chat(0, "b", "You are terse."),
            Record {
                endpoint: "models".into(),
                ..chat(3, "a", "x")
            },
        ];
        let stats = replay_arm("r", &records, &mut AsRecorded, None, &mut || {});
        assert_eq!(stats.requests, 4, "non-generation endpoints are skipped");
        assert_eq!(stats.output_tokens, 28);
        // OpenAI caches automatically: the second request reads the first one's prefix.
        assert!(stats.per_request[1].cache_read > 0);
        assert_eq!(stats.breaks["system"], 1);
        assert_eq!(stats.breaks["messages"], 0);
        assert_eq!(stats.variants["none"], 4);
        assert_eq!(stats.series.len(), 4);
        assert!(stats.cost_usd > 0.0);
        assert_eq!(stats.unpriced_requests, 0);
    }

    #[test]
    fn unknown_models_are_counted_not_priced_as_another_model() {
        let mut unknown = chat(0, "a", "x");
        unknown.body["model"] = json!("gpt-9-test");
        let known = chat(1, "a", "x");
        let stats = replay_arm(
            "r",
            &[unknown, known.clone()],
            &mut AsRecorded,
            None,
            &mut || {},
        );
        let alone = replay_arm("r", &[known], &mut AsRecorded, None, &mut || {});
        assert_eq!(stats.unpriced_requests, 1);
        assert!(stats.unknown_models.contains("gpt-9-test"));
        // Only the known request is priced (the unknown one adds nothing).
        assert!(stats.cost_usd > 0.0 && stats.cost_usd <= alone.cost_usd + 1e-12);
    }

    /// A Gemini record names its model in its path: replay reads it there, so the
    /// implicit cache is the model's and the request is priced.
    #[test]
    fn gemini_records_are_accounted_with_the_model_of_their_path() {
        let gemini = |n: u64| {
            let mut contents = Vec::new();
            for i in 0..=n {
                contents
                    .push(json!({"role": "user", "parts": [{"text": format!("question {i}")}]}));
                contents.push(json!({"role": "model", "parts": [{"text": format!("answer {i}")}]}));
            }
            let system = "The retry loop waits with exponential backoff and jitter. ".repeat(300);
            Record {
                provider: "gemini".into(),
                endpoint: "generate_content".into(),
                path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent".into(),
                body: json!({"systemInstruction": {"parts": [{"text": system}]}, "contents": contents}),
                ..chat(n, "g", "x")
            }
        };
        let stats = replay_arm(
            "r",
            &[gemini(0), gemini(1)],
            &mut AsRecorded,
            None,
            &mut || {},
        );
        assert_eq!(
            (stats.requests, stats.errors),
            (2, 0),
            "{:?}",
            stats.error_messages
        );
        assert!(stats.per_request[1].cache_read > 0);
        assert_eq!(stats.unpriced_requests, 0);
        assert!(stats.cost_usd > 0.0);
    }

    #[test]
    fn unaccountable_requests_are_counted_not_fatal() {
        let mut bad = chat(0, "a", "x");
        bad.body = json!({"messages": "not a list"});
        bad.endpoint = "messages".into();
        let stats = replay_arm("r", &[bad], &mut AsRecorded, None, &mut || {});
        assert_eq!((stats.requests, stats.errors), (0, 1));
        assert!(!stats.error_messages[0].is_empty());
    }
}
