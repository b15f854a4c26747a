//! `thinking_stripped_from` reads the envelope; it must answer exactly as the rule read from
//! a whole-body `serde_json::Value` did, on Claude Code-shaped requests.

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::thinking_stripped_from;
use crate::envelope::{turns, MsgKind};
use crate::route::{Endpoint, Provider};

/// The rule as it was computed from a whole-body parse, kept as the reference.
fn from_value(endpoint: Endpoint, body: &[u8]) -> Option<usize> {
    if endpoint != Endpoint::Messages {
        return None;
    }
    let request: serde_json::Map<String, Value> = serde_json::from_slice(body).ok()?;
    let messages = request.get("messages")?.as_array()?;
    let model = request.get("model").and_then(|m| m.as_str()).unwrap_or("");
    let kept = crate::cache_model::thinking::kept_by_message(&request, messages, model);
    let has_thinking = |m: &Value| {
        m.get("content")
            .and_then(|c| c.as_array())
            .is_some_and(|blocks| {
                blocks.iter().any(|b| {
                    matches!(
                        b.get("type").and_then(|t| t.as_str()),
                        Some("thinking" | "redacted_thinking")
                    )
                })
            })
    };
    let kinds: Vec<MsgKind> = messages
        .iter()
        .map(|m| {
            crate::providers::message_kind(endpoint, &serde_json::to_vec(m).unwrap_or_default())
        })
        .collect();
    let starts = turns::prompt_starts(&kinds);
    let turn_of = |i: usize| starts.iter().filter(|&&s| s <= i).count();
    let stripped: Vec<usize> = (0..messages.len())
        .filter(|&i| !kept[i] && has_thinking(&messages[i]))
        .collect();
    let newest = stripped.iter().map(|&i| turn_of(i)).max()?;
    stripped.into_iter().find(|&i| turn_of(i) == newest)
}

/// Claude Code's recorded tool-loop request: its system, tools, metadata and options.
fn claude_code_body() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/claude_code_tool_loop.json"
    );
    serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("fixture JSON")
}

fn via_envelope(body: &[u8]) -> Option<usize> {
    let env = crate::providers::parse_envelope(Endpoint::Messages, Bytes::copy_from_slice(body))
        .expect("a valid request");
    thinking_stripped_from(&env)
}

/// One step of a tool loop: the assistant's call (with or without thinking first) and the
/// user message carrying its result, the way Claude Code sends them.
#[derive(Debug, Clone)]
struct Step {
    thinking: Option<bool>,
    text: bool,
    result_text: bool,
    marker: bool,
}

#[derive(Debug, Clone)]
struct Turn {
    prompt_blocks: bool,
    reminder: bool,
    steps: Vec<Step>,
    /// The turn's final answer (absent on the current turn while it loops).
    answer: Option<Option<bool>>,
}

fn thinking_block(redacted: bool, n: usize) -> Value {
    if redacted {
        json!({"type": "redacted_thinking", "data": format!("EmwKAhgB{n}")})
    } else {
        json!({"type": "thinking", "thinking": format!("Step {n}: read the file first."), "signature": format!("sig-{n}")})
    }
}

fn messages_of(turns: &[Turn]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut n = 0;
    for (t, turn) in turns.iter().enumerate() {
        let prompt = format!("Turn {t}: list the files and explain flow.rs");
        out.push(if turn.prompt_blocks {
            json!({"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nAs you answer, use the context.\n</system-reminder>"},
                {"type": "text", "text": prompt},
            ]})
        } else {
            json!({"role": "user", "content": prompt})
        });
        if turn.reminder {
            out.push(json!({"role": "system", "content": "# Environment\nPrimary working directory: /home/dev/project"}));
        }
        for step in &turn.steps {
            n += 1;
            let mut blocks = Vec::new();
            if let Some(redacted) = step.thinking {
                blocks.push(thinking_block(redacted, n));
            }
            if step.text {
                blocks.push(json!({"type": "text", "text": "Reading it."}));
            }
            let id = format!("toolu_{n:020}");
            blocks.push(json!({"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": "src/session/flow.rs"}}));
            out.push(json!({"role": "assistant", "content": blocks}));
            let mut result = json!({"type": "tool_result", "tool_use_id": id, "content": format!("{n}\tfn flow() {{}}")});
            if step.marker {
                result["cache_control"] = json!({"type": "ephemeral"});
            }
            let mut content = vec![result];
            if step.result_text {
                content.push(json!({"type": "text", "text": "<system-reminder>The file changed.</system-reminder>"}));
            }
            out.push(json!({"role": "user", "content": content}));
        }
        if let Some(thinking) = turn.answer {
            n += 1;
            let mut blocks = Vec::new();
            if let Some(redacted) = thinking {
                blocks.push(thinking_block(redacted, n));
            }
            blocks.push(json!({"type": "text", "text": "flow.rs parses the flags."}));
            out.push(json!({"role": "assistant", "content": blocks}));
        }
    }
    out
}

fn arb_step() -> impl Strategy<Value = Step> {
    (
        prop::option::of(any::<bool>()),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(thinking, text, result_text, marker)| Step {
            thinking,
            text,
            result_text,
            marker,
        })
}

fn arb_turns() -> impl Strategy<Value = Vec<Turn>> {
    let turn = (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(arb_step(), 0..4),
        prop::option::of(prop::option::of(any::<bool>())),
    )
        .prop_map(|(prompt_blocks, reminder, steps, answer)| Turn {
            prompt_blocks,
            reminder,
            steps,
            answer,
        });
    prop::collection::vec(turn, 1..5)
}

fn arb_thinking() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!({"type": "adaptive", "display": "omitted"}))),
        Just(Some(json!({"type": "enabled", "budget_tokens": 8000}))),
        Just(Some(json!({"type": "disabled"}))),
    ]
}

fn arb_context_management() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})
        )),
        (1usize..4).prop_map(|n| Some(json!({"edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": n}}
        ]}))),
        Just(Some(
            json!({"edits": [{"type": "clear_thinking_20251015"}]})
        )),
        Just(Some(
            json!({"edits": [{"type": "clear_tool_uses_20250919"}]})
        )),
        Just(Some(json!({"edits": [
            {"type": "clear_tool_uses_20250919"},
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}
        ]}))),
    ]
}

fn arb_model() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("claude-opus-5-5"),
        Just("claude-opus-4-5"),
        Just("claude-sonnet-4-5"),
        Just("claude-haiku-4-5-20251001"),
        Just("claude-unknown-model"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn thinking_stripped_from_the_envelope_equals_the_whole_body_rule(
        turns in arb_turns(),
        thinking in arb_thinking(),
        context_management in arb_context_management(),
        model in arb_model(),
        pretty in any::<bool>(),
    ) {
        let mut body = claude_code_body();
        let obj = body.as_object_mut().expect("an object");
        obj.insert("model".into(), json!(model));
        obj.insert("messages".into(), Value::Array(messages_of(&turns)));
        obj.remove("thinking");
        obj.remove("context_management");
        if let Some(t) = thinking {
            obj.insert("thinking".into(), t);
        }
        if let Some(c) = context_management {
            obj.insert("context_management".into(), c);
        }
        let bytes = if pretty {
            serde_json::to_vec_pretty(&body).expect("serialise")
        } else {
            serde_json::to_vec(&body).expect("serialise")
        };
        prop_assert_eq!(via_envelope(&bytes), from_value(Endpoint::Messages, &bytes));
    }
}

/// The prompt shape of a request body as sent.
fn shape_of(endpoint: Endpoint, body: &Value) -> crate::measure::PromptShape {
    let body = Bytes::from(serde_json::to_vec(body).unwrap());
    crate::measure::PromptShape::of(
        &crate::providers::parse_envelope(endpoint, body).unwrap(),
        0,
    )
}

/// The usage cachet reads from an Anthropic answer.
fn anthropic_usage(answer: Value) -> crate::usage::Usage {
    crate::providers::usage::read_response_body(
        Endpoint::Messages,
        &serde_json::to_vec(&answer).unwrap(),
    )
    .usage
    .unwrap()
}

/// A conversation of `turns` prompts and answers, then one more prompt whose text block
/// carries a cache marker, as pi sends it.
fn marked_conversation(turns: usize) -> Vec<Value> {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": format!("task {i}")}));
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("done {i}")}]}));
    }
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": format!("task {turns}"), "cache_control": {"type": "ephemeral"}}]}));
    messages
}

/// The request being diagnosed, with a 1024-token minimum and nothing else to say.
fn current(
    shape: &crate::measure::PromptShape,
    usage: crate::usage::Usage,
    time_ms: u64,
) -> super::Current<'_> {
    super::Current {
        shape,
        usage,
        time_ms,
        min_tokens: 1024,
        thinking_stripped_from: None,
        retention: Default::default(),
    }
}

/// The property above must meet requests where thinking is dropped: on an older model the
/// previous turn's thinking goes, and the answer is that turn's first thinking message.
#[test]
fn an_older_model_drops_the_previous_turns_thinking() {
    let step = Step {
        thinking: Some(false),
        text: false,
        result_text: true,
        marker: false,
    };
    let turns = vec![
        Turn {
            prompt_blocks: true,
            reminder: true,
            steps: vec![step.clone(), step.clone()],
            answer: Some(Some(false)),
        },
        Turn {
            prompt_blocks: false,
            reminder: false,
            steps: vec![step],
            answer: None,
        },
    ];
    let mut body = claude_code_body();
    body["model"] = json!("claude-sonnet-4-5");
    body["messages"] = Value::Array(messages_of(&turns));
    body.as_object_mut().unwrap().remove("context_management");
    let bytes = serde_json::to_vec(&body).unwrap();
    // user prompt, system reminder, then the first assistant call at index 2.
    assert_eq!(via_envelope(&bytes), Some(2));
    assert_eq!(from_value(Endpoint::Messages, &bytes), Some(2));
    // With every turn's thinking kept, nothing is dropped.
    body["context_management"] =
        json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
    let bytes = serde_json::to_vec(&body).unwrap();
    assert_eq!(via_envelope(&bytes), None);
}

/// Only an Anthropic request with markers, at least the minimum long, that read and wrote
/// nothing has its tokens counted (and so loads the tokenizer): a zero-cache OpenAI answer,
/// common on short prompts, never does.
#[test]
fn only_an_anthropic_request_with_markers_that_cached_nothing_counts_tokens() {
    use super::may_count_tokens;
    use crate::measure::PromptShape;
    use crate::usage::Usage;
    let asks = |shape: &PromptShape, usage: Usage| may_count_tokens(&current(shape, usage, 0));
    let nothing_cached = Usage {
        uncached: 5000,
        ..Default::default()
    };
    let claude_code = shape_of(Endpoint::Messages, &claude_code_body());
    assert!(
        !claude_code.marks.is_empty(),
        "Claude Code marks its prompt"
    );
    assert!(asks(&claude_code, nothing_cached));
    let read = Usage {
        cache_read: 4000,
        ..nothing_cached
    };
    assert!(!asks(&claude_code, read));
    let short = Usage {
        uncached: 500,
        ..Default::default()
    };
    assert!(!asks(&claude_code, short));
    let unmarked = json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}]});
    assert!(!asks(
        &shape_of(Endpoint::Messages, &unmarked),
        nothing_cached
    ));
    let chat = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]});
    assert!(!asks(&shape_of(Endpoint::Chat, &chat), nothing_cached));
}

/// Only an OpenAI miss left `unexplained` is put down to the routing rate, and only past
/// the rate the cache model routes by: within it, or for a miss another reason explains, the
/// diagnosis stays as it was. Anthropic routes by no rate: its requests have no route.
#[test]
fn only_an_unexplained_openai_miss_past_the_rate_is_an_overflow() {
    use super::{BreakReason, Diagnosis, SectionName};
    use crate::cache_model::OVERFLOW_PER_MINUTE;
    let miss = |reason| Diagnosis {
        section: SectionName::Messages,
        reason,
        part: None,
        tool: None,
        message_index: None,
        expected_read: Some(3200),
        read: 0,
        detail: "read 0 tokens".into(),
        blame: None,
    };
    let refined = |reason, sent: usize| {
        let mut d = miss(reason);
        d.refine_overflow(sent);
        d.reason
    };
    let past = OVERFLOW_PER_MINUTE + 1;
    assert_eq!(
        refined(BreakReason::Unexplained, past),
        BreakReason::RateOverflow
    );
    assert_eq!(
        refined(BreakReason::Unexplained, OVERFLOW_PER_MINUTE),
        BreakReason::Unexplained
    );
    assert_eq!(
        refined(BreakReason::TtlExpired, past),
        BreakReason::TtlExpired
    );
    let route = |endpoint, body: &serde_json::Value| {
        let _provider = match endpoint {
            Endpoint::Messages => Provider::Anthropic,
            _ => Provider::OpenAi,
        };
        let env = crate::providers::parse_envelope(endpoint, body.to_string().into()).unwrap();
        crate::measure::overflow::route_of(&env)
    };
    let messages = json!({"model": "claude-sonnet-4-5", "max_tokens": 9,
        "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(route(Endpoint::Messages, &messages), None);
    let responses = |key: &str, first: &str| {
        json!({"model": "gpt-5.1-codex", "instructions": "Be brief. ".repeat(200),
            "prompt_cache_key": key, "input": [{"role": "user", "content": first}]})
    };
    let r = |key, first| route(Endpoint::Responses, &responses(key, first)).unwrap();
    // Past the routing bytes the rest of the prompt (a compaction's new history) does not
    // move the route; the key does.
    assert_eq!(r("s", "first"), r("s", "summary of earlier work"));
    assert_ne!(r("s", "first"), r("t", "first"));
}

/// An OpenAI request that reads nothing after a prompt the provider stored whole says so,
/// not that "the previous request read 0 of the same prefix": the first request of a
/// session reads nothing and stores everything.
#[test]
fn an_openai_miss_after_a_stored_prompt_names_what_was_stored() {
    use super::{diagnose, BreakReason, Current, Previous};

    use crate::usage::Usage;
    let body = |n: usize| {
        let mut messages = vec![json!({"role": "system", "content": "Be careful. ".repeat(900)})];
        for i in 0..n {
            messages.push(json!({"role": "user", "content": format!("question {i}")}));
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
        }
        messages.push(json!({"role": "user", "content": format!("question {n}")}));
        let body = json!({"model": "gpt-4.1", "messages": messages});
        shape_of(Endpoint::Chat, &body)
    };
    let (first, second) = (body(0), body(1));
    let previous = Previous {
        shape: &first,
        usage: Usage {
            uncached: 2700,
            ..Default::default()
        },
        time_ms: 0,
    };
    let current = Current {
        shape: &second,
        usage: Usage {
            uncached: 2720,
            ..Default::default()
        },
        time_ms: 2_000,
        min_tokens: 1024,
        thinking_stripped_from: None,
        retention: Default::default(),
    };
    let d = diagnose(&previous, &current, &|_| 0).expect("a miss");
    assert_eq!(d.reason, BreakReason::Unexplained);
    assert!(
        d.detail.contains("2700-token prompt was cached whole"),
        "{}",
        d.detail
    );
}

/// Anthropic's server-side compaction (`compact_20260112`) samples twice: a `compaction`
/// iteration over the prompt as sent, then the answer over the summary. The top-level
/// counts are the answer's (platform.claude.com, Compaction, "Understanding usage"), so
/// they read only the system prompt although the prompt as sent was read whole; and the
/// next request finds only the summary's prompt cached. Neither is a break. The usage is
/// read from answers shaped like Claude's (every iteration carries the cache fields).
#[test]
fn a_compaction_is_not_a_break_before_or_after() {
    use super::{diagnose, Previous};

    let shape = |turns: usize| {
        let body = json!({"model": "claude-opus-4-6", "max_tokens": 64,
            "system": [{"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}],
            "context_management": {"edits": [{"type": "compact_20260112"}]},
            "messages": marked_conversation(turns)});
        shape_of(Endpoint::Messages, &body)
    };
    let usage = |usage: Value| anthropic_usage(json!({"id": "msg_1", "usage": usage}));
    let counts = |kind: &str, read: u64, write: u64| {
        json!({"type": kind, "input_tokens": 3, "output_tokens": 200,
            "cache_read_input_tokens": read, "cache_creation_input_tokens": write})
    };
    let before = usage(json!({"input_tokens": 3, "output_tokens": 90,
        "cache_read_input_tokens": 149_000, "cache_creation_input_tokens": 1_400}));
    let compacted = usage(json!({"input_tokens": 3, "output_tokens": 200,
        "cache_read_input_tokens": 1_900, "cache_creation_input_tokens": 0,
        "iterations": [counts("compaction", 150_400, 700), counts("message", 1_900, 0)]}));
    let after = usage(json!({"input_tokens": 3, "output_tokens": 90,
        "cache_read_input_tokens": 1_900, "cache_creation_input_tokens": 2_600}));
    let (s1, s2, s3) = (shape(40), shape(41), shape(42));
    let at = |shape, usage, time_ms| current(shape, usage, time_ms);
    let previous = |shape, usage, time_ms| Previous {
        shape,
        usage,
        time_ms,
    };
    assert_eq!(
        diagnose(
            &previous(&s1, before, 0),
            &at(&s2, compacted, 20_000),
            &|_| 0
        ),
        None,
        "the compaction read the whole prompt"
    );
    assert_eq!(
        diagnose(
            &previous(&s2, compacted, 20_000),
            &at(&s3, after, 40_000),
            &|_| 0
        ),
        None,
        "the summary's prompt is all that was left cached"
    );
}

/// A miss on a request whose answer says the provider cleared more tool results than for
/// the previous request (`context_management.applied_edits`, platform.claude.com, Context
/// editing: clearing "invalidates cached prompt prefixes") is put down to that, not left
/// unexplained. The usage is read from answers shaped like Claude's.
#[test]
fn a_miss_where_the_provider_cleared_tool_results_is_a_context_edit() {
    use super::{diagnose, BreakReason, Previous};

    let shape = |steps: usize| {
        let mut messages = vec![json!({"role": "user", "content": "Read the modules."})];
        for i in 0..steps {
            let id = format!("toolu_{i:04}");
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": "Read", "input": {"path": format!("m{i}.rs")}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": "fn main() {}",
                 "cache_control": {"type": "ephemeral"}}]}));
        }
        let body = json!({"model": "claude-opus-4-6", "max_tokens": 64,
            "system": [{"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}],
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
            "messages": messages});
        shape_of(Endpoint::Messages, &body)
    };
    let answer = anthropic_usage;
    let before = answer(
        json!({"id": "msg_1", "usage": {"input_tokens": 3, "output_tokens": 40,
        "cache_read_input_tokens": 101_000, "cache_creation_input_tokens": 900}}),
    );
    let cleared = answer(json!({"id": "msg_2",
        "context_management": {"applied_edits": [{"type": "clear_tool_uses_20250919",
            "cleared_tool_uses": 8, "cleared_input_tokens": 52_000}]},
        "usage": {"input_tokens": 3, "output_tokens": 40,
            "cache_read_input_tokens": 6_000, "cache_creation_input_tokens": 44_800}}));
    let (s1, s2) = (shape(30), shape(31));
    let d = diagnose(
        &Previous {
            shape: &s1,
            usage: before,
            time_ms: 0,
        },
        &current(&s2, cleared, 10_000),
        &|_| 0,
    )
    .expect("a miss");
    assert_eq!(d.reason, BreakReason::ContextEdited, "{d:?}");
    assert!(d.detail.contains("cleared 8 tool uses"), "{}", d.detail);

    // The provider reports every cleared tool use on every request past the trigger. When
    // no more were cleared than for the previous request, the cut did not move: a miss
    // there is not the edit's doing.
    let same = answer(json!({"id": "msg_3",
        "context_management": {"applied_edits": [{"type": "clear_tool_uses_20250919",
            "cleared_tool_uses": 8, "cleared_input_tokens": 52_000}]},
        "usage": {"input_tokens": 3, "output_tokens": 40,
            "cache_read_input_tokens": 6_000, "cache_creation_input_tokens": 46_000}}));
    let s3 = shape(32);
    let d = diagnose(
        &Previous {
            shape: &s2,
            usage: cleared,
            time_ms: 10_000,
        },
        &current(&s3, same, 20_000),
        &|_| 0,
    )
    .expect("a miss");
    assert_eq!(d.reason, BreakReason::Unexplained, "{d:?}");
}

/// How long OpenAI keeps an idle prefix depends on the request: 5 to 10 minutes, but 24
/// hours with `prompt_cache_retention: "24h"` (platform.openai.com, Prompt caching,
/// "Prompt cache retention": `in_memory` or `24h`, "up to a maximum of 24 hours" as
/// openai-agents-python's `ModelSettings` puts it), at least the 30-minute `ttl` of GPT-5.6
/// breakpoints, and at least 12 hours with `prompt_cache_options.ttl: "12h"` (openai-python
/// 3.57, Responses `PromptCacheOptions.ttl`: "The minimum lifetime applied to every implicit
/// and explicit cache breakpoint written by the request"). A miss after 20 idle minutes is
/// an expiry only on the first kind; on the others the prefix should still have been
/// there, and the miss stays unexplained. After two idle hours, only the day and the 12
/// hours still hold it.
#[test]
fn an_openai_miss_after_a_pause_is_an_expiry_only_past_the_retention() {
    use super::{diagnose, retention, BreakReason, Current, Previous};
    use crate::measure::PromptShape;
    use crate::usage::Usage;
    let shapes = |model: &str, options: &Value| {
        let body = |n: usize| {
            let mut input =
                vec![json!({"role": "developer", "content": "Be careful. ".repeat(900)})];
            for i in 0..=n {
                input.push(json!({"role": "user", "content": format!("question {i}")}));
            }
            let mut body = json!({"model": model, "input": input, "prompt_cache_key": "s1"});
            for (k, v) in options.as_object().unwrap() {
                body[k] = v.clone();
            }
            crate::providers::parse_envelope(
                Endpoint::Responses,
                Bytes::from(serde_json::to_vec(&body).unwrap()),
            )
            .unwrap()
        };
        let (a, b) = (body(0), body(1));
        (
            PromptShape::of(&a, 0),
            PromptShape::of(&b, 0),
            retention(&b),
        )
    };
    let after = |minutes: u64, model: &str, options: Value| {
        let (first, second, retention) = shapes(model, &options);
        let previous = Previous {
            shape: &first,
            usage: Usage {
                cache_read: 2560,
                uncached: 140,
                ..Default::default()
            },
            time_ms: 0,
        };
        let current = Current {
            shape: &second,
            usage: Usage {
                uncached: 2710,
                ..Default::default()
            },
            time_ms: minutes * 60 * 1000,
            min_tokens: 1024,
            thinking_stripped_from: None,
            retention,
        };
        diagnose(&previous, &current, &|_| 0)
            .expect("a miss")
            .reason
    };
    let reason = |model: &str, options: Value| after(20, model, options);
    assert_eq!(reason("gpt-4.1", json!({})), BreakReason::TtlExpired);
    assert_eq!(
        reason("gpt-4.1", json!({"prompt_cache_retention": "in_memory"})),
        BreakReason::TtlExpired
    );
    let extended = json!({"prompt_cache_retention": "24h"});
    assert_eq!(
        reason("gpt-4.1", extended.clone()),
        BreakReason::Unexplained
    );
    assert_eq!(reason("gpt-5.6", json!({})), BreakReason::Unexplained);

    let twelve = json!({"prompt_cache_options": {"mode": "implicit", "ttl": "12h"}});
    let thirty = json!({"prompt_cache_options": {"ttl": "30m"}});
    assert_eq!(
        after(120, "gpt-6.2-sol", json!({})),
        BreakReason::TtlExpired
    );
    assert_eq!(after(120, "gpt-6.2-sol", thirty), BreakReason::TtlExpired);
    assert_eq!(
        after(120, "gpt-6.2-sol", twelve.clone()),
        BreakReason::Unexplained
    );
    assert_eq!(after(120, "gpt-4.1", extended), BreakReason::Unexplained);
    assert_eq!(
        after(13 * 60, "gpt-6.2-sol", twelve.clone()),
        BreakReason::TtlExpired
    );
    // The 12-hour ttl is a GPT-5.6-and-later option: an older model does not keep to it.
    assert_eq!(after(120, "gpt-4.1", twelve), BreakReason::TtlExpired);
}

/// A request that ran a server-side tool loop (Claude Code's web search) samples several
/// times, and its top-level counts add up every sampling's reads: "the
/// `cache_read_input_tokens` value includes accumulated reads from multiple internal API
/// calls made by the server-side tool" (platform.claude.com, Context editing, "Server-side
/// tools"). What it left cached is its last sampling's prompt, which the next request
/// reads in full: not a break.
#[test]
fn after_a_server_tool_loop_the_next_request_is_held_to_the_last_sampling() {
    use super::{diagnose, Previous};

    let shape = |turns: usize| {
        let body = json!({"model": "claude-opus-4-6", "max_tokens": 64,
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "messages": marked_conversation(turns)});
        shape_of(Endpoint::Messages, &body)
    };
    let answer = |usage: Value| anthropic_usage(json!({"id": "msg_1", "usage": usage}));
    let sampling = |read: u64, write: u64| {
        json!({"type": "message", "input_tokens": 2, "output_tokens": 300,
            "cache_read_input_tokens": read, "cache_creation_input_tokens": write})
    };
    let searched = answer(json!({"input_tokens": 6, "output_tokens": 900,
        "cache_read_input_tokens": 127_000, "cache_creation_input_tokens": 6_500,
        "server_tool_use": {"web_search_requests": 2},
        "iterations": [sampling(40_000, 2_000), sampling(42_000, 3_000), sampling(45_000, 1_500)]}));
    let next = answer(json!({"input_tokens": 3, "output_tokens": 80,
        "cache_read_input_tokens": 46_500, "cache_creation_input_tokens": 700}));
    let (s1, s2) = (shape(5), shape(6));
    assert_eq!(
        diagnose(
            &Previous {
                shape: &s1,
                usage: searched,
                time_ms: 0,
            },
            &current(&s2, next, 30_000),
            &|_| 0,
        ),
        None
    );
}

/// OpenAI's server-side compaction (Responses `context_management` with
/// `compact_threshold`; developers.openai.com, Compaction): the answer carries an opaque
/// `compaction` item, the client appends it to its input, and the provider's prompt starts
/// at the latest one. The next request then reads only what precedes the history, which is
/// the compaction's doing, not a break; a later request is compared as usual.
#[test]
fn an_openai_request_after_a_compaction_is_not_a_break() {
    use super::{diagnose, BreakReason, Previous};

    use crate::usage::Usage;
    let shape = |items: &[Value]| {
        let body = json!({"model": "gpt-5.6", "instructions": "You are Codex. ".repeat(300),
            "input": items, "prompt_cache_key": "019a-thread", "store": false});
        shape_of(Endpoint::Responses, &body)
    };
    let user = |t: &str| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": t}]});
    let said = |t: &str| json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]});
    let mut items = vec![user("fix the build")];
    for i in 0..20 {
        items.push(json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "shell", "arguments": "{\"cmd\":\"cargo build\"}"}));
        items.push(json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": "error[E0308]".repeat(40)}));
    }
    let before = shape(&items);
    items.push(json!({"type": "compaction", "encrypted_content": "gAAAAABpQ2x1c3Rlcg"}));
    items.push(said("The build is fixed."));
    items.push(user("now run the tests"));
    let after = shape(&items);
    assert_eq!(after.compacted_at, Some(41));
    let usage = |read: u64, total: u64| Usage {
        cache_read: read,
        uncached: total - read,
        ..Default::default()
    };
    let at = |shape, usage, time_ms| current(shape, usage, time_ms);
    let previous = Previous {
        shape: &before,
        usage: usage(9_000, 9_400),
        time_ms: 0,
    };
    assert_eq!(
        diagnose(&previous, &at(&after, usage(0, 1_900), 4_000), &|_| 0),
        None,
        "the prompt restarted at the compaction item"
    );
    // The next request extends the compacted one: a miss there is diagnosed as ever.
    items.push(said("Tests pass."));
    items.push(user("commit"));
    let later = shape(&items);
    let previous = Previous {
        shape: &after,
        usage: usage(0, 1_900),
        time_ms: 4_000,
    };
    let d = diagnose(&previous, &at(&later, usage(0, 2_000), 8_000), &|_| 0);
    assert_eq!(d.map(|d| d.reason), Some(BreakReason::Unexplained));
}

/// A request served at another speed than the previous one (Claude Code falling back from
/// `/fast` to standard, or back) reads nothing the previous one cached: `speed_changed`,
/// with what the previous request left cached as the expected read. The same two speeds
/// with the cache read in full, or a change that lost nothing, are no break.
#[test]
fn a_change_of_speed_that_read_less_is_named() {
    let body = |turns: usize| json!({"model": "claude-opus-5-5", "max_tokens": 8, "messages": marked_conversation(turns)});
    let (before, now) = (body(1), body(2));
    let p = shape_of(Endpoint::Messages, &before);
    let c = shape_of(Endpoint::Messages, &now);
    let usage = |fast: bool, read: u64, written: u64| crate::usage::Usage {
        cache_read: read,
        cache_write: written,
        cache_write_5m: written,
        uncached: 10,
        fast,
        ..Default::default()
    };
    let prev = |fast: bool| super::Previous {
        shape: &p,
        usage: usage(fast, 0, 3000),
        time_ms: 0,
    };
    let tokens = |_: u32| 5000;
    let d = super::diagnose(
        &prev(true),
        &current(&c, usage(false, 0, 3500), 1000),
        &tokens,
    )
    .expect("a break");
    assert_eq!(d.reason, super::BreakReason::SpeedChanged);
    assert_eq!(
        (d.section, d.expected_read, d.read),
        (super::SectionName::Tools, Some(3000), 0)
    );
    assert!(
        d.detail.contains("standard speed after fast"),
        "{}",
        d.detail
    );
    let back = super::diagnose(
        &prev(false),
        &current(&c, usage(true, 0, 3500), 1000),
        &tokens,
    );
    assert_eq!(
        back.map(|d| d.reason),
        Some(super::BreakReason::SpeedChanged)
    );
    // Read in full at the same speed: nothing to say.
    assert!(super::diagnose(
        &prev(true),
        &current(&c, usage(true, 3000, 500), 1000),
        &tokens
    )
    .is_none());
    // Another speed, but nothing was lost (a provider that shares them): no false alarm.
    assert!(super::diagnose(
        &prev(true),
        &current(&c, usage(false, 3000, 500), 1000),
        &tokens
    )
    .is_none());
}

/// OpenAI's flex tier is a tier of its own too (`service_tier_changed`): a Responses request
/// served on flex after one on the standard tier, reading less than that one left cached,
/// is `speed_changed` and says which tiers; flex after fast as well.
#[test]
fn a_change_to_or_from_flex_that_read_less_is_named() {
    let body = |turns: usize| {
        json!({"model": "o3", "prompt_cache_key": "s", "input": (0..turns).map(|i| json!({
            "role": "user", "content": format!("step {i} ").repeat(200)})).collect::<Vec<_>>()})
    };
    let p = shape_of(Endpoint::Responses, &body(1));
    let c = shape_of(Endpoint::Responses, &body(2));
    let usage = |tier: &str, read: u64| crate::usage::Usage {
        cache_read: read,
        uncached: 4000,
        fast: tier == "fast",
        flex: tier == "flex",
        ..Default::default()
    };
    let prev = |tier: &str| super::Previous {
        shape: &p,
        usage: usage(tier, 2048),
        time_ms: 0,
    };
    let tokens = |_: u32| 5000;
    for (before, now) in [("standard", "flex"), ("flex", "standard"), ("fast", "flex")] {
        let d = super::diagnose(&prev(before), &current(&c, usage(now, 0), 1000), &tokens)
            .unwrap_or_else(|| panic!("{before} then {now}: a break"));
        assert_eq!(
            d.reason,
            super::BreakReason::SpeedChanged,
            "{before} then {now}"
        );
        assert!(
            d.detail.contains(&format!("{now} speed after {before}")),
            "{}",
            d.detail
        );
    }
    assert!(super::diagnose(
        &prev("flex"),
        &current(&c, usage("flex", 4096), 1000),
        &tokens
    )
    .is_none());
}

/// Gemini caches without markers (implicit caching): an append-only request that reads
/// less than the previous one read is a miss, an expiry after an idle pause past the
/// 5 minutes cachet takes an implicit entry to live (as the emulator keeps it), else
/// unexplained. Anthropic's marker rules would see no marker and say nothing.
#[test]
fn a_gemini_miss_is_judged_as_implicit_caching() {
    use super::{diagnose, retention, BreakReason, Current, Previous};
    use crate::measure::PromptShape;
    use crate::usage::Usage;
    let body = |n: usize| {
        let mut contents = Vec::new();
        for i in 0..=n {
            contents.push(json!({"role": "user", "parts": [{"text": format!("question {i}")}]}));
            if i < n {
                contents.push(json!({"role": "model", "parts": [{"text": format!("answer {i}")}]}));
            }
        }
        let body = json!({"systemInstruction": {"parts": [{"text": "Be careful. ".repeat(900)}]},
            "contents": contents});
        crate::providers::parse_envelope(
            Endpoint::GenerateContent,
            Bytes::from(serde_json::to_vec(&body).unwrap()),
        )
        .unwrap()
    };
    let (a, b) = (body(0), body(1));
    let (first, second) = (PromptShape::of(&a, 0), PromptShape::of(&b, 0));
    let after = |minutes: u64| {
        let previous = Previous {
            shape: &first,
            usage: Usage {
                cache_read: 2560,
                uncached: 140,
                ..Default::default()
            },
            time_ms: 0,
        };
        let current = Current {
            shape: &second,
            usage: Usage {
                uncached: 2710,
                ..Default::default()
            },
            time_ms: minutes * 60 * 1000,
            min_tokens: 2048,
            thinking_stripped_from: None,
            retention: retention(&b),
        };
        diagnose(&previous, &current, &|_| 0).map(|d| d.reason)
    };
    assert_eq!(after(20), Some(BreakReason::TtlExpired));
    assert_eq!(after(1), Some(BreakReason::Unexplained));
}
