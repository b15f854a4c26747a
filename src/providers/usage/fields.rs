//! A `usage` object's fields under every provider's names, read straight from the JSON
//! leniently: a count is an unsigned integer, anything else is no count.

use std::marker::PhantomData;

use serde::Deserialize;
use serde_json::Value;

use crate::route::Endpoint;
use crate::usage::{Cleared, Iterations, Usage};

/// Set the tier an answer says served it.
pub(super) fn served_at(usage: &mut Usage, tier: ServedAt) {
    usage.fast = tier == ServedAt::Fast;
    usage.flex = tier == ServedAt::Flex;
}

/// A `usage` object's counts, under every provider's names (a provider's own are
/// filled, the others stay empty), read straight from the JSON: no map of the object is
/// built. A count is an unsigned integer; anything else is no count, and a nested object
/// that is not an object is none.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct UsageFields {
    input_tokens: Count,
    output_tokens: Count,
    cache_read_input_tokens: Count,
    cache_creation_input_tokens: Count,
    cache_creation: Lenient<CacheCreation>,
    prompt_tokens: Count,
    completion_tokens: Count,
    /// DeepSeek's name for the tokens read from cache.
    prompt_cache_hit_tokens: Count,
    cache_write_tokens: Count,
    prompt_tokens_details: Lenient<Details>,
    input_tokens_details: Lenient<Details>,
    /// Anthropic: one entry per sampling of the request.
    iterations: LenientList<IterationFields>,
    /// Anthropic: `standard` or `fast`.
    speed: Served<AnthropicSpeed>,
    /// Anthropic: where the inference ran (`global`, `us`).
    inference_geo: Served<AnthropicGeo>,
}

/// The tier an answer says served it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ServedAt {
    Standard,
    Fast,
    Flex,
}

/// A field naming how an answer was served (Anthropic's `usage.speed` and
/// `usage.inference_geo`, OpenAI's `service_tier`), read without keeping the string: what
/// it means by the provider's words `W` (`None` when absent or not a string).
#[derive(Debug, Clone, Copy)]
pub(super) struct Served<W: ServedWords>(pub(super) Option<W::Meaning>, pub(super) PhantomData<W>);

impl<W: ServedWords> Default for Served<W> {
    fn default() -> Self {
        Served(None, PhantomData)
    }
}

/// What each word of a provider's field means.
pub(super) trait ServedWords {
    type Meaning: Copy + std::fmt::Debug;
    fn meaning(word: &str) -> Self::Meaning;
}

/// Anthropic's `usage.speed`: `standard` or `fast`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct AnthropicSpeed;

impl ServedWords for AnthropicSpeed {
    type Meaning = ServedAt;
    fn meaning(word: &str) -> ServedAt {
        if word == crate::providers::anthropic::FAST_SPEED {
            ServedAt::Fast
        } else {
            ServedAt::Standard
        }
    }
}

/// OpenAI's `service_tier` of an answer: `priority` when fast mode served it (`fast`, the
/// word a request may use, read alike), `flex` when flex processing did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct OpenAiTier;

/// Anthropic's `usage.inference_geo`: whether the inference ran in the US only.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct AnthropicGeo;

impl ServedWords for AnthropicGeo {
    type Meaning = bool;
    fn meaning(word: &str) -> bool {
        word == crate::providers::anthropic::US_INFERENCE_GEO
    }
}

impl ServedWords for OpenAiTier {
    type Meaning = ServedAt;
    fn meaning(word: &str) -> ServedAt {
        if crate::providers::openai::FAST_TIERS.contains(&word) {
            ServedAt::Fast
        } else if word == crate::providers::openai::FLEX_TIER {
            ServedAt::Flex
        } else {
            ServedAt::Standard
        }
    }
}

impl<'de, W: ServedWords> Deserialize<'de> for Served<W> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<W>(PhantomData<W>);
        impl<'de, W: ServedWords> serde::de::Visitor<'de> for Visit<W> {
            type Value = Served<W>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Served<W>, E> {
                Ok(Served(Some(W::meaning(s)), PhantomData))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Served<W>, E> {
                Ok(Served(None, PhantomData))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Served<W>, E> {
                Ok(Served(None, PhantomData))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Served<W>, E> {
                Ok(Served(None, PhantomData))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Served<W>, E> {
                Ok(Served(None, PhantomData))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Served<W>, E> {
                Ok(Served(None, PhantomData))
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Served<W>, E> {
                Ok(Served(None, PhantomData))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Served<W>, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Served(None, PhantomData))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Served<W>, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Served(None, PhantomData))
            }
        }
        d.deserialize_any(Visit(PhantomData))
    }
}

/// One entry of Anthropic's `usage.iterations`: its `type` (`compaction`, `message`) and
/// its own counts.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct IterationFields {
    #[serde(rename = "type")]
    kind: Option<Value>,
    input_tokens: Count,
    output_tokens: Count,
    cache_read_input_tokens: Count,
    cache_creation_input_tokens: Count,
    cache_creation: Lenient<CacheCreation>,
}

impl IterationFields {
    pub(super) fn is_compaction(&self) -> bool {
        self.kind.as_ref().and_then(Value::as_str) == Some("compaction")
    }

    pub(super) fn written(&self) -> u64 {
        self.cache_creation_input_tokens.0.unwrap_or_else(|| {
            self.cache_creation.0.as_ref().map_or(0, |c| {
                let m5 = c.ephemeral_5m_input_tokens.0.unwrap_or(0);
                m5.saturating_add(c.ephemeral_1h_input_tokens.0.unwrap_or(0))
            })
        })
    }
}

/// Anthropic's split of the tokens written to cache by lifetime.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct CacheCreation {
    ephemeral_5m_input_tokens: Count,
    ephemeral_1h_input_tokens: Count,
}

/// OpenAI's details of the input tokens.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct Details {
    cached_tokens: Count,
    cache_write_tokens: Count,
    cache_write_tokens_details: Lenient<WriteDetails>,
}

/// OpenAI's split of the tokens written to cache by lifetime (Responses).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct WriteDetails {
    ttl_12h_tokens: Count,
}

impl Details {
    pub(super) fn written_12h(&self) -> u64 {
        self.cache_write_tokens_details
            .0
            .as_ref()
            .and_then(|w| w.ttl_12h_tokens.0)
            .unwrap_or(0)
    }
}

impl UsageFields {
    /// The fields of a `usage` value; a value that is not an object has none.
    pub(super) fn of(usage: &Value) -> UsageFields {
        Lenient::<UsageFields>::deserialize(usage)
            .ok()
            .and_then(|l| l.0)
            .unwrap_or_default()
    }

    /// The usage as the endpoint's API reports it (`None` for an API without usage).
    pub(super) fn usage(&self, endpoint: Endpoint) -> Option<Usage> {
        match endpoint {
            Endpoint::Messages => {
                let mut u = Usage::default();
                self.merge_anthropic(&mut u);
                Some(u)
            }
            Endpoint::Chat => Some(self.openai_chat()),
            Endpoint::Responses => Some(self.openai_responses()),
            _ => None,
        }
    }

    /// Anthropic: fields that are absent or null keep the values already in `into`.
    pub(super) fn merge_anthropic(&self, into: &mut Usage) {
        if let Some(n) = self.input_tokens.0 {
            into.uncached = n;
        }
        if let Some(n) = self.cache_read_input_tokens.0 {
            into.cache_read = n;
        }
        if let Some(n) = self.cache_creation_input_tokens.0 {
            into.cache_write = n;
            // Without the TTL split, the provider's default TTL (5m) applies.
            into.cache_write_5m = n;
            into.cache_write_1h = 0;
        }
        if let Some(split) = &self.cache_creation.0 {
            let m5 = split.ephemeral_5m_input_tokens.0.unwrap_or(0);
            let h1 = split.ephemeral_1h_input_tokens.0.unwrap_or(0);
            // Saturating: counts this large are nonsense, not a reason to overflow.
            let both = m5.saturating_add(h1);
            if both > 0 || into.cache_write == 0 {
                into.cache_write_5m = m5;
                into.cache_write_1h = h1;
                into.cache_write = into.cache_write.max(both);
            }
        }
        if let Some(n) = self.output_tokens.0 {
            into.output = n;
        }
        if let Some(tier) = self.speed.0 {
            served_at(into, tier);
        }
        if let Some(us_only) = self.inference_geo.0 {
            into.us_only = us_only;
        }
        self.merge_iterations(into);
    }

    /// The top-level counts leave out compaction samplings, which are billed all the same
    /// (platform.claude.com, Compaction, "Understanding usage": "Compaction requires an
    /// additional sampling step, which contributes to rate limits and billing"; the
    /// top-level counts "match the `message` iteration"). Each count this object reports
    /// becomes its own value plus the compaction samplings', computed from this object
    /// alone: read twice, the same.
    pub(super) fn merge_iterations(&self, into: &mut Usage) {
        let Some(list) = self
            .iterations
            .0
            .as_deref()
            .filter(|l| l.len() > 1 || l.iter().any(IterationFields::is_compaction))
        else {
            return;
        };
        let compactions: Vec<&IterationFields> =
            list.iter().filter(|i| i.is_compaction()).collect();
        let sum = |count: fn(&IterationFields) -> u64| {
            compactions
                .iter()
                .fold(0u64, |n, i| n.saturating_add(count(i)))
        };
        if let Some(n) = self.input_tokens.0 {
            into.uncached = n.saturating_add(sum(|i| i.input_tokens.0.unwrap_or(0)));
        }
        if let Some(n) = self.cache_read_input_tokens.0 {
            into.cache_read = n.saturating_add(sum(|i| i.cache_read_input_tokens.0.unwrap_or(0)));
        }
        if self.cache_creation_input_tokens.0.is_some() || self.cache_creation.0.is_some() {
            // Without the TTL split, the provider's default TTL (5m) applies.
            fn split(i: &IterationFields) -> (u64, u64) {
                let written = i.written();
                i.cache_creation.0.as_ref().map_or((written, 0), |c| {
                    let m5 = c.ephemeral_5m_input_tokens.0.unwrap_or(0);
                    (m5, written.saturating_sub(m5))
                })
            }
            let top = IterationFields {
                cache_creation_input_tokens: self.cache_creation_input_tokens,
                cache_creation: self.cache_creation.clone(),
                ..IterationFields::default()
            };
            let (top_5m, top_1h) = split(&top);
            let written = sum(IterationFields::written);
            let m5 = sum(|i| split(i).0);
            into.cache_write = top.written().saturating_add(written);
            into.cache_write_5m = top_5m.saturating_add(m5);
            into.cache_write_1h = top_1h.saturating_add(written.saturating_sub(m5));
        }
        if let Some(n) = self.output_tokens.0 {
            into.output = n.saturating_add(sum(|i| i.output_tokens.0.unwrap_or(0)));
        }
        let (first, last) = (&list[0], &list[list.len() - 1]);
        into.iterations = Some(Iterations {
            first_read: first.cache_read_input_tokens.0.unwrap_or(0),
            last_read: last.cache_read_input_tokens.0.unwrap_or(0),
            last_write: last.written(),
            compactions: u32::try_from(compactions.len()).unwrap_or(u32::MAX),
        });
    }

    pub(super) fn openai_chat(&self) -> Usage {
        let details = self.prompt_tokens_details.0.as_ref();
        let cached = self
            .prompt_cache_hit_tokens
            .0
            .or_else(|| details.and_then(|d| d.cached_tokens.0))
            .unwrap_or(0);
        let written = details
            .and_then(|d| d.cache_write_tokens.0)
            .or(self.cache_write_tokens.0)
            .unwrap_or(0);
        openai(
            self.prompt_tokens.0.unwrap_or(0),
            cached,
            (written, details.map_or(0, Details::written_12h)),
            self.completion_tokens.0.unwrap_or(0),
        )
    }

    pub(super) fn openai_responses(&self) -> Usage {
        let details = self.input_tokens_details.0.as_ref();
        openai(
            self.input_tokens.0.unwrap_or(0),
            details.and_then(|d| d.cached_tokens.0).unwrap_or(0),
            (
                details.and_then(|d| d.cache_write_tokens.0).unwrap_or(0),
                details.map_or(0, Details::written_12h),
            ),
            self.output_tokens.0.unwrap_or(0),
        )
    }
}

/// A token count: an unsigned integer, else nothing (absent, null, or a value of another
/// type, which is skipped, not an error).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Count(pub(super) Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let skipped = |_: serde::de::IgnoredAny| None;
        d.deserialize_any(AnyValue(|n| Some(Count(Some(n))), skipped, PhantomData))
            .map(Option::unwrap_or_default)
    }
}

/// `T` when the value is an object, else nothing: a field of an unexpected type is skipped
/// where a `Value` of the usage would have been read past it.
#[derive(Debug, Clone)]
pub(super) struct Lenient<T>(pub(super) Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyValue(|_| None, |t| Some(Lenient(Some(t))), PhantomData))
            .map(Option::unwrap_or_default)
    }
}

/// A list of `T` when the value is an array (elements that are not objects skipped), else
/// nothing.
#[derive(Debug, Clone)]
pub(super) struct LenientList<T>(pub(super) Option<Vec<T>>);

impl<T> Default for LenientList<T> {
    fn default() -> Self {
        LenientList(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for LenientList<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct List<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for List<T> {
            type Value = LenientList<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<LenientList<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<Lenient<T>>()? {
                    out.extend(item.0);
                }
                Ok(LenientList(Some(out)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<LenientList<T>, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(LenientList(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
            fn visit_unit<E>(self) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
            fn visit_none<E>(self) -> Result<LenientList<T>, E> {
                Ok(LenientList(None))
            }
        }
        d.deserialize_any(List(PhantomData))
    }
}

/// An answer's `context_management` (Anthropic): the edits the provider applied
/// (platform.claude.com, Context editing, "Context editing response"; streamed in the final
/// `message_delta`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct ContextManagementFields {
    applied_edits: LenientList<AppliedEditFields>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub(super) struct AppliedEditFields {
    #[serde(rename = "type")]
    kind: Option<Value>,
    cleared_tool_uses: Count,
    cleared_input_tokens: Count,
}

impl ContextManagementFields {
    /// What the `clear_tool_uses_*` edits cleared, if they cleared anything.
    pub(super) fn cleared(&self) -> Option<Cleared> {
        let edits = self.applied_edits.0.as_deref()?;
        let cleared = edits
            .iter()
            .filter(|e| {
                e.kind
                    .as_ref()
                    .and_then(Value::as_str)
                    .is_some_and(crate::providers::anthropic::is_tool_clearing_edit)
            })
            .fold(Cleared::default(), |sum, e| Cleared {
                tool_uses: sum
                    .tool_uses
                    .saturating_add(e.cleared_tool_uses.0.unwrap_or(0)),
                input_tokens: sum
                    .input_tokens
                    .saturating_add(e.cleared_input_tokens.0.unwrap_or(0)),
            });
        (cleared.tool_uses > 0 || cleared.input_tokens > 0).then_some(cleared)
    }
}

/// Reads any JSON value, whole: an unsigned integer through the first function, an object
/// read as `T` through the second, anything else as nothing.
pub(super) struct AnyValue<T, N, O>(pub(super) N, pub(super) O, pub(super) PhantomData<T>);

impl<'de, V, T, N, O> serde::de::Visitor<'de> for AnyValue<T, N, O>
where
    T: Deserialize<'de>,
    N: FnOnce(u64) -> Option<V>,
    O: FnOnce(T) -> Option<V>,
{
    type Value = Option<V>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Option<V>, E> {
        Ok((self.0)(n))
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Option<V>, E> {
        Ok(u64::try_from(n).ok().and_then(self.0))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<V>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Option<V>, A::Error> {
        // Every field of the objects read here reads any value, so `T` takes the whole map.
        let t = T::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok((self.1)(t))
    }
}

/// OpenAI counts cached (and, where reported, written) tokens inside the input total:
/// `(written, of them for 12 hours)`, the split never taken above the total.
pub(super) fn openai(
    input: u64,
    cached: u64,
    (written, written_12h): (u64, u64),
    output: u64,
) -> Usage {
    Usage {
        cache_read: cached,
        cache_write: written,
        cache_write_5m: 0,
        cache_write_1h: 0,
        cache_write_12h: written_12h.min(written),
        uncached: input.saturating_sub(cached).saturating_sub(written),
        output,
        ..Usage::default()
    }
}
