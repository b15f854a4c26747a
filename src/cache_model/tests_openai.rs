//! OpenAI automatic caching on the cache model.

use serde_json::{json, Value};

use super::{CacheModel, CacheModelConfig};
use crate::providers::Endpoint;

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

#[test]
fn prompt_cache_key_partitions_and_idle_entries_expire() {
    let mut m = CacheModel::new(CacheModelConfig {
        openai_idle_secs: 60,
        ..Default::default()
    });
    m.account(Endpoint::Chat, &chat(2000, Some("a")), 0)
        .unwrap();
    assert_eq!(
        m.account(Endpoint::Chat, &chat(2000, Some("b")), 1)
            .unwrap()
            .cache_read,
        0
    );
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
