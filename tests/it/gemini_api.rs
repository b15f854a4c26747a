//! The Gemini API through cachet and in the emulator: `generateContent` and
//! `streamGenerateContent?alt=sse` at `/v1beta/models/{model}:...`, the key in
//! `x-goog-api-key` or `key=` (passed through, or held by cachet behind client keys),
//! implicit caching read on the next turn (`usageMetadata.cachedContentTokenCount`, inside
//! `promptTokenCount`: ai.google.dev/api/generate-content), and Google's error bodies.

use cachet::config::ClientKeyConfig;
use serde_json::{json, Value};

use crate::support::*;

pub(crate) const KEY: &str = "AIza-e2e-dummy-gemini-key";
pub(crate) const MODEL: &str = "gemini-2.5-flash";

/// Gemini CLI's request shape (0.61.0): a long system instruction with a `role`, one
/// `Tool` of function declarations with `parametersJsonSchema`, the session context as the
/// first user part, `generationConfig` with thinking.
pub(crate) fn cli_body(turns: usize) -> Value {
    let mut contents = vec![json!({"role": "user", "parts": [
        {"text": "<session_context>\nToday's date is Monday, December 7, 2026.\n</session_context>"},
        {"text": "List the files in this folder."}]})];
    for i in 0..turns {
        contents.push(json!({"role": "model", "parts": [
            {"functionCall": {"name": "list_directory", "args": {"dir_path": "."}}}]}));
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"id": format!("list_directory-{i}"), "name": "list_directory",
                "response": {"output": "README.md\nnotes.txt"}}}]}));
    }
    json!({
        "contents": contents,
        "systemInstruction": {"role": "user", "parts": [{"text":
            "You are Gemini CLI, an interactive CLI agent. Follow the conventions of the project. ".repeat(200)}]},
        "tools": [{"functionDeclarations": [
            {"name": "list_directory", "description": "Lists a directory",
             "parametersJsonSchema": {"type": "object", "properties": {"dir_path": {"type": "string"}},
                "required": ["dir_path"]}}]}],
        "generationConfig": {"temperature": 1, "thinkingConfig": {"includeThoughts": true}},
    })
}

pub(crate) async fn emulator_with_key() -> cachet::emulator::EmulatorHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let opts = cachet::emulator::EmulatorOptions {
        api_keys: vec![KEY.into()],
        ..Default::default()
    };
    cachet::emulator::spawn(listener, opts).await.unwrap()
}

pub(crate) async fn post(url: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut req = client().post(url).json(body);
    if let Some(key) = key {
        req = req.header("x-goog-api-key", key);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The SSE chunks of a streamed answer, each a whole `GenerateContentResponse`.
fn sse_chunks(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect()
}

/// The emulator is as strict as the API: no key is a 403 PERMISSION_DENIED, a wrong one a
/// 400 API_KEY_INVALID (google-gemini/gemini-cli#25198, googleapis/js-genai#898), a model
/// the API does not serve a 404, a body without `contents` or with an unknown field a 400,
/// each in Google's error shape (`{"error": {"code", "message", "status"}}`).
#[tokio::test]
async fn the_emulator_answers_gemini_errors_as_the_api_does() {
    let emu = emulator_with_key().await;
    let url = format!("{}/v1beta/models/{MODEL}:generateContent", emu.url());
    let body = cli_body(0);
    let (status, err) = post(&url, None, &body).await;
    assert_eq!(
        (status, &err["error"]["status"]),
        (403, &json!("PERMISSION_DENIED")),
        "{err}"
    );
    let (status, err) = post(&url, Some("AIza-wrong"), &body).await;
    assert_eq!(
        (status, &err["error"]["status"]),
        (400, &json!("INVALID_ARGUMENT")),
        "{err}"
    );
    assert!(!err.to_string().contains("AIza-wrong"), "{err}");
    // The key in the query is a key too.
    let (status, _) = post(&format!("{url}?key={KEY}"), None, &body).await;
    assert_eq!(status, 200);
    let bad_model = format!(
        "{}/v1beta/models/claude-sonnet-4-5:generateContent",
        emu.url()
    );
    let (status, err) = post(&bad_model, Some(KEY), &body).await;
    assert_eq!(
        (status, &err["error"]["status"]),
        (404, &json!("NOT_FOUND")),
        "{err}"
    );
    for (broken, words) in [
        (
            json!({"systemInstruction": body["systemInstruction"]}),
            "contents is not specified",
        ),
        (
            json!({"contents": body["contents"], "max_tokens": 5}),
            "Unknown name \"max_tokens\"",
        ),
        (
            json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}),
            "valid role",
        ),
        (
            json!({"contents": [{"role": "user", "parts": []}]}),
            "parts must not be empty",
        ),
        (
            json!({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}),
            "function response turn comes immediately after a function call turn",
        ),
    ] {
        let (status, err) = post(&url, Some(KEY), &broken).await;
        assert_eq!(status, 400, "{broken}: {err}");
        assert_eq!(err["error"]["code"], 400);
        assert_eq!(err["error"]["status"], "INVALID_ARGUMENT");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
    }
    let count = format!("{}/v1beta/models/{MODEL}:countTokens", emu.url());
    let (status, counted) = post(&count, Some(KEY), &json!({"contents": body["contents"]})).await;
    assert_eq!(status, 200, "{counted}");
    assert!(counted["totalTokens"].as_u64().unwrap() > 0, "{counted}");
}

/// A Gemini CLI session through cachet against the emulator: the first turn streams with
/// `alt=sse` (text, then the last chunk with `finishReason` and the counts), the next
/// request repeats it and reads it from the implicit cache; cachet counts the reads under
/// `provider="gemini"` with the model of the path, keeps one session of two requests and
/// diagnoses no break.
#[tokio::test]
async fn a_gemini_session_through_cachet_reads_its_prefix_on_the_next_turn() {
    let emu = emulator_with_key().await;
    let proxy = start_proxy(test_config(&emu.url())).await;
    let stream = format!(
        "http://{}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
        proxy.addr
    );
    let first = client()
        .post(&stream)
        .header("x-goog-api-key", KEY)
        .header("x-cachet-emulate-reply", "tool:list_directory")
        .json(&cli_body(0))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let chunks = sse_chunks(&first.text().await.unwrap());
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP", "{last}");
    let call = &last["candidates"][0]["content"]["parts"][0]["functionCall"];
    assert_eq!(call["name"], "list_directory", "{last}");
    let prompt = last["usageMetadata"]["promptTokenCount"].as_u64().unwrap();
    assert!(
        last["usageMetadata"]["cachedContentTokenCount"].is_null(),
        "{last}"
    );

    let second = client()
        .post(&stream)
        .header("x-goog-api-key", KEY)
        .json(&cli_body(1))
        .send()
        .await
        .unwrap();
    let chunks = sse_chunks(&second.text().await.unwrap());
    let usage = &chunks.last().unwrap()["usageMetadata"];
    let read = usage["cachedContentTokenCount"].as_u64().unwrap();
    assert_eq!(read, prompt, "turn 2 reads all of turn 1's prompt: {usage}");
    assert!(
        usage["promptTokenCount"].as_u64().unwrap() > read,
        "{usage}"
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert!(text.starts_with("Hello from the cachet emulator"), "{text}");

    let sessions = wait_for_sessions(&proxy, 1).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let id = sessions[0]["id"].as_str().unwrap().to_string();
    let log = wait_for_requests(&proxy, &id, 2).await;
    let entries = request_entries(&log);
    assert!(entries.iter().all(|e| e["diagnosis"].is_null()), "{log}");
    let metrics = metrics_text(&proxy).await;
    let labels = [
        ("provider", "gemini"),
        ("model", MODEL),
        ("kind", "cache_read"),
    ];
    assert_eq!(
        metric_sum(&metrics, "cachet_input_tokens_total", &labels),
        read as f64,
        "{metrics}"
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_prefix_breaks_total",
            &[("provider", "gemini")]
        ),
        0.0
    );
}

/// A cachet that holds the Gemini key asks for a client key (in `x-goog-api-key`, as Gemini
/// CLI sends its key); the request goes upstream with the held key in its header, and a
/// `key` the client put in the query is dropped, never sent beside it.
#[tokio::test]
async fn a_held_gemini_key_replaces_the_client_key_and_the_query_key() {
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1}}"#,
    ))
    .await;
    std::env::set_var("CACHET_IT_GEMINI_HELD", "AIza-held-by-cachet");
    std::env::set_var("CACHET_IT_GEMINI_TEAM", "ck-gemini-team");
    let mut config = test_config(&upstream.url());
    config.upstream.gemini_api_key_env = Some("CACHET_IT_GEMINI_HELD".into());
    config.server.client_keys.push(ClientKeyConfig {
        name: "team".into(),
        key_env: "CACHET_IT_GEMINI_TEAM".into(),
    });
    let proxy = start_proxy(config).await;
    let url = format!(
        "http://{}/v1beta/models/{MODEL}:generateContent?key=ck-gemini-team&alt=json",
        proxy.addr
    );
    let (status, err) = post(&url, Some("AIza-not-a-client-key"), &cli_body(0)).await;
    assert_eq!(status, 401, "{err}");
    assert!(
        err["error"]["status"].is_string(),
        "Google's error shape: {err}"
    );
    let (status, answer) = post(&url, Some("ck-gemini-team"), &cli_body(0)).await;
    assert_eq!(status, 200, "{answer}");
    let sent = upstream.requests();
    assert_eq!(sent.len(), 1);
    let got = &sent[0];
    let held = got
        .headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok());
    assert_eq!(held, Some("AIza-held-by-cachet"));
    let path = &got.path_and_query;
    assert!(!path.contains("key="), "{path}");
    assert!(path.contains("alt=json"), "{path}");
    assert!(path.starts_with(&format!("/v1beta/models/{MODEL}:generateContent")));
    // A cache's routes carry the held key the same way.
    let caches = format!(
        "http://{}/v1beta/cachedContents?key=ck-gemini-team",
        proxy.addr
    );
    let (status, _) = post(
        &caches,
        Some("ck-gemini-team"),
        &json!({"model": "models/x"}),
    )
    .await;
    assert_eq!(status, 200);
    let sent = upstream.requests();
    let got = sent.last().unwrap();
    let held = got
        .headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok());
    assert_eq!(held, Some("AIza-held-by-cachet"));
    assert_eq!(got.path_and_query, "/v1beta/cachedContents");
}

/// `countTokens` and `/v1beta/cachedContents` go through cachet to the upstream and back as
/// they are: the count the emulator bills, and the API's own refusal of a cache below the
/// model's minimum in Google's shape, never a cachet error.
#[tokio::test]
async fn count_tokens_and_cached_contents_pass_through() {
    let emu = emulator_with_key().await;
    let proxy = start_proxy(test_config(&emu.url())).await;
    let count = format!("http://{}/v1beta/models/{MODEL}:countTokens", proxy.addr);
    let (status, counted) = post(
        &count,
        Some(KEY),
        &json!({"contents": cli_body(1)["contents"]}),
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    assert!(counted["totalTokens"].as_u64().unwrap() > 0, "{counted}");
    let caches = format!("http://{}/v1beta/cachedContents", proxy.addr);
    let body = json!({"model": format!("models/{MODEL}"), "contents": cli_body(0)["contents"], "ttl": "300s"});
    let (status, err) = post(&caches, Some(KEY), &body).await;
    assert_eq!(
        (status, &err["error"]["status"]),
        (400, &json!("INVALID_ARGUMENT")),
        "{err}"
    );
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Cached content is too small"), "{err}");
    let metrics = metrics_text(&proxy).await;
    for endpoint in ["gemini_count_tokens", "cached_contents"] {
        let labels = [("provider", "gemini"), ("endpoint", endpoint)];
        assert_eq!(
            metric_sum(&metrics, "cachet_requests_total", &labels),
            1.0,
            "{endpoint}: {metrics}"
        );
    }
}

/// A policy can name the Gemini API (`provider = ["gemini"]`, `endpoint =
/// ["generate_content"]`) and shapes Gemini CLI's requests; one that names another
/// provider leaves them as they came.
#[tokio::test]
async fn a_policy_naming_gemini_shapes_gemini_requests_only() {
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1}}"#,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let notes = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/notes/");
    let policy = |name: &str, provider: &str, endpoint: &str| {
        policy_file(
            dir.path(),
            name,
            &format!(
                "name = \"{name}\"\n[match]\nprovider = [\"{provider}\"]\nendpoint = [\"{endpoint}\"]\n[[inject]]\nsource = {{ notes = \"{notes}\", top_k = 1 }}\nmode = \"system-prompt\"\npart = \"memory\"\n"
            ),
        )
    };
    let policies = vec![
        policy("gemini-notes", "gemini", "generate_content"),
        policy("claude-notes", "anthropic", "messages"),
    ];
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        policies,
        &dir.path().join("store"),
    ))
    .await;
    let url = format!(
        "http://{}/v1beta/models/{MODEL}:generateContent",
        proxy.addr
    );
    let mut body = cli_body(0);
    body["contents"][0]["parts"][1]["text"] = json!("How long do access tokens live?");
    let (status, answer) = post(&url, Some(KEY), &body).await;
    assert_eq!(status, 200, "{answer}");
    let sent: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    let parts = sent["systemInstruction"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "the note is one more system part: {sent}");
    assert!(
        parts[1]["text"].as_str().unwrap().contains("Access tokens"),
        "{sent}"
    );
    assert_eq!(
        sent["contents"], body["contents"],
        "the conversation is untouched"
    );
}
