//! A finished request as OpenTelemetry GenAI span attributes.
//!
//! Names follow the GenAI semantic conventions (`gen_ai.*`, development status): the
//! provider as `gen_ai.provider.name` (and the older `gen_ai.system`, which several trace
//! viewers still read), `gen_ai.usage.input_tokens` counting every input token, cached ones
//! included, with `gen_ai.usage.cache_read.input_tokens` and
//! `gen_ai.usage.cache_creation.input_tokens` beside it. What the conventions have no name
//! for (cost, savings, variant) is under `cachet.*`.

use opentelemetry::KeyValue;

use crate::route::Route;
use crate::usage::Usage;

/// Everything the span says, gathered when the response ends.
pub struct Facts<'a> {
    pub route: Route,
    pub request_model: Option<&'a str>,
    pub response_model: Option<&'a str>,
    pub usage: Option<&'a Usage>,
    pub status: u16,
    /// How the response body ended (`complete`, `upstream_cut`, ...; `refused` when cachet
    /// answered the error itself).
    pub outcome: &'a str,
    pub session: Option<&'a str>,
    pub variant: Option<&'a str>,
    pub request_id: Option<&'a str>,
}

/// The operation every generation endpoint is (Messages, Chat Completions, Responses).
const OPERATION: &str = "chat";

impl Facts<'_> {
    fn model(&self) -> Option<&str> {
        self.request_model
            .filter(|m| *m != "unknown")
            .or(self.response_model)
    }

    /// `{gen_ai.operation.name} {gen_ai.request.model}`, as the conventions name spans.
    pub fn span_name(&self) -> String {
        match self.model() {
            Some(model) => format!("{OPERATION} {model}"),
            None => OPERATION.to_string(),
        }
    }

    /// Why the request failed, when it did: the HTTP status, or how the stream broke.
    pub fn error_type(&self) -> Option<String> {
        if self.status >= 400 {
            Some(self.status.to_string())
        } else if self.outcome != "complete" {
            Some(self.outcome.to_string())
        } else {
            None
        }
    }

    pub fn attributes(&self) -> Vec<KeyValue> {
        let provider = self.route.provider.label();
        let mut a = vec![
            KeyValue::new("gen_ai.operation.name", OPERATION),
            KeyValue::new("gen_ai.provider.name", provider),
            KeyValue::new("gen_ai.system", provider),
            KeyValue::new("http.response.status_code", i64::from(self.status)),
            KeyValue::new("cachet.endpoint", self.route.endpoint.label()),
            KeyValue::new("cachet.outcome", self.outcome.to_string()),
        ];
        if let Some(model) = self.model() {
            a.push(KeyValue::new("gen_ai.request.model", model.to_string()));
        }
        if let Some(model) = self.response_model {
            a.push(KeyValue::new("gen_ai.response.model", model.to_string()));
        }
        if let Some(session) = self.session {
            a.push(KeyValue::new("gen_ai.conversation.id", session.to_string()));
        }
        if let Some(variant) = self.variant {
            a.push(KeyValue::new("cachet.variant", variant.to_string()));
        }
        if let Some(id) = self.request_id {
            a.push(KeyValue::new("cachet.upstream.request_id", id.to_string()));
        }
        if let Some(error) = self.error_type() {
            a.push(KeyValue::new("error.type", error));
        }
        if let Some(u) = self.usage {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            a.extend([
                KeyValue::new("gen_ai.usage.input_tokens", n(u.total_input())),
                KeyValue::new("gen_ai.usage.output_tokens", n(u.output)),
                KeyValue::new("gen_ai.usage.cache_read.input_tokens", n(u.cache_read)),
                KeyValue::new("gen_ai.usage.cache_creation.input_tokens", n(u.cache_write)),
                KeyValue::new(
                    "cachet.usage.cache_creation_1h.input_tokens",
                    n(u.cache_write_1h),
                ),
            ]);
            if let Some(info) = self.model().and_then(crate::models::lookup) {
                a.push(KeyValue::new("cachet.cost_usd", info.cost_usd(u).max(0.0)));
                a.push(KeyValue::new("cachet.savings_usd", info.savings_usd(u)));
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::{Endpoint, Provider};

    fn value<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a opentelemetry::Value> {
        attrs
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    #[test]
    fn input_tokens_include_cached_ones_and_cost_is_priced() {
        let usage = Usage {
            cache_read: 1000,
            cache_write: 200,
            cache_write_5m: 200,
            uncached: 30,
            output: 40,
            ..Usage::default()
        };
        let facts = Facts {
            route: Route {
                provider: Provider::Anthropic,
                endpoint: Endpoint::Messages,
            },
            request_model: Some("claude-sonnet-4-5"),
            response_model: Some("claude-sonnet-4-5-20250929"),
            usage: Some(&usage),
            status: 200,
            outcome: "complete",
            session: Some("s-1"),
            variant: None,
            request_id: Some("req_1"),
        };
        let a = facts.attributes();
        assert_eq!(
            value(&a, "gen_ai.usage.input_tokens"),
            Some(&opentelemetry::Value::I64(1230))
        );
        let cost = match value(&a, "cachet.cost_usd") {
            Some(opentelemetry::Value::F64(c)) => *c,
            other => panic!("{other:?}"),
        };
        let info = crate::models::lookup("claude-sonnet-4-5").unwrap();
        assert_eq!(cost, info.cost_usd(&usage));
        assert!(value(&a, "error.type").is_none());
        assert_eq!(facts.span_name(), "chat claude-sonnet-4-5");
    }

    #[test]
    fn a_broken_stream_is_an_error_even_after_a_200() {
        let facts = Facts {
            route: Route {
                provider: Provider::OpenAi,
                endpoint: Endpoint::Chat,
            },
            request_model: Some("unknown"),
            response_model: None,
            usage: None,
            status: 200,
            outcome: "upstream_cut",
            session: None,
            variant: None,
            request_id: None,
        };
        assert_eq!(facts.error_type().as_deref(), Some("upstream_cut"));
        assert_eq!(facts.span_name(), "chat");
    }
}
