//! Invariants over arbitrary requests: no panic, and the three kinds of input add up.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::CacheModel;
use crate::route::Endpoint;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        "[a-z ]{0,40}".prop_map(Value::from),
        Just(json!({"type": "ephemeral"})),
        Just(json!({"type": "ephemeral", "ttl": "1h"})),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("type".to_string()),
                        Just("text".to_string()),
                        Just("content".to_string()),
                        Just("cache_control".to_string()),
                        Just("role".to_string()),
                        Just("input".to_string()),
                        Just("prompt_cache_breakpoint".to_string()),
                        Just("mode".to_string()),
                        Just("keep".to_string()),
                        Just("edits".to_string())
                    ],
                    inner
                ),
                0..4
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn text_block() -> impl Strategy<Value = Value> {
    ("[a-z ]{1,400}", prop::option::of(prop_oneof![Just("5m"), Just("1h")])).prop_map(|(t, ttl)| match ttl {
        Some(ttl) => json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral", "ttl": ttl}}),
        None => json!({"type": "text", "text": t}),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_bodies_never_panic(messages in arb_json(), system in arb_json(), tools in arb_json()) {
        let mut m = CacheModel::default();
        let req = json!({"model": "claude-sonnet-4-5", "messages": messages, "system": system, "tools": tools});
        let _ = m.account(Endpoint::Messages, &req, 0);
        let _ = CacheModel::count_tokens(Endpoint::CountTokens, &req);
        let chat = json!({"model": "gpt-4o", "messages": req["messages"].clone(), "tools": req["tools"].clone()});
        let _ = m.account(Endpoint::Chat, &chat, 0);
        let responses = json!({"model": "gpt-5", "input": req["messages"].clone(), "instructions": req["system"].clone()});
        let _ = m.account(Endpoint::Responses, &responses, 0);
        // GPT-5.6 explicit caching, thinking retention and diagnostics on the same input.
        let explicit = json!({"model": "gpt-5.6", "input": req["messages"].clone(),
            "prompt_cache_options": req["tools"].clone()});
        let _ = m.account(Endpoint::Responses, &explicit, 0);
        let thinking = json!({"model": "claude-opus-4-1", "messages": req["messages"].clone(),
            "thinking": {"type": "enabled"}, "context_management": req["system"].clone()});
        let _ = m.account(Endpoint::Messages, &thinking, 0);
        let config = super::CacheModelConfig::default();
        for (endpoint, body) in [(Endpoint::Messages, &req), (Endpoint::Chat, &chat), (Endpoint::Responses, &explicit)] {
            let _ = super::boundaries::Boundaries::of(endpoint, body, &config);
        }
        if let (Ok(a), Ok(b)) = (super::diagnosis::Fingerprint::of(&req), super::diagnosis::Fingerprint::of(&thinking)) {
            let _ = a.diverges_from(&b);
            let _ = b.diverges_from(&a);
        }
    }

    #[test]
    fn reads_writes_and_uncached_add_up(turns in prop::collection::vec(prop::collection::vec(text_block(), 1..8), 1..6)) {
        let mut m = CacheModel::default();
        let mut messages = Vec::new();
        for (i, blocks) in turns.into_iter().enumerate() {
            messages.push(json!({"role": "user", "content": blocks}));
            let req = json!({"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": messages});
            if let Ok(a) = m.account(Endpoint::Messages, &req, i as u64 * 1000) {
                prop_assert_eq!(a.cache_read + a.cache_write() + a.uncached(), a.input_tokens);
                prop_assert!(a.detail.markers.len() <= 4);
                let total = CacheModel::count_tokens(Endpoint::CountTokens, &req).unwrap();
                prop_assert_eq!(total, a.input_tokens);
            }
            messages.push(json!({"role": "assistant", "content": "ok"}));
            let chat = json!({"model": "gpt-4o", "messages": messages});
            let c = m.account(Endpoint::Chat, &chat, i as u64 * 1000).unwrap();
            prop_assert!(c.cache_read % 128 == 0 && c.cache_read <= c.input_tokens);
            prop_assert!(c.cache_read == 0 || c.cache_read >= 1024);
        }
    }
}
