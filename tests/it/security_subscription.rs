//! Subscription safety: a request carrying a subscription's OAuth credential (Claude Code
//! signed in to a Claude plan) is observed and measured but never reshaped, unless a policy
//! opts in with `[match] auth`. Claude Code on a subscription sends
//! `authorization: Bearer sk-ant-oat01-…` with `anthropic-beta: oauth-2025-04-20` (captured
//! Claude Code traffic; see src/providers/auth.rs).

use std::path::PathBuf;

use crate::support::*;

/// The shipped policies that apply to Anthropic Messages requests.
const ANTHROPIC_POLICIES: [&str; 5] = [
    "anthropic-auto-breakpoints.toml",
    "memory-context-hook.toml",
    "memory-pinned.toml",
    "memory-system-prompt.toml",
    "stabilize-volatile.toml",
];

fn claude_code_body() -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/clients/claude_code.json"),
    )
    .unwrap()
}

const ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-6","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"cache_read_input_tokens":100,"output_tokens":1}}"#;

/// Send the Claude Code request with `auth` headers through a proxy with `policies`;
/// returns the bytes the upstream received.
async fn forwarded(policies: Vec<PathBuf>, oauth: bool, session: &str) -> (Vec<u8>, String) {
    let upstream = FakeUpstream::start(Script::json(200, ANSWER)).await;
    let store = tempfile::tempdir().unwrap().keep();
    let proxy = start_proxy(policy_config(&upstream.url(), policies, &store)).await;
    let mut req = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .header("x-cachet-session", session)
        .body(claude_code_body());
    req = if oauth {
        req.header("authorization", "Bearer sk-ant-oat01-subscription-token")
            .header("anthropic-beta", "claude-code-20250219,oauth-2025-04-20")
    } else {
        req.header("x-api-key", "sk-ant-api03-key")
    };
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Observed all the same: the request is in the session log, with its usage.
    let logged = wait_for_requests(&proxy, session, 1).await;
    let metrics = metrics_text(&proxy).await;
    proxy.shutdown().await;
    let body = upstream.requests()[0].body.to_vec();
    (body, format!("{logged}\n{metrics}"))
}

fn shipped(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("policies")
        .join(name)
}

#[tokio::test]
async fn oauth_requests_pass_every_shipped_anthropic_policy_unmodified() {
    let sent = claude_code_body();
    for name in ANTHROPIC_POLICIES {
        let (body, observed) = forwarded(vec![shipped(name)], true, "oauth-one").await;
        assert!(body == sent, "{name} reshaped a subscription request");
        assert!(observed.contains("\"cache_read\":100"), "{observed}");
    }
    let all: Vec<PathBuf> = ANTHROPIC_POLICIES.iter().map(|n| shipped(n)).collect();
    let (body, observed) = forwarded(all.clone(), true, "oauth-all").await;
    assert!(
        body == sent,
        "the shipped policies together reshaped a subscription request"
    );
    assert!(
        metric_sum(
            &observed,
            "cachet_input_tokens_total",
            &[("kind", "cache_read")]
        ) == 100.0,
        "subscription traffic is still measured"
    );
    // The same request with an API key is shaped: the policies do apply to it.
    let (body, _) = forwarded(all, false, "api-key-all").await;
    assert!(body != sent, "the control request was not shaped");
}

#[tokio::test]
async fn a_policy_that_names_oauth_shapes_subscription_requests() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(
        dir.path(),
        "opt-in",
        r#"
name = "opt-in"
[match]
provider = ["anthropic"]
auth = ["oauth"]
[[context]]
reason = "before_request"
patch = [{ op = "system_part_set", partName = "rules", text = " Keep answers short.", invalidateCacheReason = "add rules" }]
"#,
    );
    let sent = claude_code_body();
    let (body, _) = forwarded(vec![policy.clone()], true, "opted-oauth").await;
    assert!(body != sent);
    assert!(String::from_utf8_lossy(&body).contains("Keep answers short."));
    // `auth = ["oauth"]` alone leaves API-key traffic alone.
    let (body, _) = forwarded(vec![policy], false, "opted-key").await;
    assert!(body == sent);
}

#[test]
fn cachet_check_reads_the_auth_field() {
    let path = std::path::Path::new("p.toml");
    let ok = "name = \"a\"\n[match]\nauth = [\"api-key\", \"oauth\"]\n";
    assert!(cachet::policy::parse_policy(path, ok).is_ok());
    let errors = cachet::policy::parse_policy(path, "name = \"a\"\n[match]\nauth = [\"cookie\"]\n")
        .err()
        .unwrap();
    let text = cachet::policy::render_errors(&errors);
    assert!(
        text.contains("match.auth[0]") && text.contains("api-key | oauth"),
        "{text}"
    );
}
