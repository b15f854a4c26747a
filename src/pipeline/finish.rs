//! Finish: the one place an exchange ends, answered or not. The request is counted, its
//! span closed and its trace record handed to the recorder here, from the exchange; an
//! answered request that has a session to record then goes to the after-response queue,
//! which writes its session record (and runs `context(turn_end)`) off the request path.

use std::sync::Arc;

use super::exchange::{After, Answer, Exchange, Outcome};
use super::Pipeline;
use crate::tap::Outcome as BodyEnd;

impl Pipeline {
    /// The exchange has ended (`outcome`): count it, close its span and write its trace
    /// record now; queue its session record when there is one to write.
    pub fn finish(self: Arc<Self>, mut ex: Exchange, outcome: Outcome) {
        let answer = match outcome {
            Outcome::Failed(err) => {
                self.count(&ex, err.status().as_u16(), None);
                self.write_trace(&mut ex, err.status().as_u16(), None);
                ex.telemetry
                    .take()
                    .refused(err.status().as_u16(), &err.message);
                return;
            }
            Outcome::Answered(answer) => answer,
        };
        let mut answer = answer;
        // What the answer bills by the call's method (a Gemini cache's get answers the same
        // resource its create did).
        let usage = answer.tap.usage.take();
        answer.tap.usage = crate::providers::bill_of(ex.route.endpoint, &ex.parts.method, usage);
        // An unchecked body leaves the model to its path (Bedrock, Vertex), else to the
        // response.
        if ex.model.is_none() {
            ex.model = ex.path_model.clone().or_else(|| answer.tap.model.clone());
        }
        self.count(&ex, answer.status, Some(&answer));
        ex.telemetry.finish(crate::telemetry::Finished {
            status: answer.status,
            outcome: answer.tap.outcome.label(),
            usage: answer.tap.usage.as_ref(),
            response_model: answer.tap.model.as_deref(),
        });
        self.read_assistant(&ex, &mut answer);
        self.remember_gemini_cache(&ex, &answer);
        self.write_trace(&mut ex, answer.status, Some(&answer));
        if let After::Shaped(shaping) = &mut ex.after {
            // Known before the client can send its next request: that request names this
            // answer in `previous_response_id`, or in its own diagnostics.
            let id = answer.tap.response_id.as_deref();
            let (env, session) = (ex.env.as_ref(), ex.session.as_ref());
            if let (Some(env), Some(session)) = (env, session) {
                let namespace = ex.key.as_deref();
                self.remember_answer(env, id, &session.id.id, ex.turn_index, namespace);
                if let (Some(lane), Some(id)) = (shaping.diagnosis_lane, id) {
                    let key = (session.id.id.clone(), lane);
                    let ids = self.response_ids.clone();
                    let id = id.to_string();
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        rt.spawn(async move { ids.insert(key, id).await });
                    }
                }
            }
            // Counted now, before the client can send its next request; the keep-warm is
            // armed later, off the request path.
            if shaping.keep_warm().is_some() {
                shaping.arrived_by_answer = self.arrivals.latest();
            }
        }
        if matches!(ex.after, After::Nothing) {
            return;
        }
        let queue = self
            .after_queue
            .get_or_init(|| super::queue::AfterQueue::start(Arc::downgrade(&self)));
        if !queue.submit(ex, answer) {
            self.metrics.session_records_dropped.inc();
            tracing::warn!("after-response queue full; the session log misses one request");
        }
    }

    /// Count a request in the metrics: the one place every request is counted, answered
    /// (`answer`) or answered by cachet itself.
    fn count(&self, ex: &Exchange, status: u16, answer: Option<&Answer>) {
        let route = ex.route;
        let metrics = &self.metrics;
        let status_label = http::StatusCode::from_u16(status)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| status.to_string());
        let Some(answer) = answer else {
            // Refused, or no answer came: not an A/B arm's measurement.
            metrics.record_request(
                route.provider,
                route.endpoint,
                ex.model_label(),
                &status_label,
                crate::metrics::NO_VARIANT,
                ex.key_label(),
                None,
            );
            return;
        };
        let tap = &answer.tap;
        let labels = [route.provider.label(), route.endpoint.label()];
        if let Some(sent) = ex.sent_at {
            metrics
                .route(route.provider, route.endpoint)
                .total
                .observe(sent.elapsed().as_secs_f64());
        }
        if tap.outcome != BodyEnd::Complete {
            metrics
                .stream_errors
                .with_label_values(&[labels[0], labels[1], tap.outcome.label()])
                .inc();
        }
        if tap.usage.is_none() && route.endpoint.bills(status) {
            // Billed, but unmeasured: said in a series of its own rather than left out.
            metrics
                .usage_missing
                .with_label_values(&[labels[0], labels[1], tap.outcome.label()])
                .inc();
        }
        metrics.record_request(
            route.provider,
            route.endpoint,
            ex.model_label(),
            &status_label,
            ex.variant_label(),
            ex.key_label(),
            tap.usage.as_ref(),
        );
    }

    /// Hand the request's trace record to the recorder, with what the answer said (a request recorded before it failed is still recorded, with the status
    /// cachet answered).
    fn write_trace(&self, ex: &mut Exchange, status: u16, answer: Option<&Answer>) {
        let Some(mut record) = ex.trace.take() else {
            return;
        };
        record.status = Some(status);
        if let Some(answer) = answer {
            record.usage = answer.tap.usage;
            record.response_id = answer.tap.response_id.clone();
            if record.may_be_continued() && (200..300).contains(&status) {
                record.output = answer.assistant.clone();
            }
        }
        if let Some(recorder) = &self.recorder {
            recorder.record(record);
        }
    }

    /// Assemble the assistant message once, when the trace record or shaping reads it; the
    /// tapped body and events it came from are let go of then.
    fn read_assistant(&self, ex: &Exchange, answer: &mut Answer) {
        let for_trace = (200..300).contains(&answer.status) && self.keeps_output(ex);
        let for_shaping = ex.wants_assistant() && answer.is_complete();
        if !for_trace && !for_shaping {
            return;
        }
        let tap = &mut answer.tap;
        answer.assistant = crate::providers::api(ex.route.endpoint)
            .assistant_message(tap.json_body.as_deref(), &tap.kept_events);
        tap.json_body = None;
        tap.kept_events = Vec::new();
    }

    /// Offline replay: the session record of a request shaped with
    /// [`Pipeline::shape_request`], answered with `usage` at the pipeline clock's time, so
    /// that later requests of the replay see the session's log as they would live. No
    /// `context(turn_end)` handler runs and no keep-warm is armed: the answer itself is not
    /// known.
    pub async fn record_replayed(
        self: Arc<Self>,
        mut ex: Exchange,
        usage: Option<crate::usage::Usage>,
    ) {
        let answer = Answer::new(200, crate::tap::TapResult::with_usage(usage));
        if self.identify_answered(&mut ex, &answer).await {
            self.after_response(ex, answer, super::keep_warm::KeepWarm::Never)
                .await;
        }
    }
}

/// The `model` string of a request body. Only that field is built: serde skips the rest of
/// the body without making a `Value` of it.
pub(super) fn requested_model(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Model {
        model: Option<String>,
    }
    // A derived struct also reads a JSON array positionally; a body must be an object.
    let is_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    is_object
        .then(|| serde_json::from_slice::<Model>(body).ok())
        .flatten()
        .and_then(|m| m.model)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::route::{Endpoint, Provider, Route};
    use std::sync::Arc;

    const ANTHROPIC: Route = Route {
        provider: Provider::Anthropic,
        endpoint: Endpoint::Messages,
    };

    /// A pipeline with the shipped `anthropic-auto-breakpoints` policy and its own store,
    /// on a runtime of the calling thread (so that the allocation meter sees its work).
    fn shaping_pipeline(
        store: &std::path::Path,
    ) -> (tokio::runtime::Runtime, Arc<super::Pipeline>) {
        let mut config = crate::config::Config::default();
        config.sessions.store = format!("{}/", store.display());
        let policy = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/anthropic-auto-breakpoints.toml"
        );
        let policies = crate::policy::load_policies(&[policy.into()], &[]).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let pipeline = rt.block_on(super::Pipeline::new(
            config,
            policies,
            metrics,
            None,
            Default::default(),
        ));
        (rt, Arc::new(pipeline.unwrap()))
    }

    /// Claude Code's shape: a system prompt, tools, and `messages`; gathered as the server
    /// gathers a large body, into its own buffer with room after it.
    fn claude_code_body(messages: Vec<Value>) -> bytes::Bytes {
        let body = serde_json::to_vec(&serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
            "messages": messages,
        }))
        .unwrap();
        let mut gathered = bytes::BytesMut::with_capacity(body.len() + 64 * 1024);
        gathered.extend_from_slice(&body);
        gathered.freeze()
    }

    fn turns(n: usize, text: &str) -> Vec<Value> {
        (0..n)
            .map(|i| {
                let role = ["user", "assistant"][i % 2];
                serde_json::json!({"role": role, "content": format!("{i}: {text}")})
            })
            .collect()
    }

    fn session_header(id: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-cachet-session", id.parse().unwrap());
        headers
    }

    /// Identifying a shaped request takes its session from what shaping knew, and copies
    /// nothing of its history (an agent's history of 20,000 steps is 1.3 MB of hashes).
    #[test]
    fn a_shaped_request_is_identified_without_copying_its_history() {
        let dir = tempfile::tempdir().unwrap();
        let (rt, pipeline) = shaping_pipeline(dir.path());
        let body = claude_code_body(turns(20_000, "ok"));
        let headers = session_header("long-shaped");
        let model = "claude-sonnet-4-5";
        let mut ex = rt
            .block_on(pipeline.shape_request(ANTHROPIC, headers, body, model))
            .unwrap();
        let answer = super::Answer::new(200, crate::tap::TapResult::with_usage(None));
        let (identified, held) = crate::alloc_meter::peak_during(|| {
            rt.block_on(pipeline.identify_answered(&mut ex, &answer))
        });
        assert!(identified);
        assert_eq!(ex.session_id(), Some("long-shaped"));
        assert!(
            held < 4096,
            "{held} bytes held to identify a shaped request"
        );
    }

    /// A large shaped body is recorded from the client's own buffer, written over once the
    /// answer is in, not from a copy of it: the body as sent is never in memory twice.
    #[test]
    fn a_large_shaped_body_is_recorded_without_a_copy_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let (rt, pipeline) = shaping_pipeline(dir.path());
        let file = "fn main() { println!(\"hello\"); }\n".repeat(30_000);
        let body = claude_code_body(turns(6, &file));
        let len = body.len();
        let headers = session_header("large-shaped");
        let model = "claude-sonnet-4-5";
        let route = ANTHROPIC;
        let shaped = rt
            .block_on(pipeline.shape_request(route, headers, body, model))
            .unwrap();
        assert!(
            shaped.payload.pieces().len() > 1,
            "the policy placed markers"
        );
        // What went upstream, as its messages' content addresses: the record must hold them.
        let sent: Value = serde_json::from_slice(&shaped.payload.to_bytes()).unwrap();
        let sent_keys: Vec<_> = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(crate::providers::cache_key::message_key)
            .collect();
        assert!(sent.to_string().contains("cache_control"));
        let usage = crate::usage::Usage::default();
        let ((), peak) = crate::alloc_meter::peak_during(|| {
            rt.block_on(pipeline.clone().record_replayed(shaped, Some(usage)))
        });
        let store = pipeline.store.clone().unwrap();
        let log = rt.block_on(store.load("large-shaped")).unwrap();
        let recorded = log.iter().find_map(|entry| match entry {
            crate::session::Entry::Request(r) => Some(r.sent.keys.clone()),
            _ => None,
        });
        assert_eq!(
            recorded,
            Some(sent_keys),
            "the request is recorded as it was sent"
        );
        assert!(
            peak < len / 4,
            "{peak} bytes held at once for a {len}-byte body"
        );
    }

    static RELEASED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn count_release() {
        RELEASED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Once a body of tens of MB has been let go of, the allocator is asked to give its
    /// pages back before the record is made (on whichever thread it runs); a usual body
    /// leaves them for the next requests.
    #[test]
    fn a_very_large_shaped_body_gives_freed_memory_back() {
        crate::memory::set_release(count_release);
        let released = || RELEASED.load(std::sync::atomic::Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        let (rt, pipeline) = shaping_pipeline(dir.path());
        let model = "claude-sonnet-4-5";
        let record = |name: &str, body: bytes::Bytes| {
            let headers = session_header(name);
            let shaped = rt
                .block_on(pipeline.shape_request(ANTHROPIC, headers, body, model))
                .unwrap();
            let usage = Some(crate::usage::Usage::default());
            let before = released();
            rt.block_on(pipeline.clone().record_replayed(shaped, usage));
            released() - before
        };
        let file = "fn main() { println!(\"hello\"); }\n".repeat(30_000);
        let usual = claude_code_body(turns(2, &file));
        assert_eq!(record("usual", usual), 0, "a usual body leaves its pages");
        let large = claude_code_body(turns(9, &file));
        let len = large.len();
        assert!(len >= crate::memory::RELEASE_FROM);
        assert_eq!(
            record("large", large),
            1,
            "a {len}-byte body gives its pages back"
        );
    }

    /// As the whole-body reading answered, on bodies as clients send them and odd ones.
    /// (A body naming `model` twice, which no client sends, reads no model here where a
    /// `Value` kept the last one.)
    #[test]
    fn requested_model_equals_the_value_reading() {
        fn from_value(body: &[u8]) -> Option<String> {
            serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned))
        }
        let fixtures =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/clients"))
                .unwrap()
                .map(|e| std::fs::read(e.unwrap().path()).unwrap());
        let odd: Vec<Vec<u8>> = [
            r#"{"messages":[{"role":"user","content":"hi","model":"inner"}],"model":"claude-opus-4-5"}"#,
            r#" {"model":"gpt-\u0035"} "#,
            r#"{"model":7,"messages":[]}"#,
            r#"{"model":null}"#,
            r#"{"messages":[]}"#,
            r#"["claude-opus-4-5"]"#,
            r#""model""#,
            r#"{"model":"x""#,
            "",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let mut named = 0;
        for body in fixtures.chain(odd) {
            let ours = super::requested_model(&body);
            assert_eq!(
                ours,
                from_value(&body),
                "{}",
                String::from_utf8_lossy(&body)
            );
            named += usize::from(ours.is_some());
        }
        assert!(named >= 10, "the client fixtures name their models");
    }
}
