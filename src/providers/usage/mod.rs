//! Reading the usage of every API's answers into [`Usage`]: the `usage` object of a whole
//! answer, and the usage-bearing events of a stream.
//!
//! Anthropic reports cache tokens *beside* `input_tokens`; OpenAI reports `cached_tokens`
//! *inside* `prompt_tokens` / `input_tokens`.

mod fields;

use serde_json::Value;

use crate::route::Endpoint;
use crate::usage::Usage;
use fields::*;

/// Anthropic `usage` object (non-streaming body, `message_start` or `message_delta`).
/// Fields that are absent or null keep the values already in `into`.
pub fn merge_anthropic(into: &mut Usage, usage: &Value) {
    UsageFields::of(usage).merge_anthropic(into);
}

/// OpenAI Chat Completions `usage` (also DeepSeek and OpenRouter variants).
pub fn from_openai_chat(usage: &Value) -> Usage {
    UsageFields::of(usage).openai_chat()
}

/// OpenAI Responses `usage`.
pub fn from_openai_responses(usage: &Value) -> Usage {
    UsageFields::of(usage).openai_responses()
}

/// What cachet reads from a response besides the reply itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponseFacts {
    pub usage: Option<Usage>,
    /// The model that answered.
    pub model: Option<String>,
    /// The response's id (`msg_…`, `chatcmpl-…`, `resp_…`).
    pub id: Option<String>,
    /// Anthropic's cache diagnostics, when the request asked for them.
    pub diagnostics: Option<Value>,
}

/// Usage, model, id and cache diagnostics from a complete, non-streaming response body, in
/// one pass.
pub fn read_response_body(endpoint: Endpoint, body: &[u8]) -> ResponseFacts {
    if endpoint == Endpoint::Converse {
        return ResponseFacts {
            usage: super::bedrock::converse::usage_of(body),
            ..ResponseFacts::default()
        };
    }
    if endpoint == Endpoint::CachedContents {
        // The cache's name, and the bill of the TTL it sets when the call is a create or
        // an update (the caller knows the method: `gemini::usage::stored_bill`).
        let (usage, model, id) = super::gemini::usage::read_stored(body);
        return ResponseFacts {
            usage,
            model,
            id,
            diagnostics: None,
        };
    }
    if endpoint == Endpoint::GenerateContent {
        let (usage, model, id) = super::gemini::usage::read(body);
        return ResponseFacts {
            usage,
            model,
            id,
            diagnostics: None,
        };
    }
    // Only these fields are built; the rest of the body (the reply itself) is only
    // validated.
    let (mut usage_at, mut model_at, mut id_at, mut diag_at) = (None, None, None, None);
    let (mut edits_at, mut tier_at) = (None, None);
    let valid = crate::json::check::check(body, |field| match &body[field.key] {
        b"usage" => usage_at = Some(field.value),
        b"model" => model_at = Some(field.value),
        b"id" => id_at = Some(field.value),
        // Anthropic's `diagnostics`, OpenAI's `prompt_cache_diagnostics` (Responses).
        b"diagnostics" | b"prompt_cache_diagnostics" => diag_at = Some(field.value),
        b"context_management" => edits_at = Some(field.value),
        b"service_tier" => tier_at = Some(field.value),
        _ => {}
    });
    if valid.is_err() {
        return ResponseFacts::default();
    }
    let model = model_at.and_then(|r| serde_json::from_slice::<String>(&body[r]).ok());
    let id = id_at.and_then(|r| serde_json::from_slice::<String>(&body[r]).ok());
    let diagnostics = diag_at
        .and_then(|r| serde_json::from_slice::<Value>(&body[r]).ok())
        .filter(Value::is_object);
    let mut usage = usage_at
        .and_then(|r| read_once_more_as_value::<Lenient<UsageFields>>(&body[r]))
        .and_then(|usage| usage.0?.usage(endpoint));
    if let (Some(usage), Some(r)) = (usage.as_mut(), edits_at) {
        usage.cleared = read_once_more_as_value::<Lenient<ContextManagementFields>>(&body[r])
            .and_then(|edits| edits.0?.cleared());
    }
    if let (Some(usage), Some(r), Endpoint::Chat | Endpoint::Responses) =
        (usage.as_mut(), tier_at, endpoint)
    {
        let tier = serde_json::from_slice::<Served<OpenAiTier>>(&body[r])
            .ok()
            .and_then(|tier| tier.0)
            .unwrap_or(ServedAt::Standard);
        served_at(usage, tier);
    }
    ResponseFacts {
        usage,
        model,
        id,
        diagnostics,
    }
}

/// `T` read from JSON bytes; when the typed read refuses them (a field named twice), read
/// from a `Value` of them, where the last of the two stands, as it always did.
fn read_once_more_as_value<T: serde::de::DeserializeOwned>(json: &[u8]) -> Option<T> {
    serde_json::from_slice::<T>(json).ok().or_else(|| {
        let value = serde_json::from_slice::<Value>(json).ok()?;
        T::deserialize(&value).ok()
    })
}

/// The fields a stream event is read for, at its top level and in its `message`
/// (Anthropic) or `response` (Responses) object. Everything else is skipped by the parser
/// without being built: a Responses `response.completed` event carries the whole output.
#[derive(Debug, Default, serde::Deserialize)]
struct HeadFields {
    model: Option<Value>,
    id: Option<Value>,
    #[serde(default)]
    usage: Lenient<UsageFields>,
    #[serde(alias = "prompt_cache_diagnostics")]
    diagnostics: Option<Value>,
    /// OpenAI: the tier that served the answer.
    #[serde(default)]
    service_tier: Served<OpenAiTier>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct EventFields {
    model: Option<Value>,
    id: Option<Value>,
    #[serde(default)]
    usage: Lenient<UsageFields>,
    diagnostics: Option<Value>,
    message: Option<HeadFields>,
    response: Option<HeadFields>,
    #[serde(default)]
    context_management: Lenient<ContextManagementFields>,
    #[serde(default)]
    service_tier: Served<OpenAiTier>,
}

impl EventFields {
    /// The event's own top-level fields (a Chat chunk, an Anthropic `message_delta`).
    fn top(&self) -> HeadFields {
        HeadFields {
            model: self.model.clone(),
            id: self.id.clone(),
            usage: self.usage.clone(),
            diagnostics: self.diagnostics.clone(),
            service_tier: self.service_tier,
        }
    }
}

/// Reads usage from a stream's SSE events, one event at a time.
#[derive(Debug, Default)]
pub struct StreamUsage {
    usage: Option<Usage>,
    /// The model that answered, as the stream names it.
    model: Option<String>,
    id: Option<String>,
    diagnostics: Option<Value>,
}

impl StreamUsage {
    /// Feed one SSE event (its `event:` name, possibly empty, and its `data:` payload).
    pub fn on_event(&mut self, endpoint: Endpoint, event: &str, data: &[u8]) {
        if endpoint == Endpoint::Converse {
            // Bedrock's Converse: the usage is in its last event, under its own names.
            if event == super::bedrock::converse::METADATA {
                self.usage = super::bedrock::converse::usage_of(data).or(self.usage);
            }
            return;
        }
        if endpoint == Endpoint::GenerateContent {
            // Every chunk is a whole response; the last counts are the final ones.
            let (usage, model, id) = super::gemini::usage::read(data);
            self.usage = usage.or(self.usage);
            self.model = model.or(self.model.take());
            if self.id.is_none() {
                self.id = id;
            }
            return;
        }
        // Only a few events carry usage; skip the JSON parse for the rest.
        let relevant = match endpoint {
            Endpoint::Messages => matches!(event, "message_start" | "message_delta"),
            Endpoint::Chat => memchr::memmem::find(data, b"\"usage\"").is_some(),
            Endpoint::Responses => matches!(
                event,
                "response.completed" | "response.incomplete" | "response.failed"
            ),
            _ => false,
        };
        if !relevant || data == b"[DONE]" {
            return;
        }
        let Some(v) = read_once_more_as_value::<EventFields>(data) else {
            return;
        };
        let top = v.top();
        let head = match endpoint {
            Endpoint::Messages => v.message.as_ref(),
            Endpoint::Responses => v.response.as_ref(),
            _ => Some(&top),
        };
        let model = head.and_then(|h| h.model.as_ref());
        if let Some(model) = model.and_then(Value::as_str) {
            self.model = Some(model.to_string());
        }
        if let Some(id) = head.and_then(|h| h.id.as_ref()).and_then(Value::as_str) {
            self.id.get_or_insert_with(|| id.to_string());
        }
        if let Some(d) = head
            .and_then(|h| h.diagnostics.as_ref())
            .filter(|d| d.is_object())
        {
            self.diagnostics = Some(d.clone());
        }
        let usage = match endpoint {
            Endpoint::Messages if event == "message_start" => {
                v.message.as_ref().and_then(|m| m.usage.0.as_ref())
            }
            Endpoint::Messages | Endpoint::Chat => v.usage.0.as_ref(),
            Endpoint::Responses => v.response.as_ref().and_then(|r| r.usage.0.as_ref()),
            _ => None,
        };
        let Some(usage) = usage else {
            return;
        };
        match endpoint {
            Endpoint::Messages => {
                let into = self.usage.get_or_insert_with(Usage::default);
                usage.merge_anthropic(into);
                if let Some(edits) = &v.context_management.0 {
                    into.cleared = edits.cleared();
                }
            }
            Endpoint::Chat | Endpoint::Responses => {
                self.usage = usage.usage(endpoint).map(|mut read| {
                    let tier = head.and_then(|h| h.service_tier.0);
                    served_at(&mut read, tier.unwrap_or(ServedAt::Standard));
                    read
                });
            }
            _ => {}
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Everything read from the stream.
    pub fn facts(self) -> ResponseFacts {
        ResponseFacts {
            usage: self.usage,
            model: self.model,
            id: self.id,
            diagnostics: self.diagnostics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::Cleared;
    use serde_json::json;

    /// The stream reading of before the typed event: a `Value` of the whole event.
    fn read_as_value(endpoint: Endpoint, event: &str, data: &[u8]) -> ResponseFacts {
        let mut facts = ResponseFacts::default();
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return facts;
        };
        let (head, usage) = match endpoint {
            Endpoint::Messages if event == "message_start" => (
                v.get("message"),
                v.get("message").and_then(|m| m.get("usage")),
            ),
            Endpoint::Messages => (v.get("message"), v.get("usage")),
            Endpoint::Responses => (
                v.get("response"),
                v.get("response").and_then(|r| r.get("usage")),
            ),
            _ => (Some(&v), v.get("usage")),
        };
        facts.model = head
            .and_then(|h| h.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        facts.id = head
            .and_then(|h| h.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        facts.diagnostics = head
            .and_then(|h| {
                h.get("diagnostics")
                    .or_else(|| h.get("prompt_cache_diagnostics"))
            })
            .filter(|d| d.is_object())
            .cloned();
        facts.usage = usage.filter(|u| u.is_object()).map(|u| match endpoint {
            Endpoint::Messages => {
                let mut out = Usage::default();
                by_value::merge_anthropic(&mut out, u);
                out
            }
            Endpoint::Chat => by_value::chat(u),
            _ => by_value::responses(u),
        });
        facts
    }

    /// The usage rules as first written, over a `Value` of the usage object: what the typed
    /// fields must read alike.
    mod by_value {
        use super::super::{openai, Usage};
        use serde_json::Value;

        fn num(v: &Value, key: &str) -> Option<u64> {
            v.get(key).and_then(Value::as_u64)
        }

        pub fn merge_anthropic(into: &mut Usage, usage: &Value) {
            if let Some(n) = num(usage, "input_tokens") {
                into.uncached = n;
            }
            if let Some(n) = num(usage, "cache_read_input_tokens") {
                into.cache_read = n;
            }
            if let Some(n) = num(usage, "cache_creation_input_tokens") {
                into.cache_write = n;
                into.cache_write_5m = n;
                into.cache_write_1h = 0;
            }
            if let Some(split) = usage.get("cache_creation").filter(|v| v.is_object()) {
                let m5 = num(split, "ephemeral_5m_input_tokens").unwrap_or(0);
                let h1 = num(split, "ephemeral_1h_input_tokens").unwrap_or(0);
                let both = m5.saturating_add(h1);
                if both > 0 || into.cache_write == 0 {
                    into.cache_write_5m = m5;
                    into.cache_write_1h = h1;
                    into.cache_write = into.cache_write.max(both);
                }
            }
            if let Some(n) = num(usage, "output_tokens") {
                into.output = n;
            }
            if let Some(speed) = usage.get("speed").and_then(Value::as_str) {
                into.fast = speed == "fast";
            }
        }

        pub fn chat(usage: &Value) -> Usage {
            let details = usage.get("prompt_tokens_details");
            let cached = num(usage, "prompt_cache_hit_tokens")
                .or_else(|| details.and_then(|d| num(d, "cached_tokens")))
                .unwrap_or(0);
            let written = details
                .and_then(|d| num(d, "cache_write_tokens"))
                .or_else(|| num(usage, "cache_write_tokens"))
                .unwrap_or(0);
            openai(
                num(usage, "prompt_tokens").unwrap_or(0),
                cached,
                (written, written_12h(details)),
                num(usage, "completion_tokens").unwrap_or(0),
            )
        }

        fn written_12h(details: Option<&Value>) -> u64 {
            details
                .and_then(|d| d.get("cache_write_tokens_details"))
                .and_then(|w| num(w, "ttl_12h_tokens"))
                .unwrap_or(0)
        }

        pub fn responses(usage: &Value) -> Usage {
            let details = usage.get("input_tokens_details");
            openai(
                num(usage, "input_tokens").unwrap_or(0),
                details.and_then(|d| num(d, "cached_tokens")).unwrap_or(0),
                (
                    details
                        .and_then(|d| num(d, "cache_write_tokens"))
                        .unwrap_or(0),
                    written_12h(details),
                ),
                num(usage, "output_tokens").unwrap_or(0),
            )
        }
    }

    /// A non-streaming answer's usage is read from its bytes without a map of the object:
    /// reading Claude's answer holds its model and id, and nothing for the usage
    /// (platform.claude.com, Messages API response: `usage` with the cache fields and
    /// `cache_creation`).
    #[test]
    fn usage_is_read_without_a_map_of_it() {
        let body = serde_json::to_vec(&json!({
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": "Done."}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 310,
                "cache_read_input_tokens": 9541,
                "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 300},
                "output_tokens": 40, "service_tier": "standard"}
        }))
        .unwrap();
        let (facts, peak) =
            crate::alloc_meter::peak_during(|| read_response_body(Endpoint::Messages, &body));
        let usage = facts.usage.unwrap();
        assert_eq!((usage.cache_read, usage.cache_write_1h), (9541, 300));
        let strings = "claude-sonnet-4-5-20250929".len() + "msg_01XFDUDYJgAACzvnptvVoYEL".len();
        assert!(
            peak <= strings + 16,
            "{peak} bytes held reading an answer whose model and id are {strings} bytes"
        );
    }

    /// A server-side compaction is a sampling of its own, billed, that the top-level counts
    /// leave out (platform.claude.com, Compaction, "Understanding usage": the example's
    /// top-level `input_tokens` 23000 match the `message` iteration; the `compaction`
    /// iteration read 180000). Claude Code's answers carry `iterations` with the cache
    /// fields on every entry; the compaction read the prompt as sent, the message ran on
    /// the summary.
    #[test]
    fn a_compaction_sampling_is_billed_and_the_prompt_read_is_the_first() {
        let doc = br#"{"id":"msg_1","usage":{"input_tokens":23000,"output_tokens":1000,
            "iterations":[{"type":"compaction","input_tokens":180000,"output_tokens":3500},
                          {"type":"message","input_tokens":23000,"output_tokens":1000}]}}"#;
        let usage = read_response_body(Endpoint::Messages, doc).usage.unwrap();
        assert_eq!((usage.uncached, usage.output), (203_000, 4500));
        assert_eq!(usage.iterations.map(|i| i.compactions), Some(1));

        let iteration = |kind: &str, read: u64, write: u64, input: u64, output: u64| {
            json!({"type": kind, "input_tokens": input, "output_tokens": output,
                "cache_read_input_tokens": read, "cache_creation_input_tokens": write,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": write}})
        };
        let top = json!({"input_tokens": 3, "output_tokens": 120,
            "cache_read_input_tokens": 5200, "cache_creation_input_tokens": 2100,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 2100},
            "iterations": [iteration("compaction", 151_000, 900, 4, 2000),
                           iteration("message", 5200, 2100, 3, 120)]});
        let body = serde_json::to_vec(&json!({"id": "msg_2", "usage": top})).unwrap();
        let whole = read_response_body(Endpoint::Messages, &body).usage.unwrap();
        assert_eq!(
            whole.cache_read, 156_200,
            "both samplings' reads are billed"
        );
        assert_eq!((whole.cache_write, whole.cache_write_1h), (3000, 3000));
        assert_eq!((whole.uncached, whole.output), (7, 2120));
        assert_eq!(
            whole.prompt_read(),
            151_000,
            "the prompt as sent was read whole"
        );
        assert_eq!(
            whole.left_cached(),
            7300,
            "the summary's prompt is what stays cached"
        );

        // Streamed: `message_start` carries the first counts, `message_delta` the
        // cumulative ones with the iterations; read twice, the same.
        let mut stream = StreamUsage::default();
        let start = json!({"type": "message_start", "message": {"id": "msg_2",
            "usage": {"input_tokens": 4, "cache_read_input_tokens": 151_000, "output_tokens": 1}}});
        stream.on_event(
            Endpoint::Messages,
            "message_start",
            start.to_string().as_bytes(),
        );
        let delta = json!({"type": "message_delta", "usage": top}).to_string();
        stream.on_event(Endpoint::Messages, "message_delta", delta.as_bytes());
        assert_eq!(stream.usage(), Some(whole));
        stream.on_event(Endpoint::Messages, "message_delta", delta.as_bytes());
        assert_eq!(stream.usage(), Some(whole));
        // Only the TTL split at the top, the answer writing nothing: read twice, the same.
        let mut split_only = top.clone();
        split_only
            .as_object_mut()
            .unwrap()
            .remove("cache_creation_input_tokens");
        split_only["cache_creation"] =
            json!({"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0});
        let delta = json!({"type": "message_delta", "usage": split_only}).to_string();
        let mut stream = StreamUsage::default();
        stream.on_event(Endpoint::Messages, "message_delta", delta.as_bytes());
        let once = stream.usage().unwrap();
        assert_eq!((once.cache_write, once.cache_write_1h), (900, 900));
        stream.on_event(Endpoint::Messages, "message_delta", delta.as_bytes());
        assert_eq!(stream.usage(), Some(once));

        // One sampling, as most answers report it: nothing changes.
        let single = json!({"id": "msg_3", "usage": {"input_tokens": 3, "output_tokens": 9,
            "cache_read_input_tokens": 5200,
            "iterations": [iteration("message", 5200, 0, 3, 9)]}});
        let one = read_response_body(Endpoint::Messages, &serde_json::to_vec(&single).unwrap())
            .usage
            .unwrap();
        assert_eq!(one.iterations, None);
        assert_eq!(
            (one.cache_read, one.prompt_read(), one.left_cached()),
            (5200, 5200, 5200)
        );
    }

    /// The edits a context-edited answer applied (platform.claude.com, Context editing,
    /// "Context editing response": `context_management.applied_edits` beside the usage, in
    /// the final `message_delta` when streamed): tool-use clearing is kept with the usage;
    /// thinking clearing, which the thinking rule already models, is not.
    #[test]
    fn cleared_tool_uses_are_read_from_the_answer() {
        let edits = json!({"applied_edits": [
            {"type": "clear_thinking_20251015", "cleared_thinking_turns": 3, "cleared_input_tokens": 15000},
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 8, "cleared_input_tokens": 50000}]});
        let body = json!({"id": "msg_1", "context_management": edits,
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 900, "output_tokens": 5}});
        let usage = read_response_body(Endpoint::Messages, &serde_json::to_vec(&body).unwrap())
            .usage
            .unwrap();
        let expected = Some(Cleared {
            tool_uses: 8,
            input_tokens: 50_000,
        });
        assert_eq!(usage.cleared, expected);
        let mut stream = StreamUsage::default();
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 5}, "context_management": edits});
        stream.on_event(
            Endpoint::Messages,
            "message_delta",
            delta.to_string().as_bytes(),
        );
        assert_eq!(stream.usage().unwrap().cleared, expected);
        let none = json!({"id": "msg_2", "context_management": {"applied_edits": []},
            "usage": {"input_tokens": 10}});
        let usage = read_response_body(Endpoint::Messages, &serde_json::to_vec(&none).unwrap())
            .usage
            .unwrap();
        assert_eq!(usage.cleared, None);
    }

    /// A count named twice reads as a `Value` reads it: the last one stands, in an answer
    /// and in a stream's event alike.
    #[test]
    fn a_count_named_twice_is_the_last_one() {
        let body =
            br#"{"id":"msg_1","usage":{"input_tokens":1,"output_tokens":5,"input_tokens":2}}"#;
        let usage = read_response_body(Endpoint::Messages, body).usage.unwrap();
        assert_eq!((usage.uncached, usage.output), (2, 5));
        let event = br#"{"type":"message_delta","usage":{"output_tokens":3,"output_tokens":4}}"#;
        let mut stream = StreamUsage::default();
        stream.on_event(Endpoint::Messages, "message_delta", event);
        assert_eq!(stream.usage().map(|u| u.output), Some(4));
    }

    /// Counts at the top of `u64` add up without overflowing: a split of two such counts
    /// is the largest count, not a panic (or, in a release build, a small wrapped one).
    #[test]
    fn the_largest_counts_do_not_overflow() {
        let body = format!(
            r#"{{"usage":{{"cache_creation":{{"ephemeral_5m_input_tokens":{max},"ephemeral_1h_input_tokens":{max}}}}}}}"#,
            max = u64::MAX
        );
        let usage = read_response_body(Endpoint::Messages, body.as_bytes())
            .usage
            .unwrap();
        assert_eq!(usage.cache_write, u64::MAX);
        assert_eq!(usage.total_input(), u64::MAX);
        let mut sum = usage;
        sum.add(&usage);
        assert_eq!(sum.cache_write_1h, u64::MAX);
    }

    /// Any JSON under a usage field (a string, a float, a negative number, null, an array,
    /// an object where a count goes, a count where an object goes, a field of its own) reads
    /// as a `Value` of the usage read it, for each API, from a value or from the bytes.
    #[test]
    fn any_usage_reads_as_a_value_of_it_read() {
        use proptest::prelude::*;
        let keys = [
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "cache_creation",
            "prompt_tokens",
            "completion_tokens",
            "prompt_cache_hit_tokens",
            "cache_write_tokens",
            "prompt_tokens_details",
            "input_tokens_details",
            "service_tier",
        ];
        let nested = [
            "ephemeral_5m_input_tokens",
            "ephemeral_1h_input_tokens",
            "cached_tokens",
            "cache_write_tokens",
            "audio_tokens",
        ];
        let scalar = prop_oneof![
            (0u64..100_000).prop_map(|n| json!(n)),
            Just(json!(u64::MAX)),
            (-5i64..0).prop_map(|n| json!(n)),
            (0.0f64..10.0).prop_map(|f| json!(f)),
            Just(json!("12")),
            Just(json!(true)),
            Just(Value::Null),
            Just(json!([1, {"a": 2}])),
        ];
        let object = proptest::collection::vec((0..nested.len(), scalar.clone()), 0..4).prop_map(
            move |fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (nested[k].to_string(), v))
                        .collect(),
                )
            },
        );
        let value = prop_oneof![scalar, object];
        let usage =
            proptest::collection::vec((0..keys.len(), value), 0..8).prop_map(move |fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (keys[k].to_string(), v))
                        .collect(),
                )
            });
        let reference_from_default = |usage: &Value| {
            let mut u = Usage::default();
            by_value::merge_anthropic(&mut u, usage);
            u
        };
        proptest::test_runner::TestRunner::default()
            .run(&usage, |usage| {
                let mut typed = Usage {
                    cache_write: 7,
                    ..Usage::default()
                };
                let mut reference = typed;
                merge_anthropic(&mut typed, &usage);
                by_value::merge_anthropic(&mut reference, &usage);
                prop_assert_eq!(typed, reference);
                prop_assert_eq!(from_openai_chat(&usage), by_value::chat(&usage));
                prop_assert_eq!(from_openai_responses(&usage), by_value::responses(&usage));
                for endpoint in [Endpoint::Messages, Endpoint::Chat, Endpoint::Responses] {
                    let body = serde_json::to_vec(&json!({"id": "x", "usage": usage})).unwrap();
                    let read = read_response_body(endpoint, &body).usage;
                    let by_value = match endpoint {
                        Endpoint::Messages => Some(reference_from_default(&usage)),
                        Endpoint::Chat => Some(by_value::chat(&usage)),
                        _ => Some(by_value::responses(&usage)),
                    };
                    prop_assert_eq!(read, by_value, "{:?}", endpoint);
                }
                Ok(())
            })
            .unwrap();
    }

    /// Events are read for their few fields without building the rest (a Responses
    /// `response.completed` carries the whole output), and give what a `Value` of the whole
    /// event gave, on each API's shapes (platform.claude.com streaming docs; OpenAI
    /// Chat chunks with `stream_options.include_usage`; Responses streaming events).
    #[test]
    fn typed_event_fields_read_what_the_whole_value_read() {
        let output: Vec<Value> = (0..50)
            .map(|i| json!({"type": "message", "id": format!("msg_{i}"), "role": "assistant",
                "content": [{"type": "output_text", "text": "word ".repeat(200), "annotations": []}]}))
            .collect();
        let cases: Vec<(Endpoint, &str, Value)> = vec![
            (
                Endpoint::Messages,
                "message_start",
                json!({"type": "message_start", "message": {
                "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-5-5",
                "content": [], "stop_reason": null,
                "usage": {"input_tokens": 4, "cache_read_input_tokens": 9541,
                          "cache_creation_input_tokens": 310, "output_tokens": 1,
                          "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 300}},
                "diagnostics": {"cache_miss_reason": {"type": "system_changed"}}}}),
            ),
            (
                Endpoint::Messages,
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 220}}),
            ),
            (
                Endpoint::Chat,
                "",
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                "model": "gpt-5.6", "choices": [],
                "usage": {"prompt_tokens": 2048, "completion_tokens": 12,
                          "prompt_tokens_details": {"cached_tokens": 1920}}}),
            ),
            (
                Endpoint::Chat,
                "",
                json!({"id": "chatcmpl-1", "model": "gpt-5.6", "usage": null,
                "choices": [{"index": 0, "delta": {"content": "usage"}}]}),
            ),
            (
                Endpoint::Responses,
                "response.completed",
                json!({"type": "response.completed",
                "sequence_number": 99, "response": {"id": "resp_1", "object": "response",
                "model": "gpt-5.6-codex", "status": "completed", "output": output,
                "usage": {"input_tokens": 30000, "output_tokens": 500,
                          "input_tokens_details": {"cached_tokens": 28000, "cache_write_tokens": 1000},
                          "output_tokens_details": {"reasoning_tokens": 100}}}}),
            ),
            (
                Endpoint::Responses,
                "response.failed",
                json!({"type": "response.failed",
                "response": {"id": "resp_2", "model": "gpt-5.6", "status": "failed",
                "error": {"code": "server_error"}, "usage": null}}),
            ),
        ];
        for (endpoint, event, data) in cases {
            let data = serde_json::to_vec(&data).unwrap();
            let mut s = StreamUsage::default();
            s.on_event(endpoint, event, &data);
            let want = read_as_value(endpoint, event, &data);
            let got = s.facts();
            assert_eq!(
                (got.usage, got.model, got.id, got.diagnostics),
                (want.usage, want.model, want.id, want.diagnostics),
                "{endpoint:?} {event}"
            );
        }
    }

    #[test]
    fn anthropic_cache_tokens_sit_beside_input() {
        let body = json!({"usage": {"input_tokens": 12, "cache_read_input_tokens": 3000,
            "cache_creation_input_tokens": 500,
            "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 300},
            "output_tokens": 40}});
        let u = read_response_body(Endpoint::Messages, body.to_string().as_bytes())
            .usage
            .unwrap();
        assert_eq!(u.cache_read, 3000);
        assert_eq!(u.cache_write, 500);
        assert_eq!((u.cache_write_5m, u.cache_write_1h), (200, 300));
        assert_eq!(u.uncached, 12);
        assert_eq!(u.total_input(), 3512);
    }

    #[test]
    fn openai_cached_tokens_sit_inside_prompt_tokens() {
        let u = from_openai_chat(&json!({"prompt_tokens": 2048, "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 1920}}));
        assert_eq!((u.cache_read, u.uncached, u.output), (1920, 128, 9));
        let u = from_openai_responses(&json!({"input_tokens": 1500, "output_tokens": 3,
            "input_tokens_details": {"cached_tokens": 1152}}));
        assert_eq!((u.cache_read, u.uncached), (1152, 348));
    }

    /// GPT-5.6 and later report writes beside reads, inside the input total:
    /// openai-python `ResponseUsage.InputTokensDetails.cache_write_tokens` ("The number of
    /// input tokens that were written to the cache") and Chat
    /// `PromptTokensDetails.cache_write_tokens`.
    #[test]
    fn openai_cache_write_tokens_are_writes_inside_the_input_total() {
        let done = json!({"type": "response.completed", "response": {"model": "gpt-5.6",
            "usage": {"input_tokens": 5000, "output_tokens": 7, "total_tokens": 5007,
                "input_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 1800},
                "output_tokens_details": {"reasoning_tokens": 0}}}});
        let mut s = StreamUsage::default();
        s.on_event(
            Endpoint::Responses,
            "response.completed",
            done.to_string().as_bytes(),
        );
        let u = s.usage().unwrap();
        assert_eq!((u.cache_read, u.cache_write, u.uncached), (3000, 1800, 200));
        assert_eq!((u.cache_write_5m, u.cache_write_1h), (0, 0));
        assert_eq!(u.total_input(), 5000);

        let chunk = json!({"id": "c", "model": "gpt-5.6", "choices": [],
            "usage": {"prompt_tokens": 4096, "completion_tokens": 3, "total_tokens": 4099,
                "prompt_tokens_details": {"cached_tokens": 2048, "cache_write_tokens": 1024}}});
        let mut s = StreamUsage::default();
        s.on_event(Endpoint::Chat, "", chunk.to_string().as_bytes());
        let u = s.usage().unwrap();
        assert_eq!(
            (u.cache_read, u.cache_write, u.uncached),
            (2048, 1024, 1024)
        );
    }

    /// Responses reports the writes by lifetime: `cache_write_tokens_details` with
    /// `ttl_30m_tokens` and `ttl_12h_tokens` (openai-python 3.57
    /// `InputTokensDetailsCacheWriteTokensDetails`), in a stream's last event and a body
    /// alike. A split that does not add up to `cache_write_tokens` takes the total's word.
    #[test]
    fn openai_writes_of_twelve_hours_are_read_apart() {
        let usage = json!({"input_tokens": 9000, "output_tokens": 7, "total_tokens": 9007,
            "input_tokens_details": {"cached_tokens": 3000, "cache_write_tokens": 4000,
                "cache_write_tokens_details": {"ttl_30m_tokens": 1000, "ttl_12h_tokens": 3000}},
            "output_tokens_details": {"reasoning_tokens": 0}});
        let u = from_openai_responses(&usage);
        assert_eq!((u.cache_write, u.cache_write_12h), (4000, 3000));
        assert_eq!(
            (u.cache_read, u.uncached, u.total_input()),
            (3000, 2000, 9000)
        );
        let done = json!({"type": "response.completed",
            "response": {"model": "gpt-6.2-sol", "usage": usage}});
        let mut s = StreamUsage::default();
        s.on_event(
            Endpoint::Responses,
            "response.completed",
            done.to_string().as_bytes(),
        );
        assert_eq!(s.usage(), Some(u));
        let body = serde_json::to_vec(&json!({"id": "resp_1", "object": "response",
            "model": "gpt-6.2-sol", "output": [], "usage": usage}))
        .unwrap();
        assert_eq!(
            read_response_body(Endpoint::Responses, &body).usage,
            Some(u)
        );

        let mut sum = u;
        sum.add(&u);
        assert_eq!((sum.cache_write, sum.cache_write_12h), (8000, 6000));
        // A sum has no one speed: it is priced at the standard rates.
        let mut fast = Usage { fast: true, ..u };
        fast.add(&Usage { fast: true, ..u });
        assert!(!fast.fast);
        let odd = from_openai_responses(&json!({"input_tokens": 5000,
            "input_tokens_details": {"cache_write_tokens": 100,
                "cache_write_tokens_details": {"ttl_12h_tokens": 900}}}));
        assert_eq!((odd.cache_write, odd.cache_write_12h), (100, 100));
    }

    /// An Anthropic answer says which speed served it: `usage.speed`, `standard` or `fast`
    /// (anthropic-python 2.14 `Usage.speed`; platform.claude.com, Fast mode: "the response
    /// reports which tier served it"). Streamed, it rides on `message_start`; a later
    /// `message_delta` without it keeps it.
    #[test]
    fn anthropic_answers_say_when_fast_mode_served_them() {
        let usage = json!({"input_tokens": 12, "cache_read_input_tokens": 9000,
            "cache_creation_input_tokens": 0, "output_tokens": 40, "service_tier": "standard",
            "speed": "fast"});
        let from_anthropic = |u: &Value| {
            let mut out = Usage::default();
            merge_anthropic(&mut out, u);
            out
        };
        assert!(from_anthropic(&usage).fast);
        let standard = json!({"input_tokens": 12, "output_tokens": 40, "speed": "standard"});
        assert!(!from_anthropic(&standard).fast);
        assert!(!from_anthropic(&json!({"input_tokens": 1, "speed": 7})).fast);
        let mut s = StreamUsage::default();
        let start = json!({"type": "message_start", "message": {"usage": usage}});
        s.on_event(
            Endpoint::Messages,
            "message_start",
            start.to_string().as_bytes(),
        );
        let delta = json!({"type": "message_delta", "usage": {"output_tokens": 90}});
        s.on_event(
            Endpoint::Messages,
            "message_delta",
            delta.to_string().as_bytes(),
        );
        let streamed = s.usage().unwrap();
        assert!(streamed.fast && streamed.output == 90);
        let body = serde_json::to_vec(&json!({"id": "msg_1", "model": "claude-opus-5-5",
            "usage": usage}))
        .unwrap();
        assert!(
            read_response_body(Endpoint::Messages, &body)
                .usage
                .unwrap()
                .fast
        );
    }

    /// An OpenAI answer says which tier served it at its top level: `service_tier:
    /// "priority"` in fast mode, whether the request asked `fast` or `priority` ("The
    /// response will show `service_tier=priority`", openai-python 3.57 `Response`). Chat
    /// bodies and chunks carry it beside `usage`; a Responses stream in the response object
    /// of `response.completed`. Another tier, or a value of another type, is standard and
    /// keeps the usage.
    #[test]
    fn openai_answers_say_when_fast_mode_served_them() {
        let chat_usage = json!({"prompt_tokens": 3000, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 2048}});
        let chat = |tier: Value| {
            let body = json!({"id": "chatcmpl-1", "model": "gpt-6.2-sol",
                "service_tier": tier, "usage": chat_usage});
            read_response_body(Endpoint::Chat, &serde_json::to_vec(&body).unwrap())
                .usage
                .unwrap()
        };
        assert!(chat(json!("priority")).fast);
        assert!(!chat(json!("default")).fast);
        assert!(!chat(json!("flex")).fast);
        let odd = chat(json!({"tier": "priority"}));
        assert!(!odd.fast && odd.cache_read == 2048);
        let responses_usage = json!({"input_tokens": 3000, "output_tokens": 20,
            "input_tokens_details": {"cached_tokens": 2048}});
        let body = json!({"id": "resp_1", "object": "response", "model": "gpt-6.2-sol",
            "service_tier": "priority", "usage": responses_usage});
        let read = read_response_body(Endpoint::Responses, &serde_json::to_vec(&body).unwrap());
        assert!(read.usage.unwrap().fast);
        let mut s = StreamUsage::default();
        let completed = json!({"type": "response.completed", "response": body});
        s.on_event(
            Endpoint::Responses,
            "response.completed",
            completed.to_string().as_bytes(),
        );
        assert!(s.usage().unwrap().fast);
        let mut s = StreamUsage::default();
        let last = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "service_tier": "priority", "choices": [], "usage": chat_usage});
        s.on_event(Endpoint::Chat, "", last.to_string().as_bytes());
        assert!(s.usage().unwrap().fast);
        // Anthropic's own `service_tier` (in its usage) is not a speed.
        let anthropic = json!({"id": "msg_1", "service_tier": "priority",
            "usage": {"input_tokens": 5, "output_tokens": 1, "service_tier": "priority"}});
        let read = read_response_body(Endpoint::Messages, &serde_json::to_vec(&anthropic).unwrap());
        assert!(!read.usage.unwrap().fast);
    }

    /// Flex processing answers `service_tier: "flex"` (openai-python 3.57 `Response`: "If
    /// set to 'flex', then the request will be processed with the Flex Processing service
    /// tier"), in a body, a Chat chunk and `response.completed` alike; it is not fast mode,
    /// and a sum of answers has no one tier.
    #[test]
    fn openai_answers_say_when_flex_served_them() {
        let chat_usage = json!({"prompt_tokens": 3000, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 2048}});
        let body = json!({"id": "chatcmpl-1", "model": "o4-mini", "service_tier": "flex",
            "usage": chat_usage});
        let read = read_response_body(Endpoint::Chat, &serde_json::to_vec(&body).unwrap())
            .usage
            .unwrap();
        assert!(read.flex && !read.fast && read.cache_read == 2048);
        for tier in ["priority", "default", "auto"] {
            let body = json!({"service_tier": tier, "usage": chat_usage});
            let read = read_response_body(Endpoint::Chat, &serde_json::to_vec(&body).unwrap());
            assert!(!read.usage.unwrap().flex, "{tier}");
        }
        let mut s = StreamUsage::default();
        let last = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "service_tier": "flex", "choices": [], "usage": chat_usage});
        s.on_event(Endpoint::Chat, "", last.to_string().as_bytes());
        assert!(s.usage().unwrap().flex);
        let responses = json!({"id": "resp_1", "object": "response", "model": "o3",
            "service_tier": "flex", "usage": {"input_tokens": 3000, "output_tokens": 20,
            "input_tokens_details": {"cached_tokens": 2048}}});
        let read = read_response_body(
            Endpoint::Responses,
            &serde_json::to_vec(&responses).unwrap(),
        );
        assert!(read.usage.unwrap().flex);
        let mut s = StreamUsage::default();
        let completed = json!({"type": "response.completed", "response": responses});
        s.on_event(
            Endpoint::Responses,
            "response.completed",
            completed.to_string().as_bytes(),
        );
        let usage = s.usage().unwrap();
        assert!(usage.flex && usage.tier() == "flex");
        let mut sum = usage;
        sum.add(&usage);
        assert!(!sum.flex && sum.tier() == "standard");
    }

    /// Anthropic says where the inference ran in `usage.inference_geo` ("The response usage
    /// object includes an inference_geo field indicating where inference ran", Data
    /// residency; anthropic-python 2.14 `Usage.inference_geo`): `us` for US-only inference,
    /// `global` otherwise. Read from a body and from a stream's `message_start`, kept
    /// through a `message_delta` without it; another word or type is not US-only.
    #[test]
    fn anthropic_answers_say_when_inference_ran_in_the_us() {
        let body = |geo: Value| {
            let body = json!({"id": "msg_1", "model": "claude-opus-5-5", "usage": {
                "input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 3,
                "inference_geo": geo}});
            read_response_body(Endpoint::Messages, &serde_json::to_vec(&body).unwrap())
                .usage
                .unwrap()
        };
        let us = body(json!("us"));
        assert!(us.us_only && us.cache_read == 100 && !us.fast);
        for other in [json!("global"), json!("eu"), json!(1), json!({"geo": "us"})] {
            let read = body(other.clone());
            assert!(!read.us_only && read.cache_read == 100, "{other}");
        }
        let mut s = StreamUsage::default();
        let start = json!({"type": "message_start", "message": {"usage": {"input_tokens": 5,
            "cache_read_input_tokens": 100, "output_tokens": 1, "inference_geo": "us"}}});
        s.on_event(
            Endpoint::Messages,
            "message_start",
            start.to_string().as_bytes(),
        );
        let delta = json!({"type": "message_delta", "usage": {"output_tokens": 77}});
        s.on_event(
            Endpoint::Messages,
            "message_delta",
            delta.to_string().as_bytes(),
        );
        let streamed = s.usage().unwrap();
        assert!(streamed.us_only && streamed.output == 77);
        let mut sum = streamed;
        sum.add(&streamed);
        assert!(!sum.us_only);
    }

    #[test]
    fn anthropic_stream_delta_updates_output_and_keeps_nulls() {
        let mut s = StreamUsage::default();
        let start = json!({"type": "message_start", "message": {"usage": {"input_tokens": 5,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 0, "output_tokens": 1}}});
        s.on_event(
            Endpoint::Messages,
            "message_start",
            start.to_string().as_bytes(),
        );
        let delta = json!({"type": "message_delta", "usage": {"output_tokens": 77,
            "input_tokens": null, "cache_read_input_tokens": null}});
        s.on_event(
            Endpoint::Messages,
            "message_delta",
            delta.to_string().as_bytes(),
        );
        let u = s.usage().unwrap();
        assert_eq!((u.uncached, u.cache_read, u.output), (5, 100, 77));
    }

    #[test]
    fn the_answering_model_is_read_from_each_api() {
        let chat = json!({"id": "c", "model": "gpt-4o-2024-08-06", "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}});
        let mut s = StreamUsage::default();
        s.on_event(Endpoint::Chat, "", chat.to_string().as_bytes());
        assert_eq!(s.model(), Some("gpt-4o-2024-08-06"));

        let done = json!({"type": "response.completed", "response": {"model": "gpt-5-2025-08-07",
            "usage": {"input_tokens": 10, "output_tokens": 2}}});
        let mut s = StreamUsage::default();
        s.on_event(
            Endpoint::Responses,
            "response.completed",
            done.to_string().as_bytes(),
        );
        assert_eq!(s.model(), Some("gpt-5-2025-08-07"));

        let body = json!({"id": "msg_1", "model": "claude-x", "content": [{"type": "text", "text": "\"model\""}],
            "usage": {"input_tokens": 3, "output_tokens": 1}});
        let facts = read_response_body(Endpoint::Messages, body.to_string().as_bytes());
        assert_eq!(facts.model.as_deref(), Some("claude-x"));
        assert_eq!(facts.id.as_deref(), Some("msg_1"));
        assert_eq!(facts.usage.map(|u| u.uncached), Some(3));
        assert_eq!(
            read_response_body(Endpoint::Messages, b"{\"model\":"),
            ResponseFacts::default()
        );
    }
}
