//! The documented Anthropic examples, reproduced on the cache model.

use serde_json::{json, Value};

use super::{Accounting, CacheModel};
use crate::route::Endpoint;

const SONNET: &str = "claude-sonnet-4-5"; // minimum 1024 tokens

/// About 300 tokens of distinct text.
fn text(i: usize) -> String {
    format!("block {i}: {}", "lorem ipsum dolor sit amet ".repeat(60))
}

/// One user message with `n` text blocks; `marked` lists 1-based block numbers to mark.
fn blocks_request(n: usize, marked: &[usize], changed: Option<usize>) -> Value {
    let content: Vec<Value> = (1..=n)
        .map(|i| {
            let body = if changed == Some(i) {
                format!("CHANGED {}", text(i))
            } else {
                text(i)
            };
            let mut b = json!({"type": "text", "text": body});
            if marked.contains(&i) {
                b["cache_control"] = json!({"type": "ephemeral"});
            }
            b
        })
        .collect();
    json!({"model": SONNET, "max_tokens": 10, "messages": [{"role": "user", "content": content}]})
}

fn run(model: &mut CacheModel, req: &Value, now_ms: u64) -> Accounting {
    model.account(Endpoint::Messages, req, now_ms).unwrap()
}

/// Cumulative tokens of the first `k` blocks of `blocks_request`.
fn prefix_tokens(k: usize) -> u64 {
    (1..=k).map(|i| crate::tokens::count(&text(i))).sum()
}

#[test]
fn first_call_writes_the_marked_prefix_and_a_repeat_reads_it() {
    let mut m = CacheModel::default();
    let req = blocks_request(10, &[10], None);
    let first = run(&mut m, &req, 0);
    assert_eq!(first.cache_read, 0);
    assert_eq!(first.cache_write_5m, prefix_tokens(10));
    assert_eq!(first.uncached(), 0);
    let second = run(&mut m, &req, 1_000);
    assert_eq!(second.cache_read, prefix_tokens(10));
    assert_eq!(second.cache_write(), 0);
    assert_eq!(second.detail.hit_block, Some(9));
}

#[test]
fn thirty_blocks_change_at_25_reads_up_to_24() {
    let mut m = CacheModel::default();
    run(&mut m, &blocks_request(30, &[30], None), 0);
    let a = run(&mut m, &blocks_request(30, &[30], Some(25)), 1_000);
    assert_eq!(a.cache_read, prefix_tokens(24));
    assert_eq!(a.cache_write_5m, a.input_tokens - prefix_tokens(24));
    assert_eq!(a.detail.hit_block, Some(23));
}

#[test]
fn thirty_blocks_change_at_5_reads_nothing_past_the_lookback() {
    let mut m = CacheModel::default();
    run(&mut m, &blocks_request(30, &[30], None), 0);
    let a = run(&mut m, &blocks_request(30, &[30], Some(5)), 1_000);
    assert_eq!(a.cache_read, 0);
    assert_eq!(a.cache_write_5m, a.input_tokens);
}

#[test]
fn thirty_blocks_change_at_5_reads_up_to_4_when_block_5_has_a_marker() {
    let mut m = CacheModel::default();
    assert!(prefix_tokens(4) >= 1024);
    run(&mut m, &blocks_request(30, &[5, 30], None), 0);
    let a = run(&mut m, &blocks_request(30, &[5, 30], Some(5)), 1_000);
    assert_eq!(a.cache_read, prefix_tokens(4));
    assert_eq!(a.cache_write_5m, a.input_tokens - prefix_tokens(4));
}

#[test]
fn a_prompt_under_the_model_minimum_caches_nothing() {
    let mut m = CacheModel::default();
    let mut req = blocks_request(10, &[10], None); // ~3000 tokens
    req["model"] = json!("claude-haiku-4-5"); // minimum 4096
    let first = run(&mut m, &req, 0);
    let second = run(&mut m, &req, 1_000);
    assert_eq!(
        (first.cache_write(), second.cache_read, second.cache_write()),
        (0, 0, 0)
    );
    assert_eq!(second.uncached(), prefix_tokens(10));
    req["model"] = json!(SONNET);
    assert_eq!(run(&mut m, &req, 2_000).cache_write_5m, prefix_tokens(10));
}

#[test]
fn an_entry_expires_after_its_ttl_and_a_read_refreshes_it() {
    let mut m = CacheModel::default();
    let req = blocks_request(10, &[10], None);
    let min = 60_000;
    run(&mut m, &req, 0);
    assert!(run(&mut m, &req, 4 * min).cache_read > 0);
    // 8 minutes after the write, but 4 after the refreshing read.
    assert!(run(&mut m, &req, 8 * min).cache_read > 0);
    // More than 5 minutes idle: gone, written again.
    let late = run(&mut m, &req, 14 * min);
    assert_eq!(late.cache_read, 0);
    assert_eq!(late.cache_write_5m, prefix_tokens(10));
}

#[test]
fn one_hour_markers_outlive_five_minutes() {
    let mut m = CacheModel::default();
    let mut req = blocks_request(10, &[10], None);
    req["messages"][0]["content"][9]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    assert_eq!(run(&mut m, &req, 0).cache_write_1h, prefix_tokens(10));
    assert_eq!(run(&mut m, &req, 50 * 60_000).cache_read, prefix_tokens(10));
}

#[test]
fn a_fifth_marker_is_refused() {
    let mut m = CacheModel::default();
    let err = m
        .account(
            Endpoint::Messages,
            &blocks_request(10, &[1, 2, 3, 4, 5], None),
            0,
        )
        .unwrap_err();
    assert_eq!(err.status().as_u16(), 400);
    assert!(err.message.contains("maximum of 4"), "{}", err.message);
    assert!(m
        .account(
            Endpoint::Messages,
            &blocks_request(10, &[1, 2, 3, 4], None),
            0
        )
        .is_ok());
    let mut auto = blocks_request(10, &[1, 2, 3, 4], None);
    auto["cache_control"] = json!({"type": "ephemeral"});
    assert!(m.account(Endpoint::Messages, &auto, 0).is_err());
}

#[test]
fn one_hour_after_five_minutes_is_refused() {
    let mut m = CacheModel::default();
    let mut req = blocks_request(10, &[3, 10], None);
    req["messages"][0]["content"][9]["cache_control"]["ttl"] = json!("1h");
    assert!(m.account(Endpoint::Messages, &req, 0).is_err());
}

#[test]
fn top_level_cache_control_marks_the_last_block() {
    let mut m = CacheModel::default();
    let mut req = blocks_request(10, &[], None);
    req["cache_control"] = json!({"type": "ephemeral"});
    let first = run(&mut m, &req, 0);
    assert_eq!(first.detail.markers.len(), 1);
    assert_eq!(first.detail.markers[0].block, 9);
    assert_eq!(run(&mut m, &req, 1).cache_read, prefix_tokens(10));
}

#[test]
fn mixed_ttls_bill_read_then_1h_then_5m() {
    let mut m = CacheModel::default();
    let mut req = blocks_request(12, &[4, 8, 12], None);
    req["messages"][0]["content"][3]["cache_control"]["ttl"] = json!("1h");
    req["messages"][0]["content"][7]["cache_control"]["ttl"] = json!("1h");
    let first = run(&mut m, &req, 0);
    assert_eq!(first.cache_read, 0);
    assert_eq!(first.cache_write_1h, prefix_tokens(8));
    assert_eq!(first.cache_write_5m, prefix_tokens(12) - prefix_tokens(8));
    // Blocks 9..12 change: A = block 8 (read), nothing new at 1h, 5m-write 9..12.
    let mut changed = req.clone();
    changed["messages"][0]["content"][10]["text"] = json!("other");
    let second = run(&mut m, &changed, 1_000);
    assert_eq!(second.cache_read, prefix_tokens(10));
    assert_eq!(second.cache_write_1h, 0);
    let json = second.anthropic_usage_json(7);
    assert_eq!(json["cache_read_input_tokens"], second.cache_read);
    assert_eq!(
        json["cache_creation"]["ephemeral_5m_input_tokens"],
        second.cache_write_5m
    );
    assert_eq!(json["input_tokens"], second.uncached());
    assert_eq!(json["output_tokens"], 7);
}

fn conversation(first_user: Value, billing_nonce: &str) -> Value {
    json!({
        "model": SONNET, "max_tokens": 10,
        "system": [
            {"type": "text", "text": format!("x-anthropic-billing-header: cc_version=1; nonce={billing_nonce}")},
            {"type": "text", "text": text(100), "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": first_user},
            {"role": "assistant", "content": [{"type": "text", "text": text(101)}]},
            {"role": "user", "content": [{"type": "text", "text": text(102), "cache_control": {"type": "ephemeral"}}]}
        ]
    })
}

#[test]
fn string_content_equals_a_text_block_and_billing_header_is_not_keyed() {
    let mut m = CacheModel::default();
    let as_block =
        json!([{"type": "text", "text": text(7), "cache_control": {"type": "ephemeral"}}]);
    let first = run(&mut m, &conversation(as_block, "aaaa"), 0);
    assert!(first.cache_write_5m > 0);
    // Field order inside a block is not part of the key either.
    let reordered = json!([{"text": text(7), "type": "text"}]);
    let again = run(&mut m, &conversation(reordered, "cccc"), 500);
    assert_eq!(again.cache_write(), 0);
    let as_string = json!(text(7));
    let second = run(&mut m, &conversation(as_string, "bbbb"), 1_000);
    let billing = crate::tokens::count("x-anthropic-billing-header: cc_version=1; nonce=bbbb");
    assert_eq!(second.cache_read + billing, second.input_tokens);
    assert_eq!(second.uncached(), billing);
}

fn tooled(tool_desc: &str, tool_choice: Value, model: &str) -> Value {
    let mut req = blocks_request(6, &[6], None);
    req["model"] = json!(model);
    req["tools"] =
        json!([{"name": "read", "description": tool_desc, "input_schema": {"type": "object"}}]);
    req["system"] = json!([{"type": "text", "text": text(50).repeat(4), "cache_control": {"type": "ephemeral"}}]);
    if !tool_choice.is_null() {
        req["tool_choice"] = tool_choice;
    }
    req
}

#[test]
fn invalidation_levels_tools_all_tool_choice_messages_model_everything() {
    let system_end = |a: &Accounting| a.detail.markers[0].prefix_tokens;
    let mut m = CacheModel::default();
    let base = tooled("reads a file", Value::Null, SONNET);
    run(&mut m, &base, 0);
    assert_eq!(run(&mut m, &base, 1).cache_write(), 0);
    // tool_choice: system still read, messages rewritten.
    let choice = tooled("reads a file", json!({"type": "any"}), SONNET);
    let a = run(&mut m, &choice, 2);
    assert_eq!(a.cache_read, system_end(&a));
    assert!(a.cache_write_5m > 0);
    // A tool change invalidates everything.
    let b = run(
        &mut m,
        &tooled("reads a file, faster", Value::Null, SONNET),
        3,
    );
    assert_eq!(b.cache_read, 0);
    // So does another model.
    let c = run(
        &mut m,
        &tooled("reads a file", Value::Null, "claude-sonnet-4-0"),
        4,
    );
    assert_eq!(c.cache_read, 0);
}

#[test]
fn count_tokens_matches_the_accounting_total() {
    let req = blocks_request(5, &[5], None);
    let total = CacheModel::count_tokens(Endpoint::CountTokens, &req).unwrap();
    assert_eq!(total, prefix_tokens(5));
    let bad = json!({"model": SONNET, "messages": "nope"});
    assert!(CacheModel::count_tokens(Endpoint::CountTokens, &bad).is_err());
}

#[test]
fn thinking_settings_and_images_invalidate_messages_only() {
    let mut m = CacheModel::default();
    let base = tooled("reads a file", Value::Null, SONNET);
    let system_end = run(&mut m, &base, 0).detail.markers[0].prefix_tokens;
    let mut thinking = base.clone();
    thinking["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    let a = run(&mut m, &thinking, 1);
    assert_eq!((a.cache_read, a.detail.hit_block), (system_end, Some(1)));
    let mut image = base.clone();
    let content = image["messages"][0]["content"].as_array_mut().unwrap();
    content.push(json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}));
    let b = run(&mut m, &image, 2);
    assert_eq!(b.cache_read, system_end);
    assert_eq!(
        b.input_tokens,
        run(&mut m, &base, 3).input_tokens + super::tokens::IMAGE_TOKENS
    );
}

#[test]
fn a_new_user_turn_with_thinking_drops_earlier_thinking_and_what_follows_it() {
    let mut m = CacheModel::default();
    let system = json!([{"type": "text", "text": text(60).repeat(4), "cache_control": {"type": "ephemeral"}}]);
    let marked =
        |t: &str| json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}});
    let history = json!([
        {"role": "user", "content": text(61)},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": text(62), "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
    ]);
    let mut messages = history.as_array().unwrap().clone();
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": text(63), "cache_control": {"type": "ephemeral"}}]}));
    let req = |messages: &Vec<Value>| {
        json!({"model": SONNET, "max_tokens": 10,
        "thinking": {"type": "enabled", "budget_tokens": 2048}, "system": system, "messages": messages})
    };
    let tool_turn = run(&mut m, &req(&messages), 0);
    assert!(
        tool_turn.input_tokens > prefix_tokens(1) * 5,
        "thinking is kept inside a tool loop"
    );
    // A new user prompt: thinking is stripped, so only system + the first user message match.
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]}));
    messages.push(json!({"role": "user", "content": [marked("next question")]}));
    let next = run(&mut m, &req(&messages), 1);
    assert_eq!(next.detail.hit_block, Some(1));
    let system_and_first = next.detail.markers[0].prefix_tokens + crate::tokens::count(&text(61));
    assert_eq!(next.cache_read, system_and_first);
}

#[test]
fn counting_whole_messages_as_blocks_reads_only_at_message_ends() {
    let mut m = CacheModel::new(super::CacheModelConfig {
        block_unit: super::BlockUnit::Message,
        ..Default::default()
    });
    run(&mut m, &blocks_request(30, &[30], None), 0);
    assert_eq!(
        run(&mut m, &blocks_request(30, &[30], None), 1).cache_read,
        prefix_tokens(30)
    );
    // Inside one message there is no boundary to fall back to.
    assert_eq!(
        run(&mut m, &blocks_request(30, &[30], Some(25)), 2).cache_read,
        0
    );
}

/// Server-side compaction (platform.claude.com, Compaction): once the prompt reaches the
/// `compact_20260112` edit's trigger, the request is sampled twice, the compaction over
/// the prompt as sent and the answer over its summary; from then on the provider ignores
/// every block before the `compaction` block the client sends back, whether the client
/// keeps the earlier messages or drops them. `count_tokens` applies existing compaction
/// blocks and starts none. A trigger below 50,000 is a 400.
#[test]
fn a_compaction_samples_twice_and_the_summary_is_what_stays_cached() {
    let system: String = (0..5).map(text).collect();
    let conversation = |turns: usize| {
        let mut messages = Vec::new();
        for i in 0..turns {
            messages.push(json!({"role": "user", "content": text(i)}));
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
        }
        messages.push(json!({"role": "user", "content": [
            {"type": "text", "text": text(turns), "cache_control": {"type": "ephemeral"}}]}));
        messages
    };
    let request = |messages: Vec<Value>, trigger: u64| {
        json!({"model": SONNET, "max_tokens": 10,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "context_management": {"edits": [{"type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": trigger}}]},
            "messages": messages})
    };
    let count = |req: &Value| CacheModel::count_tokens(Endpoint::Messages, req).unwrap();
    let trigger = count(&request(conversation(171), 0));
    assert!(trigger >= 50_000, "the trigger's minimum: {trigger}");

    let mut m = CacheModel::default();
    let before = run(&mut m, &request(conversation(170), trigger), 0);
    assert!(before.compaction.is_none(), "under the trigger");
    let compacted = run(&mut m, &request(conversation(171), trigger), 1_000);
    let compaction = compacted.compaction.as_deref().expect("at the trigger");
    assert_eq!(compaction.sampling.input_tokens, trigger);
    assert_eq!(
        compaction.sampling.cache_read, before.input_tokens,
        "the compaction read the prompt the previous request cached"
    );
    let system_tokens = crate::tokens::count(&system);
    assert_eq!(
        compacted.cache_read, system_tokens,
        "the answer ran on the summary"
    );
    assert!(compacted.input_tokens < system_tokens + 100);
    let usage = compacted.usage(7);
    assert_eq!(
        usage.total_input(),
        compaction.sampling.input_tokens + compacted.input_tokens,
        "both samplings are billed"
    );
    assert_eq!(usage.prompt_read(), compaction.sampling.cache_read);
    assert_eq!(usage.left_cached(), system_tokens);

    let block = json!({"type": "compaction", "content": compaction.summary});
    let answer =
        json!({"role": "assistant", "content": [block, {"type": "text", "text": "Done."}]});
    let next = json!({"role": "user", "content": [
        {"type": "text", "text": text(999), "cache_control": {"type": "ephemeral"}}]});
    let mut kept = conversation(171);
    kept.extend([answer.clone(), next.clone()]);
    let dropped = vec![answer, next];
    let mut other = m.clone();
    let (kept, dropped) = (request(kept, trigger), request(dropped, trigger));
    let a = run(&mut m, &kept, 2_000);
    let b = run(&mut other, &dropped, 2_000);
    assert_eq!(
        (a.input_tokens, a.cache_read),
        (b.input_tokens, b.cache_read)
    );
    assert!(a.compaction.is_none() && a.input_tokens < trigger / 10);
    assert_eq!(a.cache_read, system_tokens);
    assert_eq!(count(&kept), a.input_tokens);

    for bad in [
        json!({"type": "input_tokens", "value": 1000}),
        json!({"type": "tool_uses", "value": 60_000}),
    ] {
        let mut req = request(conversation(1), 0);
        req["context_management"]["edits"][0]["trigger"] = bad;
        let err = CacheModel::default()
            .account(Endpoint::Messages, &req, 0)
            .unwrap_err();
        assert!(err.message.contains("trigger"), "{}", err.message);
    }
}

/// Tool-result clearing (platform.claude.com, Context editing: `clear_tool_uses_20250919`
/// "clears the oldest tool results in chronological order", keeping `keep` tool uses, and
/// "invalidates cached prompt prefixes when content is cleared"): past the trigger the
/// prompt the cache sees has the older results replaced, so a request reads only up to the
/// first result cleared since the previous one; results cleared once stay cleared, so the
/// next request reads further. `exclude_tools` are never cleared; below `clear_at_least`
/// the edit is not applied.
#[test]
fn clearing_old_tool_results_cuts_the_cached_prefix_where_it_clears() {
    let system: String = (0..5).map(text).collect();
    let loop_of = |steps: usize| {
        let mut messages = vec![json!({"role": "user", "content": "Read the modules."})];
        for i in 0..steps {
            let id = format!("toolu_{i:04}");
            let name = if i == 0 { "Memory" } else { "Read" };
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": name, "input": {"path": format!("src/m{i}.rs")}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": text(100 + i)}]}));
        }
        if let Some(last) = messages.last_mut() {
            last["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        }
        messages
    };
    let request = |steps: usize, edit: Value| {
        json!({"model": SONNET, "max_tokens": 10,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "context_management": {"edits": [edit]},
            "messages": loop_of(steps)})
    };
    let edit = json!({"type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 4}, "keep": {"type": "tool_uses", "value": 2},
        "exclude_tools": ["Memory"]});
    let mut m = CacheModel::default();
    let mut before = run(&mut m, &request(4, edit.clone()), 0);
    assert_eq!(before.cleared, None, "at the trigger, not past it");
    for (steps, cleared) in [(5, 2), (6, 3)] {
        let a = run(&mut m, &request(steps, edit.clone()), 1_000 * steps as u64);
        let c = a.cleared.expect("past the trigger");
        assert_eq!(c.tool_uses, cleared, "all but the last two, never Memory");
        assert!(c.input_tokens > 250 * cleared, "{c:?}");
        let unedited =
            CacheModel::count_tokens(Endpoint::Messages, &request(steps, json!({}))).unwrap();
        assert_eq!(a.input_tokens + c.input_tokens, unedited);
        assert!(
            a.cache_read < before.cache_read + before.cache_write(),
            "the prefix breaks at the newly cleared result"
        );
        assert!(a.cache_read > crate::tokens::count(&system));
        assert_eq!(a.usage(1).cleared, Some(c));
        before = a;
    }

    let mut least = edit.clone();
    least["clear_at_least"] = json!({"type": "input_tokens", "value": 1_000_000});
    let a = run(&mut CacheModel::default(), &request(6, least), 0);
    assert_eq!(a.cleared, None, "too little to clear");

    let mut bad = edit;
    bad["keep"] = json!({"type": "input_tokens", "value": 3});
    let err = CacheModel::default()
        .account(Endpoint::Messages, &request(6, bad), 0)
        .unwrap_err();
    assert!(err.message.contains("keep.type"), "{}", err.message);
}

/// A request can both clear tool results and compact: the bill keeps what was cleared
/// beside the compaction's sampling.
#[test]
fn a_compacted_request_keeps_what_its_clearing_cleared() {
    let mut messages = vec![json!({"role": "user", "content": "Read every module."})];
    for i in 0..200 {
        let id = format!("toolu_{i:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Read", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": text(i)}]}));
    }
    let req = json!({"model": SONNET, "max_tokens": 10, "messages": messages,
        "context_management": {"edits": [
            {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 198},
             "keep": {"type": "tool_uses", "value": 196}},
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}});
    let a = run(&mut CacheModel::default(), &req, 0);
    assert!(a.compaction.is_some());
    let cleared = a.cleared.expect("four results cleared");
    assert_eq!(cleared.tool_uses, 4);
    let usage = a.usage(1);
    assert_eq!(usage.cleared, Some(cleared));
    assert_eq!(usage.iterations.map(|i| i.compactions), Some(1));
}

/// Fast mode is the request's (`speed: "fast"` on a model with a fast-mode price): its
/// usage says so after a compaction sampling as without one, and a model without a fast
/// price answers at the standard speed.
#[test]
fn a_fast_request_stays_fast_through_its_compaction() {
    let request = |model: &str| {
        json!({"model": model, "max_tokens": 10, "speed": "fast",
            "messages": [{"role": "user", "content": "Rename the loader."}]})
    };
    let mut m = CacheModel::default();
    let fast = m
        .account(Endpoint::Messages, &request("claude-opus-5-5"), 0)
        .unwrap();
    assert!(fast.fast && fast.usage(3).fast);
    assert_eq!(fast.usage_json(Endpoint::Messages, 3)["speed"], "fast");
    let mut compacted = fast.clone();
    compacted.compaction = Some(Box::new(super::Compaction {
        sampling: fast.clone(),
        summary: "summary".into(),
        output_tokens: 2,
    }));
    let usage = compacted.usage(3);
    assert!(usage.fast && usage.iterations.is_some());
    let json = compacted.usage_json(Endpoint::Messages, 3);
    assert_eq!(json["speed"], "fast");
    assert!(json["iterations"][0].get("speed").is_none());
    let standard = m.account(Endpoint::Messages, &request(SONNET), 0).unwrap();
    assert!(!standard.fast);
    assert_eq!(
        standard.usage_json(Endpoint::Messages, 3)["speed"],
        "standard"
    );
}

/// "Switching between fast and standard speed invalidates the prompt cache": each speed
/// caches apart (fast mode docs, as kb.kakadata.com copies them; octavus.ai: "falling back
/// to standard speed is a prompt-cache miss"). A model without fast mode serves both at
/// standard speed, so they share one cache.
#[test]
fn each_speed_reads_only_what_it_cached() {
    let mut model = CacheModel::default();
    let at = |speed: &str, model_name: &str| {
        let mut req = blocks_request(6, &[6], None);
        req["model"] = json!(model_name);
        req["speed"] = json!(speed);
        req
    };
    let opus = "claude-opus-5-5";
    let first = run(&mut model, &at("fast", opus), 0);
    assert!(first.fast && first.cache_write_5m > 0);
    let again = run(&mut model, &at("fast", opus), 1_000);
    assert_eq!(again.cache_read, first.cache_write_5m);
    let standard = run(&mut model, &at("standard", opus), 2_000);
    assert!(!standard.fast);
    assert_eq!(
        standard.cache_read, 0,
        "the fast cache is not read at standard speed"
    );
    assert_eq!(standard.cache_write_5m, first.cache_write_5m);
    // Back to fast: the fast cache is still there.
    assert_eq!(
        run(&mut model, &at("fast", opus), 3_000).cache_read,
        first.cache_read + first.cache_write_5m
    );
    // Sonnet 4.5 has no fast mode: a request asking for it is served, and cached, at standard.
    run(&mut model, &at("fast", SONNET), 4_000);
    let sonnet = run(&mut model, &at("standard", SONNET), 5_000);
    assert!(sonnet.cache_read > 0 && !sonnet.fast);
}
