//! Finish: once the response body has ended, count the request in metrics and hand its
//! trace record to the recorder; then, in a task of its own (never delaying the client),
//! run `context(turn_end)` handlers with the assembled assistant message (their patches
//! persisted) and write the request's entry in the session log, with the prefix-break
//! diagnosis against the previous request of its lane.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value};

use super::assemble::assistant_message;
use super::handlers::Shaping;
use super::history::HistoryMap;
use super::shape::{client_history, Shaped};
use super::{Pipeline, RequestCtx};
use crate::envelope::Envelope;
use crate::policy::{ContextReason, TemplateVars};
use crate::providers::{Endpoint, Route};
use crate::replay::trace::Record;
use crate::session::{self, Entry, RequestDraft, SessionContext};
use crate::tap::{Outcome, TapResult};

/// What is left to do once the response has ended.
pub enum After {
    /// Nothing: not a generation request, or neither a policy nor monitoring applies.
    Nothing,
    /// Monitoring only: the request went out as the client sent it; its session entry and
    /// diagnosis are computed from those bytes.
    Observe,
    /// A shaped request: its session, envelope and handlers.
    Shaped(Box<ShapedAfter>),
}

/// What shaping hands over to the end of the response.
pub struct ShapedAfter {
    pub ctx: SessionContext,
    pub env: Envelope,
    pub map: HistoryMap,
    pub vars: TemplateVars,
    pub policy_names: Vec<String>,
    /// Messages of the request-only tail at the end of what was sent.
    pub uncached_tail: usize,
    pub variant: Option<String>,
    /// A `context(turn_end)` handler or hook will want the assistant message.
    pub wants_assistant: bool,
}

impl Pipeline {
    /// The response body ended: metrics and the trace record now, the rest in a task.
    pub(super) fn finish(
        self: Arc<Self>,
        ctx: RequestCtx,
        shaped: Shaped,
        trace: Option<Record>,
        status: u16,
        sent: Instant,
        result: TapResult,
    ) {
        // An unchecked body leaves the model to the response.
        let model = match (&result.model, ctx.model.as_str()) {
            (Some(answered), "unknown") => answered.clone(),
            _ => ctx.model.clone(),
        };
        self.count_finished(ctx.route, &model, &shaped.variant, status, sent, &result);
        if let (Some(recorder), Some(mut record)) = (&self.recorder, trace) {
            record.usage = result.usage;
            record.status = Some(status);
            recorder.record(record);
        }
        if matches!(shaped.after, After::Nothing) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    self.after_response(ctx, model, shaped, result, status)
                        .await
                });
            }
            Err(_) => {
                tracing::warn!("response ended outside the runtime; session entry not recorded")
            }
        }
    }

    fn count_finished(
        &self,
        route: Route,
        model: &str,
        variant: &str,
        status: u16,
        sent: Instant,
        result: &TapResult,
    ) {
        let metrics = &self.metrics;
        let labels = [route.provider.label(), route.endpoint.label()];
        metrics
            .route(route.provider, route.endpoint)
            .total
            .observe(sent.elapsed().as_secs_f64());
        if result.outcome != Outcome::Complete {
            metrics
                .stream_errors
                .with_label_values(&[labels[0], labels[1], result.outcome.label()])
                .inc();
        }
        let status_label = http::StatusCode::from_u16(status)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| status.to_string());
        metrics.record_request(
            route.provider,
            route.endpoint,
            model,
            &status_label,
            variant,
            result.usage.as_ref(),
        );
        tracing::info!(
            provider = labels[0],
            endpoint = labels[1],
            status,
            outcome = result.outcome.label(),
            cache_read = result.usage.map(|u| u.cache_read),
            cache_write = result.usage.map(|u| u.cache_write),
            uncached = result.usage.map(|u| u.uncached),
            ms = sent.elapsed().as_millis() as u64,
            "request done"
        );
    }

    /// Off the request path: `context(turn_end)`, then the session log entry.
    async fn after_response(
        self: Arc<Self>,
        ctx: RequestCtx,
        model: String,
        shaped: Shaped,
        result: TapResult,
        status: u16,
    ) {
        let usage = result.usage;
        let complete = result.outcome == Outcome::Complete && (200..300).contains(&status);
        let (session_ctx, uncached_tail, variant, turn_index) = match shaped.after {
            After::Nothing => return,
            After::Observe => {
                let Ok(value) = serde_json::from_slice::<Value>(&ctx.body) else {
                    return;
                };
                let history = client_history(ctx.route.endpoint, &value);
                let id = session::identify(
                    &ctx.parts.headers,
                    &value,
                    ctx.route.provider,
                    ctx.route.endpoint,
                );
                let Some(store) = &self.store else { return };
                let session_ctx = match session::prepare(store.as_ref(), id, &history).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = self.store_failed("load", &e);
                        return;
                    }
                };
                let turn = session::turns::turn_index(&history, ctx.route.endpoint);
                (session_ctx, 0, None, turn)
            }
            After::Shaped(mut after) => {
                // A turn_end handler sees only a complete answer: a cut or abandoned stream
                // would hand it a partial message, and its patches would be persisted.
                if after.wants_assistant && complete {
                    if let Some(assistant) = assistant_message(ctx.route.endpoint, &result) {
                        self.turn_end(&mut after, &assistant, usage).await;
                    }
                }
                let turn = after.vars.turn_index;
                (after.ctx, after.uncached_tail, after.variant, turn)
            }
        };
        let Some(store) = self.store.clone() else {
            return;
        };
        let _ = uncached_tail;
        let sent_bytes: &Bytes = &shaped.body;
        let sent: Value = serde_json::from_slice(sent_bytes).unwrap_or(Value::Null);
        let messages = client_history(ctx.route.endpoint, &sent);
        let system = system_of(ctx.route.endpoint, &sent);
        let tools = sent.get("tools").cloned();
        let draft = RequestDraft {
            request_index: session_ctx.request_index,
            turn_index: Some(turn_index),
            model: &model,
            provider: ctx.route.provider.label(),
            endpoint: ctx.route.endpoint.label(),
            client: Some(ctx.client.label()),
            sent: &messages,
            system: system.as_ref(),
            tools: tools.as_ref(),
            usage,
            status: Some(status),
            breaks: None,
            variant,
        };
        let (mut record, blobs) = session::compact_request(&session_ctx.log, &draft);
        if let Some(diagnosis) = prefix_break(&session_ctx.log, &record, &model) {
            let section = diagnosis["section"]
                .as_str()
                .unwrap_or("messages")
                .to_string();
            self.metrics
                .prefix_breaks
                .with_label_values(&[ctx.route.provider.label(), &section])
                .inc();
            record.breaks = Some(diagnosis);
        }
        let result = store
            .record(&session_ctx.id.id, &Entry::Request(record), &blobs)
            .await;
        if let Err(e) = result {
            // The response is already with the client; only the timeline loses an entry.
            let _ = self.store_failed("record", &e);
        }
    }

    async fn turn_end(
        &self,
        after: &mut ShapedAfter,
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
fn prefix_break(
    log: &session::SessionLog,
    record: &session::RequestRecord,
    model: &str,
) -> Option<Value> {
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
fn current_keys(
    log: &session::SessionLog,
    record: &session::RequestRecord,
) -> Vec<session::MessageKey> {
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
