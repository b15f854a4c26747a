//! After the response: `context(turn_end)` handlers with the assembled assistant message
//! (their patches persisted), then the request's entry in the session log, with the
//! prefix-break diagnosis against the session's previous request.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};

use super::assemble::assistant_message;
use super::handlers::Shaping;
use super::history::HistoryMap;
use super::Pipeline;
use crate::envelope::Envelope;
use crate::metrics::{BreakReason, BreakSection};
use crate::policy::{ContextReason, TemplateVars};
use crate::provider::{Endpoint, Route};
use crate::session::{self, Entry, RequestDraft, SessionContext};
use crate::tap::TapResult;

/// What `prepare` hands over to the end of the response.
pub struct AfterResponse {
    pub route: Route,
    pub model: String,
    pub client: &'static str,
    pub ctx: SessionContext,
    pub env: Envelope,
    pub map: HistoryMap,
    pub vars: TemplateVars,
    pub policy_names: Vec<String>,
    /// The payload forwarded upstream.
    pub sent: Bytes,
    pub variant: Option<String>,
    /// A `context(turn_end)` handler or hook will want the assistant message.
    pub wants_assistant: bool,
}

impl Pipeline {
    /// Run after the response body ended (in its own task: never delays the client).
    pub async fn after_response(
        self: Arc<Self>,
        mut after: AfterResponse,
        result: TapResult,
        status: u16,
    ) {
        let usage = result.usage;
        if after.wants_assistant && (200..300).contains(&status) {
            if let Some(assistant) = assistant_message(after.route.endpoint, &result) {
                self.turn_end(&mut after, &assistant, usage).await;
            }
        }
        let Some(store) = self.store.clone() else {
            return;
        };
        let sent: Value = serde_json::from_slice(&after.sent).unwrap_or(Value::Null);
        let messages = super::client_history(after.route.endpoint, &sent);
        let system = system_of(after.route.endpoint, &sent);
        let tools = sent.get("tools").cloned();
        let draft = RequestDraft {
            request_index: after.ctx.request_index,
            turn_index: Some(after.vars.turn_index),
            model: &after.model,
            provider: after.route.provider.label(),
            endpoint: after.route.endpoint.label(),
            client: Some(after.client),
            sent: &messages,
            system: system.as_ref(),
            tools: tools.as_ref(),
            usage,
            status: Some(status),
            breaks: None,
            variant: after.variant.clone(),
        };
        let (mut record, blobs) = session::compact_request(&after.ctx.log, &draft);
        if let Some(diagnosis) = prefix_break(&after.ctx.log, &record, &after.model) {
            let section = BreakSection::from_label(diagnosis["section"].as_str().unwrap_or(""));
            let reason = match diagnosis["reason"].as_str().unwrap_or("") {
                // This diagnosis names every message change alike; the edit is the usual one.
                "messages_changed" => BreakReason::MessageEdited,
                other => BreakReason::from_label(other),
            };
            self.metrics
                .count_prefix_break(after.route.provider, section, reason);
            record.breaks = Some(diagnosis);
        }
        let result = async {
            store.put_blobs(&blobs).await?;
            store
                .append(&after.ctx.id.id, &[Entry::Request(record)])
                .await
        }
        .await;
        if let Err(e) = result {
            // The response is already with the client; only the timeline loses an entry.
            let _ = self.store_failed("record", &e);
        }
    }

    async fn turn_end(
        &self,
        after: &mut AfterResponse,
        assistant: &Value,
        usage: Option<crate::usage::Usage>,
    ) {
        let facts_policies: Vec<_> = self
            .policies
            .iter()
            .filter(|p| after.policy_names.contains(&p.name))
            .collect();
        let usage_json = serde_json::to_value(usage.unwrap_or_default()).unwrap_or(Value::Null);
        let mut shaping = Shaping {
            env: &mut after.env,
            map: &mut after.map,
        };
        let persisted = match self
            .run_context(
                &facts_policies,
                ContextReason::TurnEnd,
                &mut shaping,
                &after.vars,
                Some((assistant, &usage_json)),
            )
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(session = %after.ctx.id.id, "turn_end handlers failed: {}", e.message);
                return;
            }
        };
        if let Err(e) = self
            .persist(&after.ctx, ContextReason::TurnEnd, persisted)
            .await
        {
            tracing::warn!("turn_end patches not persisted: {}", e.message);
        }
    }
}

/// The system prompt as sent, for the request record (Claude Code's per-request billing
/// block left out: it changes every time and is not part of the cache key).
fn system_of(endpoint: Endpoint, sent: &Value) -> Option<Value> {
    match endpoint {
        Endpoint::Responses => sent.get("instructions").cloned(),
        Endpoint::Chat => None,
        _ => match sent.get("system")? {
            Value::Array(blocks) => Some(Value::Array(
                blocks
                    .iter()
                    .filter(|b| {
                        !b.get("text")
                            .and_then(Value::as_str)
                            .is_some_and(|t| t.starts_with("x-anthropic-billing-header:"))
                    })
                    .cloned()
                    .collect(),
            )),
            other => Some(other.clone()),
        },
    }
}

/// Where this request's prefix first differs from the session's previous request, in the
/// vocabulary of the provider's cache diagnostics (`model_changed`, `tools_changed`,
/// `system_changed`, `messages_changed`), or `None` when it extends it.
fn prefix_break(log: &[Entry], record: &session::RequestRecord, model: &str) -> Option<Value> {
    let prev = log.iter().rev().find_map(|e| match e {
        Entry::Request(r) => Some(r),
        _ => None,
    })?;
    if prev.model != model {
        return Some(json!({"section": "model", "reason": "model_changed",
            "detail": format!("model changed from {} to {model}", prev.model)}));
    }
    if prev.tools_key != record.tools_key {
        return Some(
            json!({"section": "tools", "reason": "tools_changed", "detail": "tool definitions changed"}),
        );
    }
    if prev.system_key != record.system_key {
        return Some(
            json!({"section": "system", "reason": "system_changed", "detail": "system prompt changed"}),
        );
    }
    if record.sent.extends == Some(prev.request_index) && record.sent.base == prev.sent.count {
        return None;
    }
    let before = session::sent_keys(log, prev.request_index).unwrap_or_default();
    let now = current_keys(log, record);
    let index = before
        .iter()
        .zip(now.iter())
        .take_while(|(a, b)| a == b)
        .count();
    if index == before.len() && now.len() >= before.len() {
        return None;
    }
    let detail = if index < now.len() {
        format!("message {index} edited")
    } else {
        format!(
            "history shortened from {} to {} messages",
            before.len(),
            now.len()
        )
    };
    Some(
        json!({"section": "messages", "reason": "messages_changed", "message_index": index, "detail": detail}),
    )
}

/// The full key list of a record not yet in the log.
fn current_keys(log: &[Entry], record: &session::RequestRecord) -> Vec<session::MessageKey> {
    let mut keys = match record.sent.extends {
        Some(base) => session::sent_keys(log, base).unwrap_or_default(),
        None => Vec::new(),
    };
    keys.truncate(record.sent.base);
    for hex_key in &record.sent.keys {
        let mut key = [0u8; 32];
        if hex::decode_to_slice(hex_key, &mut key).is_ok() {
            keys.push(key);
        }
    }
    keys
}
