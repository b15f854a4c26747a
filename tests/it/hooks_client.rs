//! The hook client against a real hook server started in the test (127.0.0.1, port 0).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use cachet::hooks::{HookClient, HookOutcome};
use cachet::patch::Op;
use cachet::policy::{ContextReason, HookEvent, HookSpec, OnError};
use cachet::route::{Endpoint, Provider};

/// How the test server answers.
#[derive(Clone)]
enum Reply {
    Answer(u16, &'static str),
    Hang,
}

/// Start a hook server; returns its address and the events it received.
async fn hook_server(reply: Reply) -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let reply = reply.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let reply = reply.clone();
                    let log = log.clone();
                    async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        log.lock()
                            .unwrap()
                            .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                        match reply {
                            Reply::Answer(status, text) => Ok::<_, Infallible>(
                                Response::builder()
                                    .status(StatusCode::from_u16(status).unwrap())
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from_static(text.as_bytes())))
                                    .unwrap(),
                            ),
                            Reply::Hang => std::future::pending().await,
                        }
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn hook(addr: SocketAddr, on_error: OnError, timeout_ms: u64) -> HookSpec {
    HookSpec {
        name: "test#0".into(),
        url: reqwest::Url::parse(&format!("http://{addr}/hook?token=secret")).unwrap(),
        events: HookEvent::ALL.to_vec(),
        timeout: Duration::from_millis(timeout_ms),
        on_error,
    }
}

fn envelope() -> Value {
    json!({"system": {"parts": [{"name": "base", "text": "You are pi."}], "compiled": "You are pi."},
        "tools": [], "messages": {"cached": [], "uncached": []}, "options": {}, "meta": {}})
}

/// [`envelope`] as the JSON text the client sends.
fn envelope_text() -> Vec<u8> {
    serde_json::to_vec(&envelope()).unwrap()
}

#[tokio::test]
async fn context_patch_is_returned_and_the_event_has_the_contract_shape() {
    let (addr, seen) = hook_server(Reply::Answer(
        200,
        r#"{"patch":[{"op":"messages_uncached_append","messages":[{"role":"user","content":"hint"}]}],"transformerName":"hinter","display":{"title":"Hint"}}"#,
    ))
    .await;
    let client = HookClient::new().unwrap();
    let call = client
        .call_context(
            &hook(addr, OnError::Continue, 5_000),
            ContextReason::TurnEnd,
            &envelope_text(),
            Some(&json!({"role": "assistant", "content": "done"})),
            Some(&json!({"input_tokens": 10})),
        )
        .await;
    assert_eq!(call.hook, "test#0");
    let HookOutcome::Patch(result) = call.outcome else {
        panic!("expected a patch, got {:?}", call.outcome)
    };
    assert_eq!(result.transformer_name.as_deref(), Some("hinter"));
    assert_eq!(result.patch[0].name(), "messages_uncached_append");
    let events = seen.lock().unwrap().clone();
    assert_eq!(
        events,
        vec![
            json!({"type": "context", "reason": "turn_end", "state": {"envelope": envelope()},
            "assistant": {"role": "assistant", "content": "done"}, "usage": {"input_tokens": 10}})
        ]
    );
}

#[tokio::test]
async fn no_content_means_no_change() {
    let (addr, _) = hook_server(Reply::Answer(204, "")).await;
    let call = HookClient::new()
        .unwrap()
        .call_context(
            &hook(addr, OnError::Fail, 5_000),
            ContextReason::Ephemeral,
            &envelope_text(),
            None,
            None,
        )
        .await;
    assert_eq!(call.outcome, HookOutcome::NoChange);
    assert!(!call.is_failure());
}

#[tokio::test]
async fn before_provider_request_replacement_and_json_patch() {
    let (addr, seen) = hook_server(Reply::Answer(
        200,
        r#"{"payload":{"model":"m","temperature":0}}"#,
    ))
    .await;
    let client = HookClient::new().unwrap();
    let payload = json!({"model": "m"});
    let call = client
        .call_before_provider_request(
            &hook(addr, OnError::Continue, 5_000),
            Provider::Anthropic,
            Endpoint::Messages,
            &serde_json::to_vec(&payload).unwrap(),
        )
        .await;
    let HookOutcome::Payload(replacement) = call.outcome else {
        panic!("expected a payload, got {:?}", call.outcome)
    };
    assert_eq!(&replacement[..], br#"{"model":"m","temperature":0}"#);
    assert_eq!(
        seen.lock().unwrap()[0],
        json!({"type": "before_provider_request", "provider": "anthropic",
            "endpoint": "messages", "payload": {"model": "m"}})
    );

    let (addr, _) = hook_server(Reply::Answer(
        200,
        r#"{"json_patch":[{"op":"add","path":"/metadata","value":{"user_id":"s"}}]}"#,
    ))
    .await;
    let call = client
        .call_before_provider_request(
            &hook(addr, OnError::Continue, 5_000),
            Provider::OpenAi,
            Endpoint::Responses,
            &serde_json::to_vec(&payload).unwrap(),
        )
        .await;
    let HookOutcome::JsonPatch(patch) = call.outcome else {
        panic!("expected a JSON Patch, got {:?}", call.outcome)
    };
    let mut edited = payload.clone();
    json_patch::patch(&mut edited, &patch).unwrap();
    assert_eq!(edited, json!({"model": "m", "metadata": {"user_id": "s"}}));
}

#[tokio::test]
async fn server_error_fails_open_or_closed_per_on_error() {
    let (addr, _) = hook_server(Reply::Answer(500, r#"{"error":"boom"}"#)).await;
    let client = HookClient::new().unwrap();
    for on_error in [OnError::Continue, OnError::Fail] {
        let call = client
            .call_context(
                &hook(addr, on_error, 5_000),
                ContextReason::BeforeRequest,
                &envelope_text(),
                None,
                None,
            )
            .await;
        assert!(call.is_failure());
        assert_eq!(
            call.outcome,
            HookOutcome::Failed {
                on_error,
                message: "hook `test#0`: answered HTTP 500 (expected 200 with JSON, or 204)".into()
            }
        );
        assert_eq!(call.fail_closed().is_some(), on_error == OnError::Fail);
    }
}

#[tokio::test]
async fn a_hook_that_never_answers_times_out() {
    let (addr, _) = hook_server(Reply::Hang).await;
    let call = HookClient::new()
        .unwrap()
        .call_context(
            &hook(addr, OnError::Fail, 50),
            ContextReason::Ephemeral,
            &envelope_text(),
            None,
            None,
        )
        .await;
    assert_eq!(
        call.outcome,
        HookOutcome::Failed {
            on_error: OnError::Fail,
            message: "hook `test#0`: no answer within 50 ms".into()
        }
    );
}

#[tokio::test]
async fn malformed_answers_are_failures_with_the_reason() {
    let client = HookClient::new().unwrap();
    let cases = [
        (
            "not json",
            "hook `test#0`: malformed answer: expected ident at line 1 column 2",
        ),
        (
            r#"{"patch":[{"op":"system_nuke"}]}"#,
            "hook `test#0`: malformed answer: unknown variant `system_nuke`",
        ),
        (
            r#"["patch"]"#,
            "hook `test#0`: malformed answer: expected a JSON object like {\"patch\": [...]}",
        ),
    ];
    for (body, expected) in cases {
        let (addr, _) = hook_server(Reply::Answer(200, body)).await;
        let call = client
            .call_context(
                &hook(addr, OnError::Continue, 5_000),
                ContextReason::Ephemeral,
                &envelope_text(),
                None,
                None,
            )
            .await;
        let HookOutcome::Failed { on_error, message } = &call.outcome else {
            panic!("expected a failure for {body}, got {:?}", call.outcome)
        };
        assert_eq!(*on_error, OnError::Continue);
        assert!(message.starts_with(expected), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }
}

#[tokio::test]
async fn connection_refused_is_a_failure_without_the_url() {
    // Bind then drop a listener: nothing listens on that port any more.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let call = HookClient::new()
        .unwrap()
        .call_context(
            &hook(addr, OnError::Continue, 5_000),
            ContextReason::Ephemeral,
            &envelope_text(),
            None,
            None,
        )
        .await;
    let HookOutcome::Failed { message, .. } = &call.outcome else {
        panic!("expected a failure, got {:?}", call.outcome)
    };
    assert!(
        message.starts_with("hook `test#0`: cannot connect: "),
        "{message}"
    );
    assert!(!message.contains("secret"), "{message}");
}

#[tokio::test]
async fn a_patch_without_invalidate_reason_is_parsed_then_refused_by_check_reason() {
    let (addr, _) = hook_server(Reply::Answer(
        200,
        r#"{"patch":[{"op":"system_part_set","partName":"memory","text":"x"}]}"#,
    ))
    .await;
    let call = HookClient::new()
        .unwrap()
        .call_context(
            &hook(addr, OnError::Continue, 5_000),
            ContextReason::BeforeRequest,
            &envelope_text(),
            None,
            None,
        )
        .await;
    let HookOutcome::Patch(result) = call.outcome else {
        panic!("expected a patch, got {:?}", call.outcome)
    };
    let refused: Vec<String> = result
        .patch
        .iter()
        .filter_map(|op: &Op| op.check_reason().err())
        .collect();
    assert_eq!(
        refused,
        vec!["op `system_part_set` changes cached content but has no invalidateCacheReason"]
    );
}

/// Collects formatted log output for assertions.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_failure_logs_one_clear_warning_without_secrets() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // tracing caches each callsite's interest process-wide, computed by the first thread to
    // reach it: a sibling test with no subscriber would cache "never" for the warning
    // asserted here (tokio-rs/tracing#3611). A global subscriber that takes every event
    // keeps the cache at "always"; the scoped one below still gets this thread's events.
    static EVERY_THREAD_SUBSCRIBED: std::sync::Once = std::sync::Once::new();
    EVERY_THREAD_SUBSCRIBED.call_once(|| {
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
    // The test runtime is single-threaded: the guard covers the whole call.
    let _guard = tracing::subscriber::set_default(subscriber);

    let (addr, _) = hook_server(Reply::Answer(200, "<html>oops</html>")).await;
    let call = HookClient::new()
        .unwrap()
        .call_context(
            &hook(addr, OnError::Continue, 5_000),
            ContextReason::Ephemeral,
            &envelope_text(),
            None,
            None,
        )
        .await;
    assert!(call.is_failure());
    let log = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    let line = warnings[0];
    assert!(
        line.contains("hook `test#0`: malformed answer: expected value at line 1 column 1"),
        "{line}"
    );
    assert!(line.contains("on_error=\"continue\""), "{line}");
    assert!(line.contains(&format!("url=http://{addr}/hook")), "{line}");
    assert!(!line.contains("secret"), "{line}");
}
