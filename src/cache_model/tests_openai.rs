//! OpenAI automatic caching on the cache model.

use serde_json::{json, Value};

use super::{CacheModel, CacheModelConfig};
use crate::route::Endpoint;

fn chat(words: usize, key: Option<&str>) -> Value {
    let mut req = json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are terse. ".to_string() + &"context ".repeat(words)},
            {"role": "user", "content": "hello"}
        ]
    });
    if let Some(k) = key {
        req["prompt_cache_key"] = json!(k);
    }
    req
}

#[test]
fn under_1024_tokens_reports_zero() {
    let mut m = CacheModel::default();
    let req = chat(300, None);
    m.account(Endpoint::Chat, &req, 0).unwrap();
    let a = m.account(Endpoint::Chat, &req, 1).unwrap();
    assert!(a.input_tokens < 1024);
    assert_eq!(a.cache_read, 0);
}

#[test]
fn above_1024_hits_are_multiples_of_128_of_the_longest_prefix() {
    let mut m = CacheModel::default();
    let req = chat(2000, None);
    assert_eq!(m.account(Endpoint::Chat, &req, 0).unwrap().cache_read, 0);
    let a = m.account(Endpoint::Chat, &req, 1).unwrap();
    assert!(a.input_tokens >= 1024);
    assert_eq!(a.cache_read % 128, 0);
    assert_eq!(a.cache_read, a.input_tokens / 128 * 128);
    // An appended turn reads the previous prompt, rounded down.
    let mut longer = req.clone();
    longer["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": "hi"}));
    longer["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "more"}));
    let b = m.account(Endpoint::Chat, &longer, 2).unwrap();
    assert_eq!(b.cache_read, a.input_tokens / 128 * 128);
    assert!(b.input_tokens > a.input_tokens);
    let usage = b.chat_usage_json(5);
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"],
        b.cache_read
    );
    assert_eq!(usage["prompt_tokens"], b.input_tokens);
    assert_eq!(usage["total_tokens"], b.input_tokens + 5);
}

/// The prompt-caching guide: "Requests are routed to a machine based on a hash of the
/// initial prefix of the prompt ... If you provide the prompt_cache_key parameter, it is
/// combined with the prefix hash, allowing you to influence routing". A routing hint, not a
/// partition: a key reads what the same key wrote, and different keys for one prefix miss
/// only until their machine holds the prefix (this replaces a test that pinned a hard
/// partition per key).
#[test]
fn prompt_cache_key_is_a_routing_hint_not_a_partition() {
    let mut m = CacheModel::default();
    m.account(Endpoint::Chat, &chat(2000, Some("a")), 0)
        .unwrap();
    assert!(
        m.account(Endpoint::Chat, &chat(2000, Some("a")), 1_000)
            .unwrap()
            .cache_read
            > 0
    );
    let machines = CacheModelConfig::default().openai_machines;
    let misses = (0..64)
        .filter(|i| {
            let key = format!("user-{i}");
            m.account(Endpoint::Chat, &chat(2000, Some(&key)), 2_000 + i * 1_000)
                .unwrap()
                .cache_read
                == 0
        })
        .count();
    assert!(misses >= 2, "64 keys all routed to one machine");
    assert!(
        misses <= machines,
        "{misses} misses: keys partitioned the cache"
    );
}

/// "If requests for the same prefix and prompt_cache_key combination exceed a certain rate
/// (approximately 15 requests per minute), some may overflow and get routed to additional
/// machines, reducing cache effectiveness."
#[test]
fn over_fifteen_requests_a_minute_some_overflow_and_miss() {
    let mut m = CacheModel::default();
    let req = chat(2000, Some("busy"));
    let reads: Vec<u64> = (0..30)
        .map(|i| {
            m.account(Endpoint::Chat, &req, i * 1_000)
                .unwrap()
                .cache_read
        })
        .collect();
    assert_eq!(reads[0], 0);
    assert!(reads[1..15].iter().all(|&r| r > 0), "{reads:?}");
    assert!(reads[15..].contains(&0), "{reads:?}");
    // A minute later the route is back on its home machine, which still holds the prefix.
    assert!(m.account(Endpoint::Chat, &req, 120_000).unwrap().cache_read > 0);
}

#[test]
fn idle_entries_expire_and_each_hit_renews_them() {
    let mut m = CacheModel::new(CacheModelConfig {
        openai_idle_secs: 60,
        ..Default::default()
    });
    m.account(Endpoint::Chat, &chat(2000, Some("a")), 0)
        .unwrap();
    assert!(
        m.account(Endpoint::Chat, &chat(2000, Some("a")), 50_000)
            .unwrap()
            .cache_read
            > 0
    );
    // Renewed at 50 s: still there at 100 s, gone 61 s after that.
    assert!(
        m.account(Endpoint::Chat, &chat(2000, Some("a")), 100_000)
            .unwrap()
            .cache_read
            > 0
    );
    assert_eq!(
        m.account(Endpoint::Chat, &chat(2000, Some("a")), 161_001)
            .unwrap()
            .cache_read,
        0
    );
}

/// "Caching is enabled automatically for prompts that are 1024 tokens or longer ... cache
/// hits occur in increments of 128 tokens" of the longest matching prefix: matching is per
/// token, so a long message whose last tenth changed is still read up to the change.
#[test]
fn a_long_message_whose_end_changed_reads_up_to_the_change_in_128_token_steps() {
    let mut m = CacheModel::default();
    let sentences: Vec<String> = (0..400)
        .map(|i| format!("Line {i} of the design document explains one module. "))
        .collect();
    let message = |tail: &str| {
        let mut text = sentences[..360].concat();
        text.push_str(tail);
        json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": "You review documents."},
            {"role": "user", "content": text}]})
    };
    let first = message(&sentences[360..].concat());
    let first_a = m.account(Endpoint::Chat, &first, 0).unwrap();
    let changed = message(&"This closing part was rewritten entirely. ".repeat(40));
    let a = m.account(Endpoint::Chat, &changed, 1_000).unwrap();
    assert_eq!(a.cache_read % 128, 0);
    assert!(a.cache_read < first_a.input_tokens);
    let share = a.cache_read as f64 / first_a.input_tokens as f64;
    assert!(
        (0.8..0.95).contains(&share),
        "read {share:.2} of the first prompt"
    );
}

/// GPT-5.6 and later (openai-python `PromptCacheOptions`): by default one implicit
/// breakpoint; reads are exact, not rounded to 128 tokens; writes are reported as
/// `cache_write_tokens`, inside `prompt_tokens` / `input_tokens`.
#[test]
fn gpt_5_6_implicit_mode_writes_the_prompt_and_reports_cache_write_tokens() {
    let mut m = CacheModel::default();
    let mut req = chat(2000, Some("s"));
    req["model"] = json!("gpt-5.6");
    let first = m.account(Endpoint::Chat, &req, 0).unwrap();
    assert_eq!(
        (first.cache_read, first.cache_write_30m),
        (0, first.input_tokens)
    );
    let again = m.account(Endpoint::Chat, &req, 1_000).unwrap();
    assert_eq!(
        (again.cache_read, again.cache_write()),
        (first.input_tokens, 0)
    );
    let mut longer = req.clone();
    let msgs = longer["messages"].as_array_mut().unwrap();
    msgs.push(json!({"role": "assistant", "content": "hi"}));
    msgs.push(json!({"role": "user", "content": "more"}));
    let b = m.account(Endpoint::Chat, &longer, 2_000).unwrap();
    assert_eq!(
        b.cache_read, first.input_tokens,
        "an exact read, not rounded to 128"
    );
    assert_eq!(b.cache_write_30m, b.input_tokens - b.cache_read);
    let usage = b.chat_usage_json(1);
    assert_eq!(
        usage["prompt_tokens_details"]["cache_write_tokens"],
        b.cache_write_30m
    );
    assert_eq!(usage["prompt_tokens"], b.input_tokens);
    let u = crate::providers::usage::from_openai_chat(&usage);
    assert_eq!(
        (u.cache_read, u.cache_write),
        (b.cache_read, b.cache_write_30m)
    );
    assert_eq!(u.total_input(), b.input_tokens);
}

fn developer_breakpoint(model: &str, mode: Option<&str>, question: &str) -> Value {
    let mut req = json!({
        "model": model,
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "Project rules. ".repeat(700),
                 "prompt_cache_breakpoint": {"mode": "explicit"}}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
        ]
    });
    if let Some(mode) = mode {
        req["prompt_cache_options"] = json!({"mode": mode, "ttl": "30m"});
    }
    req
}

/// `explicit` mode: "OpenAI does not create an implicit breakpoint and writes up to the
/// latest four explicit breakpoints. If there are no explicit breakpoints, the request does
/// not use prompt caching." A breakpoint "marks the exact end of a reusable prompt prefix".
#[test]
fn gpt_5_6_explicit_mode_writes_only_at_breakpoints() {
    let mut m = CacheModel::default();
    let q1 = developer_breakpoint("gpt-5.6", Some("explicit"), &"first question ".repeat(300));
    let a = m.account(Endpoint::Responses, &q1, 0).unwrap();
    let prefix = a.detail.markers[0].prefix_tokens;
    assert_eq!(a.detail.markers.len(), 1);
    assert_eq!((a.cache_read, a.cache_write_30m), (0, prefix));
    assert!(prefix < a.input_tokens);
    let q2 = developer_breakpoint("gpt-5.6", Some("explicit"), "second question");
    let b = m.account(Endpoint::Responses, &q2, 1_000).unwrap();
    assert_eq!((b.cache_read, b.cache_write_30m), (prefix, 0));
    let usage = b.responses_usage_json(2);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], prefix);
    assert_eq!(usage["input_tokens_details"]["cache_write_tokens"], 0);

    // No breakpoint in explicit mode: no caching at all, even on a repeat.
    let mut bare = q2.clone();
    bare["input"][0]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("prompt_cache_breakpoint");
    for t in [2_000, 3_000] {
        let c = m.account(Endpoint::Responses, &bare, t).unwrap();
        assert_eq!((c.cache_read, c.cache_write()), (0, 0));
    }
}

/// Four writes at most: `explicit` writes the latest four breakpoints, `implicit` the
/// latest three plus its implicit one.
#[test]
fn gpt_5_6_writes_at_most_four_breakpoints() {
    let mut parts: Vec<Value> = (0..6)
        .map(|i| {
            json!({"type": "text", "text": format!("section {i} ").repeat(400),
            "prompt_cache_breakpoint": {"mode": "explicit"}})
        })
        .collect();
    parts.push(json!({"type": "text", "text": "the question"}));
    let req = |mode: &str| {
        json!({"model": "gpt-5.6", "prompt_cache_options": {"mode": mode},
        "messages": [{"role": "user", "content": parts}]})
    };
    let mut m = CacheModel::default();
    let explicit = m.account(Endpoint::Chat, &req("explicit"), 0).unwrap();
    assert_eq!(explicit.detail.markers.len(), 4);
    let mut m = CacheModel::default();
    let implicit = m.account(Endpoint::Chat, &req("implicit"), 0).unwrap();
    assert_eq!(implicit.detail.markers.len(), 4);
    assert_eq!(
        implicit.detail.markers.last().unwrap().prefix_tokens,
        implicit.input_tokens
    );
    let bad = json!({"model": "gpt-5.6", "prompt_cache_options": {"mode": "sometimes"},
        "messages": [{"role": "user", "content": "x"}]});
    assert!(m.account(Endpoint::Chat, &bad, 1).is_err());
}

/// Models before GPT-5.6 take no breakpoints and bill no writes.
#[test]
fn models_before_gpt_5_6_ignore_breakpoints_and_report_no_writes() {
    let mut m = CacheModel::default();
    let q = developer_breakpoint("gpt-5", None, "a question");
    let a = m.account(Endpoint::Responses, &q, 0).unwrap();
    assert_eq!(a.cache_write(), 0);
    assert!(a.detail.markers.is_empty());
    let b = m.account(Endpoint::Responses, &q, 1_000).unwrap();
    assert_eq!(b.cache_read, b.input_tokens / 128 * 128);
}

#[test]
fn responses_input_and_instructions_are_cached_too() {
    let mut m = CacheModel::default();
    let req = json!({
        "model": "gpt-5",
        "instructions": "context ".repeat(1500),
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "prompt_cache_key": "s1"
    });
    m.account(Endpoint::Responses, &req, 0).unwrap();
    let a = m.account(Endpoint::Responses, &req, 1).unwrap();
    assert!(a.cache_read >= 1024 && a.cache_read % 128 == 0);
    let usage = a.responses_usage_json(3);
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], a.cache_read);
    assert_eq!(usage["input_tokens"], a.input_tokens);
}

#[test]
fn extended_retention_keeps_entries_for_a_day() {
    let mut m = CacheModel::default();
    let mut req = chat(2000, Some("r"));
    req["prompt_cache_retention"] = json!("24h");
    m.account(Endpoint::Chat, &req, 0).unwrap();
    let hour = 3_600_000;
    assert!(
        m.account(Endpoint::Chat, &req, 20 * hour)
            .unwrap()
            .cache_read
            > 0
    );
    assert_eq!(
        m.account(Endpoint::Chat, &chat(2000, Some("r")), 45 * hour)
            .unwrap()
            .cache_read,
        0
    );
}

/// `prompt_cache_options.ttl` on Responses takes `30m` (the default) and `12h`: "The
/// minimum lifetime applied to every implicit and explicit cache breakpoint written by the
/// request. Supported values are `30m` (the default) and `12h`" (openai-python 3.57,
/// `responses.response_create_params.PromptCacheOptions`). Chat Completions takes `30m`
/// only (`chat.completion_create_params.PromptCacheOptions`: "currently the only supported
/// value"). Responses reports the writes by lifetime in
/// `input_tokens_details.cache_write_tokens_details` (`ttl_30m_tokens`, `ttl_12h_tokens`:
/// `responses.response_usage.InputTokensDetailsCacheWriteTokensDetails`).
#[test]
fn a_twelve_hour_ttl_keeps_what_it_writes_half_a_day_and_reports_it_apart() {
    let hour = 3_600_000;
    let request = |ttl: &str| {
        let mut req = developer_breakpoint("gpt-6.2-sol", None, "What changed?");
        req["prompt_cache_options"] = json!({"ttl": ttl});
        req
    };
    let mut m = CacheModel::default();
    let first = m.account(Endpoint::Responses, &request("12h"), 0).unwrap();
    assert!(first.cache_write_12h > 0);
    assert_eq!(first.cache_write_30m, 0);
    assert_eq!(first.cache_write(), first.cache_write_12h);
    assert!(first.detail.markers.iter().all(|m| m.ttl == "12h"));
    let usage = first.usage_json(Endpoint::Responses, 5);
    let details = &usage["input_tokens_details"];
    assert_eq!(details["cache_write_tokens"], first.cache_write_12h);
    assert_eq!(
        details["cache_write_tokens_details"],
        json!({"ttl_30m_tokens": 0, "ttl_12h_tokens": first.cache_write_12h})
    );
    let read = crate::providers::usage::from_openai_responses(&usage);
    assert_eq!(read, first.usage(5));
    assert_eq!(read.cache_write_12h, first.cache_write_12h);

    // Three idle hours: past the 30-minute ttl and the ten idle minutes, within twelve hours.
    let later = m
        .account(Endpoint::Responses, &request("12h"), 3 * hour)
        .unwrap();
    assert!(later.cache_read >= first.cache_write_12h);
    let mut short = CacheModel::default();
    short
        .account(Endpoint::Responses, &request("30m"), 0)
        .unwrap();
    let expired = short
        .account(Endpoint::Responses, &request("30m"), 3 * hour)
        .unwrap();
    assert_eq!(expired.cache_read, 0);
    assert!(expired.cache_write_30m > 0 && expired.cache_write_12h == 0);
    // Past twelve idle hours, a 12-hour entry is gone too.
    let gone = m
        .account(Endpoint::Responses, &request("12h"), 16 * hour)
        .unwrap();
    assert_eq!(gone.cache_read, 0);

    let mut chat_req = chat(2000, Some("r"));
    chat_req["model"] = json!("gpt-6.2-sol");
    chat_req["prompt_cache_options"] = json!({"ttl": "12h"});
    let refused = m.account(Endpoint::Chat, &chat_req, 0).unwrap_err();
    assert!(
        refused.message.contains("prompt_cache_options.ttl"),
        "{refused:?}"
    );
    let mut bad = request("1h");
    bad["prompt_cache_options"] = json!({"ttl": "1h"});
    assert!(m.account(Endpoint::Responses, &bad, 0).is_err());
}

/// OpenAI fast mode (`service_tier: "fast"` or `"priority"`) caches apart from the standard
/// tier: `service_tier_changed` is a reason the Responses `prompt_cache_diagnostics` give for
/// a miss (openai-python 3.57). The answer says `priority` whichever word asked for it; a
/// model without fast mode (gpt-4o here) serves both at the standard tier, with one cache.
#[test]
fn the_fast_tier_reads_only_what_it_cached() {
    let mut m = CacheModel::default();
    let at = |tier: Option<&str>, model: &str| {
        let mut req = chat(2000, Some("s"));
        req["model"] = json!(model);
        if let Some(tier) = tier {
            req["service_tier"] = json!(tier);
        }
        req
    };
    let sol = "gpt-6.2-sol";
    let first = m
        .account(Endpoint::Chat, &at(Some("fast"), sol), 0)
        .unwrap();
    assert!(first.fast);
    assert_eq!(first.openai_service_tier(), "priority");
    let again = m
        .account(Endpoint::Chat, &at(Some("priority"), sol), 1)
        .unwrap();
    assert!(again.cache_read > 0);
    let standard = m.account(Endpoint::Chat, &at(None, sol), 2).unwrap();
    assert_eq!((standard.cache_read, standard.fast), (0, false));
    assert_eq!(standard.openai_service_tier(), "default");
    let auto = m
        .account(Endpoint::Chat, &at(Some("auto"), sol), 3)
        .unwrap();
    assert!(
        auto.cache_read > 0 && !auto.fast,
        "auto is the standard tier here"
    );
    m.account(Endpoint::Chat, &at(Some("priority"), "gpt-4o"), 4)
        .unwrap();
    let gpt4o = m.account(Endpoint::Chat, &at(None, "gpt-4o"), 5).unwrap();
    assert!(gpt4o.cache_read > 0 && !gpt4o.fast);
}

/// Flex processing (`service_tier: "flex"`) caches apart from the standard tier and from
/// fast mode, as fast mode does (`service_tier_changed` is a reason of the Responses
/// `prompt_cache_diagnostics` for any change of tier), and is answered `flex`.
#[test]
fn the_flex_tier_reads_only_what_it_cached() {
    let mut m = CacheModel::default();
    let at = |tier: Option<&str>| {
        let mut req = chat(2000, Some("s"));
        req["model"] = json!("o4-mini");
        if let Some(tier) = tier {
            req["service_tier"] = json!(tier);
        }
        req
    };
    let first = m.account(Endpoint::Chat, &at(Some("flex")), 0).unwrap();
    assert!(first.flex && !first.fast && first.cache_read == 0);
    assert_eq!(first.openai_service_tier(), "flex");
    assert!(first.usage(1).flex);
    let again = m.account(Endpoint::Chat, &at(Some("flex")), 1).unwrap();
    assert!(again.cache_read > 0);
    let standard = m.account(Endpoint::Chat, &at(None), 2).unwrap();
    assert_eq!((standard.cache_read, standard.flex), (0, false));
    assert_eq!(standard.openai_service_tier(), "default");
    let back = m.account(Endpoint::Chat, &at(Some("flex")), 3).unwrap();
    assert!(back.cache_read > 0, "the flex cache is still there");
}
