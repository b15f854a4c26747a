//! A shaped body goes upstream as a splice of the client's bytes (`envelope::Payload`): the
//! upstream client writes its pieces one after the other, and the upstream receives them as
//! one body of valid JSON with its length, never chunked. (That the pieces sent are the
//! body's bytes in order is `transport::upstream_client`'s unit test.)

use cachet::providers::Endpoint;
use serde_json::Value;

use crate::support::sessions::{fixture, session, Step, CLIENTS};
use crate::support::*;

const POLICIES: &[&str] = &[
    "anthropic-auto-breakpoints",
    "stabilize-volatile",
    "memory-pinned",
    "openai-cache-key",
];

fn path(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Responses => "/v1/responses",
        _ => "/v1/messages",
    }
}

/// The bodies the upstream received for `bodies`, sent through cachet with every shipped
/// cache policy.
async fn forwarded(endpoint: Endpoint, bodies: &[Vec<u8>]) -> Vec<Received> {
    let fake = FakeUpstream::start(Script::json(
        200,
        r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":10,"output_tokens":1}}"#,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let files = POLICIES
        .iter()
        .map(|p| format!("{}/policies/{p}.toml", env!("CARGO_MANIFEST_DIR")).into())
        .collect();
    let config = policy_config(&fake.url(), files, &dir.path().join("store"));
    let proxy = start_proxy(config).await;
    for body in bodies {
        let req = client()
            .post(format!("http://{}{}", proxy.addr, path(endpoint)))
            .header("x-cachet-session", "spliced")
            .header("content-type", "application/json")
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .header("authorization", "Bearer sk-test");
        let r = req.body(body.clone()).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        r.bytes().await.unwrap();
    }
    proxy.shutdown().await;
    fake.requests()
}

#[tokio::test]
async fn a_shaped_body_arrives_whole_with_its_length() {
    use Step::*;
    let mut shaped = 0;
    for (name, _, endpoint) in CLIENTS {
        // Long enough that the history goes out as shared runs of the client's bytes.
        let bodies = session(
            &fixture(name),
            *endpoint,
            &[Extend(6), Extend(1), MoveMarker, Extend(2)],
        );
        let sent = forwarded(*endpoint, &bodies).await;
        assert_eq!(sent.len(), bodies.len(), "{name}");
        for (i, h) in sent.iter().enumerate() {
            let length = h.headers.get("content-length").map(|v| v.to_str().unwrap());
            assert_eq!(
                length,
                Some(h.body.len().to_string().as_str()),
                "{name} {i}"
            );
            assert!(h.headers.get("transfer-encoding").is_none(), "{name} {i}");
            serde_json::from_slice::<Value>(&h.body).unwrap();
            shaped += usize::from(h.body[..] != bodies[i][..]);
        }
    }
    assert!(shaped >= 8, "only {shaped} bodies were changed by shaping");
}
