//! The prefix-break diagnosis (DESIGN §8): why a request read less from the provider's
//! cache than its session's history says it could have. It compares what the cache keys on
//! ([`PromptShape`]: tools, then system, then the history up to the request-only tail;
//! never the tail, never a marker-only edit) with the previous request of the same lane,
//! and reports the first divergence, or, when the prefix still extends, why the cached
//! prefix was not read. The live path and `cachet replay` both call [`diagnose`].

use serde::{Deserialize, Serialize};

use super::prompt::{Mark, Named, PromptShape};
use crate::cache_model::STEP_TOKENS;
use crate::providers::anthropic;
use crate::route::{Endpoint, Section};
use crate::usage::Usage;

/// Why a request lost (part of) its cached prefix. A bounded vocabulary: it is a label
/// of `cachet_prefix_breaks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakReason {
    /// Another model: nothing is shared (reported on section `tools`).
    ModelChanged,
    /// Served at another speed than the previous request (fast mode or not): each speed
    /// caches apart, so nothing the other cached is read (reported on section `tools`).
    SpeedChanged,
    ToolsChanged,
    SystemChanged,
    /// A history message differs from the one at its place in the previous request.
    MessageEdited,
    /// The history is a shortened copy of the previous one.
    HistoryTruncated,
    /// The previous request's entry outlived its marker's lifetime before this request.
    TtlExpired,
    /// Every marker of this request sits on a prefix below the model's minimum.
    BelowMinimum,
    /// The previous entry lies more blocks before this request's markers than the
    /// provider looks back.
    OutsideLookback,
    /// The difference is only thinking blocks that were dropped (by the client, or by the
    /// provider when a new turn starts on a model that does not keep them).
    ThinkingDropped,
    /// An OpenAI miss while the lane sent more requests in a minute than one machine
    /// takes for a prefix and `prompt_cache_key`: the provider routes some elsewhere.
    RateOverflow,
    /// The provider's context editing (Anthropic `clear_tool_uses_*`, as its answer's
    /// `context_management.applied_edits` says) cleared tool results from the prompt
    /// before it was cached: the prefix ends at the first one cleared since.
    ContextEdited,
    /// The provider read less than the session's history says was cached and reachable.
    Unexplained,
}

impl BreakReason {
    pub const ALL: [BreakReason; 13] = [
        BreakReason::ModelChanged,
        BreakReason::SpeedChanged,
        BreakReason::ToolsChanged,
        BreakReason::SystemChanged,
        BreakReason::MessageEdited,
        BreakReason::HistoryTruncated,
        BreakReason::TtlExpired,
        BreakReason::BelowMinimum,
        BreakReason::OutsideLookback,
        BreakReason::ThinkingDropped,
        BreakReason::RateOverflow,
        BreakReason::ContextEdited,
        BreakReason::Unexplained,
    ];

    pub fn label(self) -> &'static str {
        match self {
            BreakReason::ModelChanged => "model_changed",
            BreakReason::SpeedChanged => "speed_changed",
            BreakReason::ToolsChanged => "tools_changed",
            BreakReason::SystemChanged => "system_changed",
            BreakReason::MessageEdited => "message_edited",
            BreakReason::HistoryTruncated => "history_truncated",
            BreakReason::TtlExpired => "ttl_expired",
            BreakReason::BelowMinimum => "below_minimum",
            BreakReason::OutsideLookback => "outside_lookback",
            BreakReason::ThinkingDropped => "thinking_dropped",
            BreakReason::RateOverflow => "rate_overflow",
            BreakReason::ContextEdited => "context_edited",
            BreakReason::Unexplained => "unexplained",
        }
    }
}

/// One request's diagnosis, as written in the session log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub section: SectionName,
    pub reason: BreakReason,
    /// The system part where the prompts first differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    /// The tool where the prompts first differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The history message where the prompts first differ (or the lost entry sat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_index: Option<usize>,
    /// Tokens the session's history says could have been read, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_read: Option<u64>,
    /// Tokens read.
    pub read: u64,
    pub detail: String,
    /// Who can fix it ([`super::blame`]); absent in logs written before blames were (read
    /// with [`Diagnosis::blame`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blame: Option<super::blame::Blame>,
}

/// A section label in the log (`tools`, `system`, `messages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SectionName {
    Tools,
    System,
    Messages,
}

impl From<Section> for SectionName {
    fn from(s: Section) -> Self {
        match s {
            Section::Tools => SectionName::Tools,
            Section::System => SectionName::System,
            Section::Messages => SectionName::Messages,
        }
    }
}

impl SectionName {
    pub fn label(self) -> &'static str {
        match self {
            SectionName::Tools => "tools",
            SectionName::System => "system",
            SectionName::Messages => "messages",
        }
    }
}

/// The previous request of the lane, as the diagnosis needs it.
#[derive(Debug, Clone)]
pub struct Previous<'a> {
    pub shape: &'a PromptShape,
    pub usage: Usage,
    pub time_ms: u64,
}

/// The request being diagnosed.
#[derive(Debug, Clone)]
pub struct Current<'a> {
    pub shape: &'a PromptShape,
    pub usage: Usage,
    pub time_ms: u64,
    /// The model's minimum cacheable prefix, in tokens.
    pub min_tokens: u64,
    /// The first history message whose thinking the provider drops for this request (a
    /// new turn on a model that keeps no earlier thinking), if any.
    pub thinking_stripped_from: Option<usize>,
    /// OpenAI: how long the request asks the provider to keep its prefix (see
    /// [`retention`]).
    pub retention: crate::providers::openai::Retention,
}

/// Where the provider starts dropping thinking blocks from this request's prompt, by the
/// cache model's thinking-retention rule: the first message of the most recent turn whose
/// thinking it drops (older turns' were already dropped from the previous request's
/// prompt). The cached prefix ends there whatever the client sent. Read from the envelope:
/// only the two options the rule looks at are parsed, never the whole body.
pub fn thinking_stripped_from(env: &crate::envelope::Envelope) -> Option<usize> {
    use crate::envelope::turns;
    if env.endpoint().read_as() != Endpoint::Messages {
        return None;
    }
    let request = crate::providers::anthropic::thinking_settings(env);
    let keep = crate::cache_model::thinking::retention(&request, &env.meta.model);
    if matches!(keep, None | Some(crate::cache_model::thinking::Keep::All)) {
        return None;
    }
    let kinds = env.history_kinds();
    let kept = crate::cache_model::thinking::kept_by_kind(keep, &kinds);
    let starts = turns::prompt_starts(&kinds);
    let turn_of = |i: usize| starts.partition_point(|&s| s <= i);
    let stripped: Vec<usize> = (0..kinds.len())
        .filter(|&i| !kept[i] && env.history_has_thinking(i))
        .collect();
    let newest = stripped.iter().map(|&i| turn_of(i)).max()?;
    stripped.into_iter().find(|&i| turn_of(i) == newest)
}

/// How long an OpenAI request asks the provider to keep its prefix: an agent sends the
/// same on every request, so this request's says how long the previous one's prefix was
/// kept.
pub fn retention(env: &crate::envelope::Envelope) -> crate::providers::openai::Retention {
    crate::providers::openai::Retention::of_envelope(env)
}

/// Minimum cacheable prefix assumed for a model missing from the table.
pub const DEFAULT_MIN_TOKENS: u64 = 1024;

/// The model's minimum cacheable prefix, in tokens.
pub fn min_tokens(model: &str) -> u64 {
    crate::models::lookup(model).map_or(DEFAULT_MIN_TOKENS, |m| m.min_cacheable_tokens)
}

/// Diagnose `cur` against the previous request of its lane. `tokens_through(block)` is
/// the number of prompt tokens up to and including a block of `cur`, or any number at or
/// above `cur.min_tokens` once that is reached (asked only for markers, and only when
/// nothing was read or written). `None`: nothing was lost.
pub fn diagnose(
    prev: &Previous<'_>,
    cur: &Current<'_>,
    tokens_through: &dyn Fn(u32) -> u64,
) -> Option<Diagnosis> {
    let mut d = first_loss(prev, cur, tokens_through)?;
    d.blame = Some(super::blame::Blame::of_reason(&d));
    Some(d)
}

/// [`diagnose`], before its blame.
fn first_loss(
    prev: &Previous<'_>,
    cur: &Current<'_>,
    tokens_through: &dyn Fn(u32) -> u64,
) -> Option<Diagnosis> {
    let (p, c) = (prev.shape, cur.shape);
    let read = cur.usage.prompt_read();
    let base = |section: Section, reason: BreakReason, detail: String| Diagnosis {
        section: section.into(),
        reason,
        part: None,
        tool: None,
        message_index: None,
        expected_read: None,
        read,
        detail,
        blame: None,
    };
    if p.model != c.model {
        return Some(base(
            Section::Tools,
            BreakReason::ModelChanged,
            format!("model changed from {} to {}", p.model, c.model),
        ));
    }
    // Each speed has a cache of its own ("switching between fast and standard speed
    // invalidates the prompt cache"; OpenAI's `service_tier_changed`, flex included): what
    // the previous request cached at its speed is not read at this one's.
    let cached = prev.usage.left_cached();
    if prev.usage.tier() != cur.usage.tier() && read < cached {
        let mut d = base(
            Section::Tools,
            BreakReason::SpeedChanged,
            format!(
                "served at {} speed after {}; each speed caches apart",
                cur.usage.tier(),
                prev.usage.tier()
            ),
        );
        d.expected_read = Some(cached);
        return Some(d);
    }
    // The first section, in the order the provider keys on them, that stopped extending.
    for section in crate::providers::api(c.endpoint).cache_key_order() {
        let diagnosis = match section {
            Section::Tools if p.tools_key != c.tools_key => {
                let (tool, detail) = first_difference(&p.tools, &c.tools, "tool");
                let mut d = base(Section::Tools, BreakReason::ToolsChanged, detail);
                d.tool = tool;
                Some(d)
            }
            Section::System if p.system_key != c.system_key => {
                let (part, detail) = first_difference(&p.system, &c.system, "system part");
                let mut d = base(Section::System, BreakReason::SystemChanged, detail);
                d.part = part;
                Some(d)
            }
            // An edit after the previous request's last marker changes nothing it cached
            // (Claude Code's retried summary request edits its last message, past the
            // marker it moved back): what it cached is checked as for an extension.
            Section::Messages => messages_divergence(p, c, &base)
                .filter(|d| !d.message_index.is_some_and(|at| after_last_mark(p, at))),
            _ => None,
        };
        if diagnosis.is_some() {
            return diagnosis;
        }
    }
    // A compaction since the previous request: the provider's prompt now starts at its
    // summary, which nothing before it cached. Not a break, and nothing to hold it to.
    if c.compacted_at.is_some_and(|at| at >= p.messages.len()) {
        return None;
    }
    // The prefix extends the previous one: was what it cached read? The APIs that cache
    // without markers (OpenAI's, Gemini's implicit caching) keep an idle prefix for a while.
    match p.endpoint {
        Endpoint::Chat | Endpoint::Responses => openai_miss(prev, cur, base),
        Endpoint::GenerateContent => openai_miss(prev, cur, base),
        _ => anthropic_miss(prev, cur, tokens_through, base),
    }
}

/// Whether history message `at` comes after the last marker of the prompt `p` (an
/// Anthropic prompt whose last marker sits in an earlier message).
fn after_last_mark(p: &PromptShape, at: usize) -> bool {
    p.marks
        .last()
        .and_then(|m| m.message)
        .is_some_and(|m| (m as usize) < at)
}

/// Where the history stopped extending the previous one, if it did.
fn messages_divergence(
    p: &PromptShape,
    c: &PromptShape,
    base: &impl Fn(Section, BreakReason, String) -> Diagnosis,
) -> Option<Diagnosis> {
    let common = p
        .messages
        .iter()
        .zip(&c.messages)
        .take_while(|(a, b)| a == b)
        .count();
    if common == p.messages.len() {
        return None;
    }
    let mut d = if common == c.messages.len() {
        base(
            Section::Messages,
            BreakReason::HistoryTruncated,
            format!(
                "history shortened from {} to {} messages",
                p.messages.len(),
                c.messages.len()
            ),
        )
    } else {
        base(
            Section::Messages,
            BreakReason::MessageEdited,
            format!("message {common} edited"),
        )
    };
    d.message_index = Some(common);
    Some(d)
}

fn first_difference(a: &[Named], b: &[Named], what: &str) -> (Option<String>, String) {
    let i = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    match (a.get(i), b.get(i)) {
        (Some(x), Some(y)) if x.name == y.name => {
            (Some(y.name.clone()), format!("{what} `{}` changed", y.name))
        }
        (Some(x), Some(y)) => (
            Some(y.name.clone()),
            format!("{what} `{}` in place of `{}`", y.name, x.name),
        ),
        (None, Some(y)) => (Some(y.name.clone()), format!("{what} `{}` added", y.name)),
        (Some(x), None) => (Some(x.name.clone()), format!("{what} `{}` removed", x.name)),
        (None, None) => (None, format!("{what}s changed")),
    }
}

fn anthropic_miss(
    prev: &Previous<'_>,
    cur: &Current<'_>,
    tokens_through: &dyn Fn(u32) -> u64,
    base: impl Fn(Section, BreakReason, String) -> Diagnosis,
) -> Option<Diagnosis> {
    let read = cur.usage.prompt_read();
    // What the previous request left in the cache: its prefix up to its last marker (the
    // summary's, when the provider compacted it).
    let cached = prev.usage.left_cached();
    let entry = prev.shape.marks.last().copied();
    let (Some(entry), true) = (entry, cached > 0) else {
        return below_minimum(cur, tokens_through, &base);
    };
    if read >= cached {
        return None;
    }
    let tools = prev.shape.tools.len();
    let mut d = base(
        entry.section(tools),
        BreakReason::Unexplained,
        String::new(),
    );
    d.expected_read = Some(cached);
    d.message_index = entry.message.map(|m| m as usize);
    let gap_secs = cur.time_ms.saturating_sub(prev.time_ms) / 1000;
    if gap_secs > entry.ttl.seconds() {
        d.reason = BreakReason::TtlExpired;
        d.detail = format!(
            "{gap_secs} s since the previous request, past its {} s marker",
            entry.ttl.seconds()
        );
        return Some(d);
    }
    if let Some(at) = cur
        .thinking_stripped_from
        .filter(|&at| entry.message.is_some_and(|m| m as usize >= at))
    {
        d.reason = BreakReason::ThinkingDropped;
        d.message_index = Some(at);
        d.detail = format!("the provider drops earlier thinking from message {at} on");
        return Some(d);
    }
    // A small slack for counting differences; anything more is the provider's doing.
    let short = read + (cached / 200).max(16) < cached;
    // The provider works the edit out on the whole history every time and reports every
    // cleared tool use, so only more of them than for the previous request moved the cut.
    let before = prev.usage.cleared.map_or(0, |c| c.tool_uses);
    let newly = cur.usage.cleared.filter(|c| c.tool_uses > before);
    if let Some(cleared) = newly.filter(|_| short) {
        d.reason = BreakReason::ContextEdited;
        d.detail = format!(
            "the provider's context editing cleared {} tool uses ({} tokens) before caching the prompt, {} more than for the previous request; read {read} of the {cached} tokens cached by the previous request",
            cleared.tool_uses,
            cleared.input_tokens,
            cleared.tool_uses - before
        );
        return Some(d);
    }
    // Read about all it cached: nothing lost, wherever this request's markers are (a
    // client that moved its marker back a block or two).
    if !short {
        return None;
    }
    let reaches = |m: &Mark| m.block >= entry.block && m.block - entry.block < LOOKBACK;
    if !cur.shape.marks.iter().any(reaches) {
        if let Some(d) = below_minimum(cur, tokens_through, &base) {
            return Some(d);
        }
        d.reason = BreakReason::OutsideLookback;
        d.detail = match cur.shape.marks.iter().find(|m| m.block >= entry.block) {
            Some(m) => format!(
                "the nearest marker is {} blocks after the cached prefix; the provider looks back {LOOKBACK}",
                m.block - entry.block
            ),
            None => "no marker at or after the cached prefix".into(),
        };
        return Some(d);
    }
    d.detail = format!("read {read} of the {cached} tokens cached by the previous request");
    Some(d)
}

/// Blocks a marker looks back over, the marked one included.
const LOOKBACK: u32 = anthropic::LOOKBACK_BLOCKS as u32;

/// Whether diagnosing `cur` may count its prompt's tokens ([`below_minimum`]): an
/// Anthropic request with markers, at least the minimum long, that read and wrote nothing.
pub fn may_count_tokens(cur: &Current<'_>) -> bool {
    let usage = &cur.usage;
    matches!(
        cur.shape.endpoint.read_as(),
        Endpoint::Messages | Endpoint::CountTokens
    ) && usage.cache_read == 0
        && usage.cache_write == 0
        && usage.total_input() >= cur.min_tokens
        && !cur.shape.marks.is_empty()
}

/// Nothing read although the prompt is long enough, because every marker sits on a prefix
/// below the model's minimum.
fn below_minimum(
    cur: &Current<'_>,
    tokens_through: &dyn Fn(u32) -> u64,
    base: &impl Fn(Section, BreakReason, String) -> Diagnosis,
) -> Option<Diagnosis> {
    if !may_count_tokens(cur) {
        return None;
    }
    let last = cur.shape.marks.last()?;
    let tokens = tokens_through(last.block);
    if tokens >= cur.min_tokens {
        return None;
    }
    let mut d = base(
        last.section(cur.shape.tools.len()),
        BreakReason::BelowMinimum,
        format!(
            "the last marker sits on {tokens} tokens, below the model's minimum of {}",
            cur.min_tokens
        ),
    );
    d.message_index = last.message.map(|m| m as usize);
    Some(d)
}

fn openai_miss(
    prev: &Previous<'_>,
    cur: &Current<'_>,
    base: impl Fn(Section, BreakReason, String) -> Diagnosis,
) -> Option<Diagnosis> {
    let read = cur.usage.cache_read;
    // What the previous request read is still cached (reads refresh), and a previous
    // prompt above the minimum was cached whole.
    let expected = prev.usage.cache_read;
    let lost_all = read == 0 && prev.usage.total_input() >= cur.min_tokens + STEP_TOKENS;
    if read + STEP_TOKENS > expected && !lost_all {
        return None;
    }
    let mut d = base(Section::Messages, BreakReason::Unexplained, String::new());
    d.expected_read = (expected > 0).then_some(expected);
    let gap_secs = cur.time_ms.saturating_sub(prev.time_ms) / 1000;
    let kept_secs = crate::cache_model::surely_kept_ms(&cur.shape.model, cur.retention) / 1000;
    if gap_secs > kept_secs {
        d.reason = BreakReason::TtlExpired;
        d.detail = format!(
            "{gap_secs} s idle; the provider keeps an idle prefix of this request at least {kept_secs} s"
        );
    } else if expected > 0 {
        d.detail =
            format!("read {read} tokens; the previous request read {expected} of the same prefix");
    } else {
        d.detail = format!(
            "read {read} tokens; the previous request's {}-token prompt was cached whole",
            prev.usage.total_input()
        );
    }
    Some(d)
}

#[cfg(test)]
#[path = "breaks_tests.rs"]
mod tests;
