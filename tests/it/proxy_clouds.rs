//! Claude on Amazon Bedrock and Google Vertex AI through cachet, against the emulator:
//! Claude Code's requests (its Messages body on Bedrock's InvokeModel route and Vertex's
//! rawPredict, the model in the path), pi's Converse requests; cachet signs Bedrock requests
//! with the AWS credentials it holds (the emulator checks the signature as Bedrock does),
//! reads the answers' usage from Bedrock's event stream and Vertex's SSE, and counts them
//! under the cloud's provider label.
//!
//! Provider facts these tests hold (checked against the providers' documentation):
//! - Claude Code's gateway setup (docs.anthropic.com, Claude Code, "LLM gateway"):
//!   `ANTHROPIC_BEDROCK_BASE_URL` with `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1` when the gateway holds
//!   the AWS credentials; `ANTHROPIC_VERTEX_BASE_URL=https://gateway/.../v1` with
//!   `CLAUDE_CODE_SKIP_VERTEX_AUTH=1`, `ANTHROPIC_VERTEX_PROJECT_ID`, `CLOUD_ML_REGION`.
//! - Vertex (docs.anthropic.com, "Claude on Vertex AI"): the model is not in the body but in
//!   the endpoint URL; `anthropic_version` is in the body and must be `vertex-2023-10-16`.
//! - Bedrock InvokeModel (AWS, "Anthropic Claude Messages API"): `anthropic_version` must be
//!   `bedrock-2023-05-31`; InvokeModelWithResponseStream answers an event stream whose
//!   events are `chunk` with `{"bytes": ...}` (boto3 reference, `invoke_model_with_response_stream`).
//! - Converse `TokenUsage` (AWS Bedrock prompt caching): `inputTokens` is the input outside
//!   the cache, `cacheReadInputTokens` and `cacheWriteInputTokens` beside it.

use bytes::Bytes;
use cachet::providers::bedrock::eventstream;
use serde_json::{json, Value};

use crate::support::*;

const AWS_ID: &str = "AKIDCACHETITTEST";
const AWS_SECRET: &str = "it/secret/held+by/cachet";
const BEDROCK_MODEL: &str = "us.anthropic.claude-opus-5-5";

/// Claude Code's request of a tool loop's first step (tests/data/clients), with the
/// history cut to its first `messages` messages.
fn claude_code(messages: usize) -> serde_json::Map<String, Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/claude_code_tool_loop.json"
    );
    let mut body: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let history = body["messages"].as_array().unwrap()[..messages].to_vec();
    body.insert("messages".into(), Value::Array(history));
    body
}

/// The body Claude Code sends Bedrock (its Bedrock SDK): no `model` or `stream`, and
/// `anthropic_version` last.
fn bedrock_body(messages: usize) -> Vec<u8> {
    let mut body = claude_code(messages);
    body.remove("model");
    body.remove("stream");
    body.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
    serde_json::to_vec(&body).unwrap()
}

/// The body Claude Code sends Vertex (its Vertex SDK): no `model`, `stream` kept.
fn vertex_body(messages: usize) -> Vec<u8> {
    let mut body = claude_code(messages);
    body.remove("model");
    body.insert("anthropic_version".into(), json!("vertex-2023-10-16"));
    serde_json::to_vec(&body).unwrap()
}

async fn emulator_checking_signatures() -> cachet::emulator::EmulatorHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let opts = cachet::emulator::EmulatorOptions {
        aws_credentials: vec![cachet::providers::bedrock::sigv4::AwsCredentials::new(
            AWS_ID,
            AWS_SECRET,
            None,
            "us-east-1",
        )],
        api_keys: vec!["ya29.it-vertex-token".into()],
        ..Default::default()
    };
    cachet::emulator::spawn(listener, opts).await.unwrap()
}

/// A proxy in front of `upstream` for both clouds; holding the test's AWS credentials when
/// `signs`.
fn cloud_config(upstream: &str, signs: bool) -> cachet::config::Config {
    let mut config = test_config(upstream);
    config.upstream.bedrock = Some(upstream.to_string());
    config.upstream.vertex = Some(upstream.to_string());
    if signs {
        // Every test of this file sets the same values: they may run at once.
        std::env::set_var("AWS_ACCESS_KEY_ID", AWS_ID);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", AWS_SECRET);
        std::env::set_var("AWS_REGION", "us-east-1");
        config.upstream.aws_credentials = Some(cachet::config::AwsCredentialsSource::Environment);
        config.server.allow_open_relay = true;
    }
    config
}

/// The Anthropic events an InvokeModel stream carries, by frame.
fn chunk_events(body: &[u8]) -> Vec<Value> {
    let mut reader = eventstream::Reader::default();
    let mut out = Vec::new();
    reader.feed(body, |frame| {
        if let Some((_, json)) = eventstream::event_of(frame, cachet::route::Endpoint::Invoke) {
            out.push(serde_json::from_slice(&json).unwrap());
        }
    });
    out
}

/// (uncached, read, written) of a Messages answer's events.
fn usage_of(events: &[Value]) -> (u64, u64, u64) {
    let start = events
        .iter()
        .find(|e| e["type"] == "message_start")
        .expect("a message_start");
    let u = &start["message"]["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    (
        n("input_tokens"),
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    )
}

async fn post(url: String, body: Vec<u8>) -> (u16, String, Bytes) {
    let resp = client()
        .post(url)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-claude-code-session-id", "cc-cloud-session")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, kind, resp.bytes().await.unwrap())
}

#[tokio::test]
async fn claude_code_on_bedrock_is_signed_reads_its_cache_and_is_counted() {
    let emulator = emulator_checking_signatures().await;
    let proxy = start_proxy(cloud_config(&emulator.url(), true)).await;
    let url = format!(
        "http://{}/model/{BEDROCK_MODEL}/invoke-with-response-stream",
        proxy.addr
    );
    let mut seen = (0, 0, 0);
    let mut reads = Vec::new();
    for messages in [2, 4] {
        let (status, kind, body) = post(url.clone(), bedrock_body(messages)).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(kind, eventstream::CONTENT_TYPE);
        let events = chunk_events(&body);
        assert_eq!(events.last().unwrap()["type"], "message_stop");
        let (uncached, read, written) = usage_of(&events);
        reads.push(read);
        seen = (seen.0 + uncached, seen.1 + read, seen.2 + written);
    }
    // The second step extends the first: it reads what the first wrote.
    assert!(reads[0] == 0 && reads[1] > 0, "reads {reads:?}");
    let metrics = metrics_text(&proxy).await;
    let counted = |kind| {
        metric_sum(
            &metrics,
            "cachet_input_tokens_total",
            &[
                ("provider", "bedrock"),
                ("kind", kind),
                ("model", BEDROCK_MODEL),
            ],
        ) as u64
    };
    assert_eq!(
        (
            counted("uncached"),
            counted("cache_read"),
            counted("cache_write")
        ),
        seen
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[
                ("provider", "bedrock"),
                ("endpoint", "invoke"),
                ("status", "200")
            ],
        ),
        2.0
    );
    // Bedrock's row prices the model.
    assert!(
        metric_sum(
            &metrics,
            "cachet_cost_usd_total",
            &[("provider", "bedrock")]
        ) > 0.0
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_unsigned_request_reaches_bedrock_only_signed_by_cachet() {
    let emulator = emulator_checking_signatures().await;
    // Without cachet's signature the emulator refuses, as Bedrock does.
    let direct = format!("{}/model/{BEDROCK_MODEL}/invoke", emulator.url());
    let (status, _, body) = post(direct, bedrock_body(2)).await;
    assert_eq!(status, 401, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("Missing Authentication Token"));
    let proxy = start_proxy(cloud_config(&emulator.url(), true)).await;
    let url = format!("http://{}/model/{BEDROCK_MODEL}/invoke", proxy.addr);
    let (status, kind, body) = post(url, bedrock_body(2)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(kind.starts_with("application/json"));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["type"], "message");
    proxy.shutdown().await;
}

/// A request the client signed with SigV4 was signed for cachet's address: without
/// credentials of its own, cachet refuses it rather than forward a broken signature.
#[tokio::test]
async fn a_request_signed_for_cachet_is_never_forwarded_with_its_signature() {
    let emulator = emulator_checking_signatures().await;
    let proxy = start_proxy(cloud_config(&emulator.url(), false)).await;
    let resp = client()
        .post(format!("http://{}/model/{BEDROCK_MODEL}/invoke", proxy.addr))
        .header("content-type", "application/json")
        .header("x-amz-date", "20261207T120000Z")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDCLIENT/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=00",
        )
        .body(bedrock_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("signed with SigV4"),
        "{body}"
    );
    assert!(emulator.accounted().is_empty(), "nothing was forwarded");
    proxy.shutdown().await;
}

#[tokio::test]
async fn claude_code_on_vertex_reads_its_cache_and_is_counted_under_vertex() {
    let emulator = emulator_checking_signatures().await;
    let mut config = cloud_config(&emulator.url(), false);
    std::env::set_var("CACHET_IT_VERTEX_TOKEN", "ya29.it-vertex-token");
    config.upstream.vertex_token_env = Some("CACHET_IT_VERTEX_TOKEN".into());
    config.server.allow_open_relay = true;
    let proxy = start_proxy(config).await;
    let url = format!(
        "http://{}/v1/projects/p-it/locations/us-east5/publishers/anthropic/models/claude-opus-5-5:streamRawPredict",
        proxy.addr
    );
    let mut reads = Vec::new();
    for messages in [2, 4] {
        let (status, kind, body) = post(url.clone(), vertex_body(messages)).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert!(kind.starts_with("text/event-stream"));
        let events: Vec<Value> = String::from_utf8_lossy(&body)
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        reads.push(usage_of(&events).1);
    }
    assert!(reads[0] == 0 && reads[1] > 0, "reads {reads:?}");
    let metrics = metrics_text(&proxy).await;
    let read = metric_sum(
        &metrics,
        "cachet_input_tokens_total",
        &[("provider", "vertex"), ("kind", "cache_read")],
    );
    assert_eq!(read as u64, reads[1]);
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[("endpoint", "raw_predict")]
        ),
        2.0
    );
    proxy.shutdown().await;
}

/// pi's Converse requests (its Bedrock provider): cache points on the system prompt and the
/// last user message; cachet signs them and reads `metadata`'s usage.
#[tokio::test]
async fn converse_streams_are_signed_and_their_usage_counted() {
    let emulator = emulator_checking_signatures().await;
    let proxy = start_proxy(cloud_config(&emulator.url(), true)).await;
    let system = "You are a coding agent. ".repeat(200);
    let turn = |messages: Value| {
        serde_json::to_vec(&json!({
            "system": [{"text": system}, {"cachePoint": {"type": "default"}}],
            "messages": messages,
            "inferenceConfig": {"maxTokens": 256},
        }))
        .unwrap()
    };
    let first =
        json!([{"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "default"}}]}]);
    let second = json!([
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"text": "Hello."}]},
        {"role": "user", "content": [{"text": "again"}, {"cachePoint": {"type": "default"}}]},
    ]);
    let url = format!(
        "http://{}/model/{BEDROCK_MODEL}/converse-stream",
        proxy.addr
    );
    let mut reads = Vec::new();
    for body in [turn(first), turn(second)] {
        let (status, kind, body) = post(url.clone(), body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(kind, eventstream::CONTENT_TYPE);
        let mut reader = eventstream::Reader::default();
        let mut usage = None;
        reader.feed(&body, |f| {
            if let eventstream::Frame::Event { kind, payload } = f {
                if kind == "metadata" {
                    usage = cachet::providers::bedrock::converse::usage_of(&payload);
                }
            }
        });
        reads.push(usage.expect("a metadata event").cache_read);
    }
    assert!(reads[0] == 0 && reads[1] > 0, "reads {reads:?}");
    let metrics = metrics_text(&proxy).await;
    let read = metric_sum(
        &metrics,
        "cachet_input_tokens_total",
        &[("provider", "bedrock"), ("kind", "cache_read")],
    );
    assert_eq!(read as u64, reads[1]);
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[("endpoint", "converse")]
        ),
        2.0
    );
    proxy.shutdown().await;
}

/// The AWS SDK for JavaScript (pi's Bedrock provider is built on it) speaks HTTP/2 to Bedrock
/// Runtime, cleartext HTTP/2 with prior knowledge to an `http://` endpoint: cachet's listener
/// serves it beside HTTP/1.1 on the same port, streams included.
#[tokio::test]
async fn a_converse_stream_over_cleartext_http2_is_served() {
    let emulator = emulator_checking_signatures().await;
    let proxy = start_proxy(cloud_config(&emulator.url(), true)).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let body = json!({
        "system": [{"text": "You are a coding agent."}, {"cachePoint": {"type": "default"}}],
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "inferenceConfig": {"maxTokens": 256},
    });
    for _ in 0..2 {
        let resp = h2
            .post(format!(
                "http://{}/model/{BEDROCK_MODEL}/converse-stream",
                proxy.addr
            ))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        assert_eq!(resp.status().as_u16(), 200);
        let bytes = resp.bytes().await.unwrap();
        let mut reader = eventstream::Reader::default();
        let mut kinds = Vec::new();
        reader.feed(&bytes, |f| {
            if let eventstream::Frame::Event { kind, .. } = f {
                kinds.push(kind.to_string());
            }
        });
        assert_eq!(
            kinds.last().map(String::as_str),
            Some("metadata"),
            "{kinds:?}"
        );
    }
    // HTTP/1.1 on the same port, as before.
    let (status, _, _) = post(
        format!("http://{}/model/{BEDROCK_MODEL}/invoke", proxy.addr),
        bedrock_body(2),
    )
    .await;
    assert_eq!(status, 200);
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[("provider", "bedrock"), ("status", "200")]
        ),
        3.0
    );
    proxy.shutdown().await;
}

/// Holding AWS credentials is holding a key: cachet will not start as an open relay, and
/// with client keys a Bedrock request without one is refused before anything goes upstream;
/// with one, it goes upstream signed by cachet (the emulator checks the signature).
#[tokio::test]
async fn client_keys_guard_the_aws_credentials_cachet_holds() {
    let emulator = emulator_checking_signatures().await;
    let mut config = cloud_config(&emulator.url(), true);
    config.server.allow_open_relay = false;
    let refused = cachet::server::spawn(config.clone()).await.err();
    assert!(
        refused.is_some_and(|e| e.to_string().contains("upstream.aws_credentials")),
        "an open relay holding AWS credentials was started"
    );
    std::env::set_var("CACHET_IT_CLOUD_TEAM_KEY", "ck-cloud-team-0123456789");
    config
        .server
        .client_keys
        .push(cachet::config::ClientKeyConfig {
            name: "team".into(),
            key_env: "CACHET_IT_CLOUD_TEAM_KEY".into(),
        });
    let proxy = start_proxy(config).await;
    let url = format!("http://{}/model/{BEDROCK_MODEL}/invoke", proxy.addr);
    let (status, _, _) = post(url.clone(), bedrock_body(2)).await;
    assert_eq!(status, 401);
    assert!(emulator.accounted().is_empty(), "nothing was forwarded");
    // Claude Code presents the key in `ANTHROPIC_CUSTOM_HEADERS` (`x-api-key`).
    let resp = client()
        .post(url)
        .header("content-type", "application/json")
        .header("x-api-key", "ck-cloud-team-0123456789")
        .body(bedrock_body(2))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(emulator.accounted().len(), 1);
    proxy.shutdown().await;
}

/// The emulator refuses what the clouds refuse: an InvokeModel body naming `model` (the path
/// names it) or without `anthropic_version: "bedrock-2023-05-31"`, as Bedrock's
/// `ValidationException`; a Vertex body without `anthropic_version: "vertex-2023-10-16"`, in
/// Google's error shape.
#[tokio::test]
async fn the_emulator_refuses_bodies_the_clouds_refuse() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let emulator = cachet::emulator::spawn(listener, Default::default())
        .await
        .unwrap();
    let invoke = format!("{}/model/{BEDROCK_MODEL}/invoke", emulator.url());
    let mut named = claude_code(2);
    named.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
    let mut unversioned = claude_code(2);
    unversioned.remove("model");
    unversioned.remove("stream");
    for body in [named, unversioned] {
        let resp = client()
            .post(&invoke)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        assert_eq!(resp.headers()["x-amzn-errortype"], "ValidationException");
        let error: Value = resp.json().await.unwrap();
        assert!(error["message"]
            .as_str()
            .unwrap()
            .starts_with("Malformed input request"));
    }
    let mut vertex = claude_code(2);
    vertex.remove("model");
    let resp = client()
        .post(format!(
            "{}/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-5-5:rawPredict",
            emulator.url()
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&vertex).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");
    assert!(emulator.accounted().is_empty());
}

/// A service-account key as Google issues one (RSA 2048, PKCS#8), made here, its
/// `token_uri` the emulator's token endpoint; and the account as the emulator knows it.
fn service_account_key(
    dir: &std::path::Path,
    name: &str,
    token_uri: &str,
) -> (std::path::PathBuf, cachet::emulator::ServiceAccount) {
    use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let public = rsa::RsaPublicKey::from(&private);
    let email = "cachet-it@p-it.iam.gserviceaccount.com";
    let file = json!({
        "type": "service_account",
        "project_id": "p-it",
        "private_key_id": "0123456789abcdef",
        "private_key": private.to_pkcs8_pem(LineEnding::LF).unwrap().as_str(),
        "client_email": email,
        "client_id": "1234567890",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    });
    let path = dir.join(name);
    std::fs::write(&path, file.to_string()).unwrap();
    let account = cachet::emulator::ServiceAccount {
        client_email: email.into(),
        public_key_pem: public.to_public_key_pem(LineEnding::LF).unwrap(),
    };
    (path, account)
}

/// cachet holding a service-account key mints Vertex AI's token itself (the JWT-bearer grant
/// at the key file's `token_uri`, which the emulator serves and checks with the key's public
/// half), sends it in place of the client's, and mints once for many requests. Holding the
/// key is holding a key: client keys are required. A key the token endpoint does not know
/// is a 502 the client can read, and nothing reaches rawPredict.
#[tokio::test]
async fn a_held_service_account_key_mints_the_vertex_token() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token_uri = format!("http://{}/token", listener.local_addr().unwrap());
    let (key, account) = service_account_key(dir.path(), "key.json", &token_uri);
    let (stranger, _) = service_account_key(dir.path(), "stranger.json", &token_uri);
    let emulator = cachet::emulator::spawn(
        listener,
        cachet::emulator::EmulatorOptions {
            // Only the tokens it mints (and no client token) are good on rawPredict.
            api_keys: vec!["sk-ant-api03-not-for-vertex".into()],
            service_accounts: vec![account],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut config = cloud_config(&emulator.url(), false);
    config.upstream.vertex_credentials_file = Some(key.display().to_string());
    let refused = cachet::server::spawn(config.clone()).await.err();
    assert!(
        refused.is_some_and(|e| e.to_string().contains("no client keys")),
        "an open relay holding a service-account key was started"
    );
    std::env::set_var("CACHET_IT_VERTEX_TEAM_KEY", "ck-vertex-team-0123456789");
    let team = cachet::config::ClientKeyConfig {
        name: "team".into(),
        key_env: "CACHET_IT_VERTEX_TEAM_KEY".into(),
    };
    config.server.client_keys.push(team.clone());
    let proxy = start_proxy(config.clone()).await;
    let path = "/v1/projects/p-it/locations/us-east5/publishers/anthropic/models/claude-opus-5-5:rawPredict";
    let send = |addr: std::net::SocketAddr, messages: usize| {
        client()
            .post(format!("http://{addr}{path}"))
            .header("content-type", "application/json")
            .header("x-api-key", "ck-vertex-team-0123456789")
            // A client's own token is replaced by the one cachet mints.
            .header("authorization", "Bearer ya29.the-clients-own")
            .body(vertex_body(messages))
            .send()
    };
    for messages in [2, 3, 4] {
        let resp = send(proxy.addr, messages).await.unwrap();
        let status = resp.status().as_u16();
        assert_eq!(status, 200, "{}", resp.text().await.unwrap());
    }
    assert_eq!(emulator.accounted().len(), 3);
    assert_eq!(emulator.minted_tokens(), 1, "one token for every request");
    proxy.shutdown().await;

    // A key the token endpoint does not know: refused there, told to the client.
    config.upstream.vertex_credentials_file = Some(stranger.display().to_string());
    let proxy = start_proxy(config).await;
    let resp = send(proxy.addr, 2).await.unwrap();
    assert_eq!(resp.status().as_u16(), 502);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("could not mint a Vertex AI access token") && text.contains("invalid_grant"),
        "{text}"
    );
    assert_eq!(
        emulator.accounted().len(),
        3,
        "nothing more reached rawPredict"
    );
    assert_eq!(emulator.minted_tokens(), 1);
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[("provider", "vertex"), ("status", "502")]
        ),
        1.0
    );
    proxy.shutdown().await;
}
