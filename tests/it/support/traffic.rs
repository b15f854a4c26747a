//! A cachet (proxy + emulator) under varied traffic: two providers, several models, an A/B
//! injection variant, a hook patch that invalidates the cache, a failing hook, a prefix
//! break, a 1h cache write, cleared tool results, an error, a broken stream, answers
//! without usage and a model list. The metrics and dashboard tests read what it leaves
//! behind.

use serde_json::{json, Value};

use super::{client, policy_config, policy_file, start_emulator, start_hook_server, HookServer};
use cachet::emulator::EmulatorHandle;
use cachet::server::ProxyHandle;

pub struct Observed {
    pub proxy: ProxyHandle,
    pub emulator: EmulatorHandle,
    _hook: HookServer,
    _dir: tempfile::TempDir,
}

/// A system prompt long enough to be cached (over every model's minimum).
fn long_system(version: &str) -> String {
    (0..300)
        .map(|i| format!("Rule {i}: answer in the {version} style, briefly."))
        .collect::<Vec<_>>()
        .join(" ")
}

pub async fn observed_cachet() -> Observed {
    observed_cachet_with(|_| {}).await
}

/// The same, with a last say over the proxy's configuration.
pub async fn observed_cachet_with(configure: impl FnOnce(&mut cachet::config::Config)) -> Observed {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    // A context hook as a memory service writes one: a system part, with its reason.
    let hook = start_hook_server(|event| {
        (event["type"] == "context").then(|| {
            json!({"patch": [{"op": "system_part_set", "partName": "observed",
                "text": "Project notes: none.", "invalidateCacheReason": "project notes"}],
                "transformerName": "notes-hook"})
        })
    })
    .await;
    let notes = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/notes");
    let policies = vec![
        policy_file(
            dir.path(),
            "ab",
            &format!(
                r#"
name = "memory-ab"
[match]
model = ["claude-haiku-*"]
[[inject]]
source = {{ notes = "{notes}", top_k = 1 }}
mode = "ab"
ab = {{ "system-prompt" = 50, "context-hook" = 50 }}
"#
            ),
        ),
        policy_file(
            dir.path(),
            "notes",
            &format!(
                r#"
name = "notes"
[match]
model = ["claude-sonnet-*"]
[[hook]]
url = "{}"
events = ["context:before_request"]
"#,
                hook.url
            ),
        ),
        policy_file(
            dir.path(),
            "dead",
            r#"
name = "dead"
[match]
model = ["claude-sonnet-*"]
[[hook]]
name = "unreachable"
url = "http://127.0.0.1:1/hook"
events = ["context:ephemeral"]
on_error = "continue"
"#,
        ),
    ];
    let mut config = policy_config(&emulator.url(), policies, &dir.path().join("store"));
    configure(&mut config);
    let proxy = cachet::server::spawn(config).await.unwrap();
    Observed {
        proxy,
        emulator,
        _hook: hook,
        _dir: dir,
    }
}

async fn post(
    o: &Observed,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = client()
        .post(format!("http://{}{path}", o.proxy.addr))
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    // A broken stream ends in an error the client sees; its text is enough here.
    let text = r.text().await.unwrap_or_default();
    (status, headers, text)
}

const ANTHROPIC: [(&str, &str); 2] = [("x-api-key", "k"), ("anthropic-version", "2023-06-01")];

fn anthropic_headers<'a>(
    session: &'a str,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut h = ANTHROPIC.to_vec();
    h.push(("x-cachet-session", session));
    h.extend_from_slice(extra);
    h
}

/// One round of every kind of request. Rounds repeat the same sessions, so the second
/// round reads what the first wrote and breaks where the system prompt changes.
pub async fn drive(o: &Observed, round: u32) {
    let session = "obs-sonnet";
    let question =
        json!({"role": "user", "content": format!("Which file holds the config? ({round})")});
    // Claude Code's shape: a system block with a 1h cache marker, then the turns.
    let system = |version: &str| {
        json!([{"type": "text", "text": long_system(version),
        "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
    };
    let first = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "system": system("plain"), "messages": [question]});
    let (status, _, text) = post(o, "/v1/messages", &anthropic_headers(session, &[]), &first).await;
    assert_eq!(status, 200, "{text}");
    let reply = json!({"role": "assistant", "content": "config.toml"});
    let follow = json!({"role": "user", "content": "And the tests?"});
    let second = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
        "system": system("plain"), "messages": [question, reply, follow]});
    let (status, _, text) =
        post(o, "/v1/messages", &anthropic_headers(session, &[]), &second).await;
    assert_eq!(status, 200, "{text}");
    // The system prompt changes: a prefix break in section `system`.
    let third = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "system": system("formal"), "messages": [question, reply, follow]});
    let (status, _, text) = post(o, "/v1/messages", &anthropic_headers(session, &[]), &third).await;
    assert_eq!(status, 200, "{text}");

    // A second model, through the A/B injection (variant label).
    for user in ["obs-haiku-1", "obs-haiku-2", "obs-haiku-3"] {
        let body = json!({"model": "claude-haiku-4-5", "max_tokens": 32,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "How are database migrations rolled out?"}]});
        let (status, _, text) = post(o, "/v1/messages", &anthropic_headers(user, &[]), &body).await;
        assert_eq!(status, 200, "{text}");
    }

    // OpenAI: Chat Completions twice (the second reads the cached prefix), and Responses.
    let bearer = [("authorization", "Bearer sk-test")];
    for _ in 0..2 {
        let chat = json!({"model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": long_system("chat")},
                         {"role": "user", "content": format!("Summarise round {round}")}]});
        let (status, _, text) = post(o, "/v1/chat/completions", &bearer, &chat).await;
        assert_eq!(status, 200, "{text}");
    }
    // A Chat stream whose request leaves out `stream_options.include_usage`: no usage.
    let unmeasured = json!({"model": "gpt-4o", "stream": true,
        "messages": [{"role": "user", "content": format!("Say hello, round {round}")}]});
    let (status, _, text) = post(o, "/v1/chat/completions", &bearer, &unmeasured).await;
    assert_eq!(status, 200, "{text}");
    let responses = json!({"model": "gpt-5-mini", "instructions": long_system("responses"),
        "input": "List the modules."});
    let (status, _, text) = post(o, "/v1/responses", &bearer, &responses).await;
    assert_eq!(status, 200, "{text}");

    // An upstream error, and a stream the upstream cuts halfway.
    let small = json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, _) = post(
        o,
        "/v1/messages",
        &anthropic_headers("obs-errors", &[("x-cachet-emulate-fault", "429")]),
        &small,
    )
    .await;
    assert_eq!(status, 429);
    let mut streamed = small.clone();
    streamed["stream"] = json!(true);
    post(
        o,
        "/v1/messages",
        &anthropic_headers("obs-errors", &[("x-cachet-emulate-fault", "cut:3")]),
        &streamed,
    )
    .await;
    // A stream cut before its first event: answered 200, with no usage at all.
    post(
        o,
        "/v1/messages",
        &anthropic_headers("obs-errors", &[("x-cachet-emulate-fault", "cut:0")]),
        &streamed,
    )
    .await;

    // A tool loop whose older tool result the provider clears (a context edit).
    let call = |id: &str| {
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "read",
            "input": {"path": format!("src/{id}.rs")}}]})
    };
    let result = |id: &str| {
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
            "content": long_system(id)}]})
    };
    let edited = json!({"model": "claude-opus-4-6", "max_tokens": 32,
        "system": system("plain"),
        "tools": [{"name": "read", "input_schema": {"type": "object"}}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
            "trigger": {"type": "tool_uses", "value": 1}, "keep": {"type": "tool_uses", "value": 1}}]},
        "messages": [{"role": "user", "content": "Read both files."},
            call("t1"), result("t1"), call("t2"), result("t2")]});
    let (status, _, text) = post(
        o,
        "/v1/messages",
        &anthropic_headers("obs-edits", &[]),
        &edited,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("applied_edits"), "{text}");

    // A model list and a token count: no usage, no token series.
    let r = client()
        .get(format!("http://{}/v1/models", o.proxy.addr))
        .header("authorization", "Bearer sk-test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, _, text) = post(
        o,
        "/v1/messages/count_tokens",
        &anthropic_headers("obs-count", &[]),
        &json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
}
