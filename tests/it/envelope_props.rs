//! Property tests over generated payloads of all three APIs, written with arbitrary
//! whitespace, key order, number formats and string escapes: the identity round trip is
//! byte-identical; after any single valid patch every untouched element keeps its bytes;
//! Anthropic `auto` never exceeds 4 markers and never marks the uncached tail.

use bytes::Bytes;
use cachet::envelope::{BreakpointMode, CompileOptions, Ttl};
use cachet::patch::{parse_ops, Op};
use cachet::providers::anthropic::blocks::count_markers;
use cachet::route::Endpoint;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Drives every formatting choice from a random byte string.
struct Style {
    bytes: Vec<u8>,
    at: usize,
}

impl Style {
    fn next(&mut self) -> usize {
        let b = self
            .bytes
            .get(self.at % self.bytes.len().max(1))
            .copied()
            .unwrap_or(0);
        self.at += 1;
        b as usize + self.at / 7
    }

    fn ws(&mut self) -> &'static str {
        ["", "", " ", "\n  ", "\t", " \r\n"][self.next() % 6]
    }

    fn string(&mut self, text: &str) -> String {
        let plain = serde_json::to_string(text).unwrap();
        if self.next().is_multiple_of(2) {
            return plain;
        }
        // The same string with non-ASCII characters and `/` escaped.
        let mut out = String::new();
        for c in plain.chars() {
            match c {
                c if !c.is_ascii() => {
                    let mut buf = [0u16; 2];
                    for u in c.encode_utf16(&mut buf) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                '/' => out.push_str("\\/"),
                c => out.push(c),
            }
        }
        out
    }

    fn number(&mut self, n: i64) -> String {
        match self.next() % 4 {
            0 => n.to_string(),
            1 => format!("{n}.0"),
            2 => format!("{n}e0"),
            _ => format!("{}E+1", n as f64 / 10.0),
        }
    }

    /// Render a JSON value with this style (objects rotate their key order).
    fn render(&mut self, v: &Value) -> String {
        match v {
            Value::String(s) => self.string(s),
            Value::Number(n) => match n.as_i64() {
                Some(i) => self.number(i),
                None => n.to_string(),
            },
            Value::Array(items) => {
                let parts: Vec<String> = items
                    .iter()
                    .map(|i| {
                        let (a, b) = (self.ws(), self.ws());
                        format!("{a}{}{b}", self.render(i))
                    })
                    .collect();
                format!("[{}]", parts.join(","))
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if !entries.is_empty() {
                    let k = self.next() % entries.len();
                    entries.rotate_left(k);
                }
                let parts: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| {
                        let (a, b, c) = (self.ws(), self.ws(), self.ws());
                        format!("{a}{}{b}:{c}{}", self.string(k), self.render(v))
                    })
                    .collect();
                format!("{{{}{}}}", parts.join(","), self.ws())
            }
            other => other.to_string(),
        }
    }
}

const WORDS: &[&str] = &[
    "alpha",
    "β-test",
    "naïve café",
    "path/to/file",
    "line\nbreak",
    "quote \" here",
    "tab\there",
    "日本",
];

/// One generated turn: a plain exchange or a tool call with its result.
#[derive(Debug, Clone)]
struct Turn {
    tool: bool,
    word: usize,
    marked: bool,
}

fn turns() -> impl Strategy<Value = Vec<Turn>> {
    prop::collection::vec(
        (any::<bool>(), 0..WORDS.len(), prop::bool::weighted(0.2))
            .prop_map(|(tool, word, marked)| Turn { tool, word, marked }),
        0..12,
    )
}

fn marker(marked: bool) -> Option<Value> {
    marked.then(|| json!({"type": "ephemeral"}))
}

fn with_marker(mut block: Value, marked: bool) -> Value {
    if let Some(m) = marker(marked) {
        block["cache_control"] = m;
    }
    block
}

fn anthropic_body(turns: &[Turn], string_system: bool) -> Value {
    let mut msgs = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let w = WORDS[t.word];
        if t.tool {
            msgs.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "bash",
                "input": {"z": i, "a": w, "n": [1, 2]}}]}));
            msgs.push(json!({"role": "user", "content": [with_marker(json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": w}), t.marked)]}));
        } else {
            msgs.push(json!({"role": "user", "content": if t.marked { json!([with_marker(json!({"type": "text", "text": w}), true)]) } else { json!(w) }}));
            msgs.push(json!({"role": "assistant", "content": [{"type": "thinking", "thinking": w, "signature": "sig"}, {"type": "text", "text": w}]}));
        }
    }
    msgs.push(json!({"role": "user", "content": "latest prompt"}));
    let system = if string_system {
        json!("System prompt. ".repeat(400))
    } else {
        json!([{"type": "text", "text": "billing nonce"}, with_marker(json!({"type": "text", "text": "System prompt. ".repeat(400)}), true)])
    };
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": system, "temperature": 1,
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}, with_marker(json!({"name": "read", "input_schema": {"type": "object"}}), true)],
        "messages": msgs})
}

fn chat_body(turns: &[Turn]) -> Value {
    let mut msgs = vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "developer", "content": "Extra rules."}),
    ];
    for (i, t) in turns.iter().enumerate() {
        let w = WORDS[t.word];
        if t.tool {
            msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{i}"), "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
            msgs.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": w}));
        } else {
            msgs.push(json!({"role": "user", "content": w}));
            msgs.push(json!({"role": "assistant", "content": w}));
        }
    }
    msgs.push(json!({"role": "user", "content": [{"type": "text", "text": "latest"}]}));
    json!({"model": "gpt-4.1", "messages": msgs, "temperature": 0.5,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]})
}

fn responses_body(turns: &[Turn]) -> Value {
    let mut items = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let w = WORDS[t.word];
        if t.tool {
            items.push(json!({"type": "reasoning", "summary": [], "encrypted_content": "enc"}));
            items.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "bash", "arguments": "{}"}));
            items.push(
                json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": w}),
            );
        } else {
            items.push(json!({"role": "user", "content": w}));
            items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": w}]}));
        }
    }
    items.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "latest"}]}));
    json!({"model": "gpt-5", "instructions": "Be a coding agent.", "input": items, "store": false,
        "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object"}}, {"type": "namespace", "name": "ns", "tools": []}],
        "client_metadata": {"b": "1", "a": "2"}})
}

fn endpoint_of(api: usize) -> Endpoint {
    [Endpoint::Messages, Endpoint::Chat, Endpoint::Responses][api]
}

fn body(api: usize, turns: &[Turn], string_system: bool, style: Vec<u8>) -> Bytes {
    let v = match api {
        0 => anthropic_body(turns, string_system),
        1 => chat_body(turns),
        _ => responses_body(turns),
    };
    let mut style = Style {
        bytes: style,
        at: 0,
    };
    let text = format!("{}{}{}", style.ws(), style.render(&v), style.ws());
    Bytes::from(text)
}

/// What a single op touches.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Touches {
    System,
    Tools,
    History,
    Nothing,
}

fn single_op(kind: usize) -> (Value, Touches) {
    let r = "test";
    match kind {
        0 => (
            json!({"op": "system_part_set", "partName": "memory", "text": "Remember: tabs.", "invalidateCacheReason": r}),
            Touches::System,
        ),
        1 => (
            json!({"op": "system_part_set", "partName": "base", "text": "Replaced.", "invalidateCacheReason": r}),
            Touches::System,
        ),
        2 => (
            json!({"op": "system_part_remove", "partName": "base", "invalidateCacheReason": r}),
            Touches::System,
        ),
        3 => (
            json!({"op": "tools_remove", "names": ["bash"], "invalidateCacheReason": r}),
            Touches::Tools,
        ),
        4 => (
            json!({"op": "tools_replace", "tools": [{"name": "grep", "parameters": {"type": "object"}}], "invalidateCacheReason": r}),
            Touches::Tools,
        ),
        5 => (
            json!({"op": "messages_insert", "at": "before_last_user_prompt", "messages": [{"role": "custom", "content": "Injected."}], "invalidateCacheReason": r}),
            Touches::Nothing,
        ),
        6 => (
            json!({"op": "messages_insert", "at": "index:0", "messages": [{"role": "user", "content": "First."}], "invalidateCacheReason": r}),
            Touches::Nothing,
        ),
        7 => (
            json!({"op": "messages_insert", "at": "end", "messages": [{"role": "assistant", "content": "End."}], "invalidateCacheReason": r}),
            Touches::Nothing,
        ),
        8 => (
            json!({"op": "messages_uncached_append", "messages": [{"role": "user", "content": [{"type": "text", "text": "Now: 10:00"}]}]}),
            Touches::Nothing,
        ),
        9 => (
            json!({"op": "options_set", "options": {"temperature": 0, "top_p": 0.9}}),
            Touches::Nothing,
        ),
        _ => (
            json!({"op": "messages_cached_replace", "messages": [{"role": "user", "content": "Only."}], "invalidateCacheReason": r}),
            Touches::History,
        ),
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Marker TTLs in prompt order.
fn ttls(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let blocks = v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(v["system"].as_array().into_iter().flatten())
        .chain(
            v["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["content"].as_array().into_iter().flatten()),
        );
    for b in blocks {
        if let Some(cc) = b.get("cache_control") {
            out.push(
                cc.get("ttl")
                    .and_then(Value::as_str)
                    .unwrap_or("5m")
                    .to_owned(),
            );
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, .. ProptestConfig::default() })]

    #[test]
    fn identity_round_trip_is_byte_identical(api in 0..3usize, turns in turns(), string_system in any::<bool>(),
                                             style in prop::collection::vec(any::<u8>(), 1..64)) {
        let e = endpoint_of(api);
        let body = body(api, &turns, string_system, style);
        let env = cachet::providers::parse_envelope(e, body.clone()).unwrap();
        prop_assert_eq!(env.compile(&CompileOptions::default()), body);
    }

    #[test]
    fn a_single_valid_patch_keeps_untouched_elements(api in 0..3usize, turns in turns(), string_system in any::<bool>(),
                                                     style in prop::collection::vec(any::<u8>(), 1..64), kind in 0..11usize) {
        let e = endpoint_of(api);
        let body = body(api, &turns, string_system, style);
        let mut env = cachet::providers::parse_envelope(e, body.clone()).unwrap();
        let history: Vec<Vec<u8>> = env.history_raw().map(<[u8]>::to_vec).collect();
        let tools: Vec<Vec<u8>> = env.tools_raw().map(<[u8]>::to_vec).collect();
        let system: Vec<Vec<u8>> = env.system_raw().flatten().map(<[u8]>::to_vec).collect();
        let (op, touches) = single_op(kind);
        let ops: Vec<Op> = parse_ops(&json!([op]), "prop").unwrap();
        if env.apply(&ops, "prop").is_err() {
            // A refused patch leaves the request exactly as it was.
            prop_assert_eq!(env.compile(&CompileOptions::default()), body);
            return Ok(());
        }
        let out = env.compile(&CompileOptions::default());
        let parsed: Result<Value, _> = serde_json::from_slice(&out);
        prop_assert!(parsed.is_ok(), "output is not JSON: {}", String::from_utf8_lossy(&out));
        if touches != Touches::History {
            for m in &history {
                prop_assert!(contains(&out, m), "lost message {}", String::from_utf8_lossy(m));
            }
        }
        if touches != Touches::Tools {
            for t in &tools {
                prop_assert!(contains(&out, t), "lost tool {}", String::from_utf8_lossy(t));
            }
        }
        if touches != Touches::System {
            for part in &system {
                prop_assert!(contains(&out, part), "lost system element {}", String::from_utf8_lossy(part));
            }
            let before = cachet::providers::parse_envelope(e, body.clone()).unwrap().to_json();
            let after: Value = cachet::providers::parse_envelope(e, out.clone()).unwrap().to_json();
            prop_assert_eq!(&before["system"], &after["system"]);
        }
    }

    #[test]
    fn auto_markers_stay_within_limits(turns in turns(), string_system in any::<bool>(),
                                       style in prop::collection::vec(any::<u8>(), 1..64), kind in 0..11usize,
                                       one_hour in any::<bool>()) {
        let body = body(0, &turns, string_system, style);
        let mut env = cachet::providers::parse_envelope(Endpoint::Messages, body).unwrap();
        let (op, _) = single_op(kind);
        let _ = env.apply(&parse_ops(&json!([op]), "prop").unwrap(), "prop");
        let tail = env.uncached_raw().count();
        let ttl = if one_hour { Ttl::OneHour } else { Ttl::FiveMinutes };
        let out = env.compile(&CompileOptions { breakpoints: BreakpointMode::Auto { ttl }, ..Default::default() });
        let as_sent = env.compile(&CompileOptions::default());
        if count_markers(&as_sent) > 4 {
            // The provider would reject the client's own markers: not repaired.
            prop_assert_eq!(out, as_sent);
            return Ok(());
        }
        prop_assert!(count_markers(&out) <= 4, "{} markers", count_markers(&out));
        let v: Value = serde_json::from_slice(&out).unwrap();
        let msgs = v["messages"].as_array().unwrap();
        for m in &msgs[msgs.len() - tail..] {
            prop_assert!(!m.to_string().contains("cache_control"), "marker in the tail: {}", m);
        }
        // 1h markers never follow 5m ones.
        let order = ttls(&v);
        if let Some(first_5m) = order.iter().position(|t| t == "5m") {
            prop_assert!(order[first_5m..].iter().all(|t| t == "5m"), "{:?}", order);
        }
    }
}

/// The generators produce what the properties claim to cover: varied formatting, and ops
/// that apply (so the "valid patch" property is not vacuous).
#[test]
fn generators_cover_formatting_and_valid_ops() {
    let turns = vec![
        Turn {
            tool: true,
            word: 1,
            marked: true,
        },
        Turn {
            tool: false,
            word: 2,
            marked: false,
        },
    ];
    let styled = body(0, &turns, false, vec![3, 250, 7, 1, 128, 64, 9]);
    let text = String::from_utf8_lossy(&styled);
    assert!(text.contains('\n') || text.contains('\t'), "{text}");
    assert!(
        text.contains("\\u") || text.contains("e0") || text.contains(".0"),
        "{text}"
    );
    for api in 0..3 {
        let e = endpoint_of(api);
        let applied = (0..11)
            .filter(|&kind| {
                let mut env =
                    cachet::providers::parse_envelope(e, body(api, &turns, false, vec![1, 2, 3]))
                        .unwrap();
                env.apply(&parse_ops(&json!([single_op(kind).0]), "t").unwrap(), "t")
                    .is_ok()
            })
            .count();
        assert!(applied >= 10, "api {api}: only {applied} of 11 ops applied");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    /// Broken bodies are refused with an error, never a panic.
    #[test]
    fn truncated_or_corrupted_bodies_never_panic(api in 0..3usize, turns in turns(), cut in 0.0f64..1.0,
                                                 flip in any::<u8>(), at in 0.0f64..1.0) {
        let e = endpoint_of(api);
        let full = body(api, &turns, false, vec![5, 9, 200]);
        let mut bytes = full[..(full.len() as f64 * cut) as usize].to_vec();
        if !bytes.is_empty() {
            let i = ((bytes.len() - 1) as f64 * at) as usize;
            bytes[i] = flip;
        }
        if let Ok(env) = cachet::providers::parse_envelope(e, Bytes::from(bytes.clone())) {
            prop_assert_eq!(&env.compile(&CompileOptions::default())[..], &bytes[..]);
        }
    }
}
