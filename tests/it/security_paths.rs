//! No request path leaves the upstream's base path: dot segments, plain or percent-encoded,
//! and encoded slashes or backslashes are refused with a 400 in the provider's format
//! before routing, on the raw wire as `curl --path-as-is` sends them.

use crate::support::*;

/// Paths that, normalised by the upstream's URL handling, would climb out of `/v1/`.
const ESCAPES: &[&str] = &[
    "/v1/%2e%2e/%2e%2e/openai/v1/chat/completions",
    "/v1/../../internal/admin",
    "/v1/../../../etc/passwd",
    "/v1/%2E%2e/%2e%2E/internal/admin",
    "/v1/.%2e/.%2E/internal/admin",
    "/v1/%2e/../x",
    "/v1/./models",
    "/v1/..%2f..%2finternal%2fadmin",
    "/v1/a%2F..%2F..%2F..%2Finternal",
    "/v1/%252e%252e/%252e%252e/internal",
    "/v1/%5c..%5c..%5cinternal",
    "/v1/messages/..",
];

#[tokio::test]
async fn escaping_paths_never_reach_the_upstream_outside_its_base() {
    // Once with each upstream client: both must send the URL cachet built, unchanged.
    let upstream = FakeUpstream::start(Script::json(200, "{\"data\":[]}")).await;
    let base = format!("{}/gw/anthropic", upstream.url());
    let mut config = test_config(&base);
    config.upstream.openai = format!("{}/gw/openai", upstream.url());
    let proxy = start_proxy(config).await;

    for path in ESCAPES {
        for (method, extra) in [
            ("GET", "anthropic-version: 2023-06-01\r\n"),
            (
                "POST",
                "content-type: application/json\r\ncontent-length: 2\r\n",
            ),
        ] {
            let body = if method == "POST" { "{}" } else { "" };
            let answer = raw_exchange(
                proxy.addr,
                &format!(
                    "{method} {path} HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n{body}"
                ),
            )
            .await;
            assert!(
                answer.starts_with("HTTP/1.1 400"),
                "{method} {path}: {answer}"
            );
            // The provider's error format: Anthropic's for Anthropic requests, OpenAI's else.
            assert!(answer.contains("\"invalid_request_error\""), "{answer}");
            let anthropic = extra.contains("anthropic-version") || path.starts_with("/v1/messages");
            assert_eq!(
                answer.contains("{\"type\":\"error\""),
                anthropic,
                "{answer}"
            );
        }
    }
    // A backslash path: refused by cachet or by the HTTP parser, never forwarded.
    let answer = raw_exchange(
        proxy.addr,
        "GET /v1\\..\\..\\internal HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A plain path still goes through, under the base path.
    let answer = raw_exchange(
    proxy.addr,
    "GET /v1/models HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    for r in &seen {
        assert!(
            r.path_and_query.starts_with("/gw/anthropic/"),
            "the upstream saw {}",
            r.path_and_query
        );
    }
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric_sum(&metrics, "cachet_requests_total", &[("status", "400")])
            >= (ESCAPES.len() * 2) as f64,
        "refusals are counted"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_emulator_refuses_escaping_paths_too() {
    let emulator = start_emulator().await;
    let addr = emulator
        .url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    for path in ["/v1/../../../etc/passwd", "/v1/%2e%2e/%2e%2e/etc/passwd"] {
        let answer = raw_exchange(
            addr,
            &format!("GET {path} HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nconnection: close\r\n\r\n"),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(answer.contains("invalid_request_error"), "{answer}");
    }

    // And a proxy in front of it never lets one through.
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let answer = raw_exchange(
        proxy.addr,
        "GET /v1/../../../etc/passwd HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    proxy.shutdown().await;
}
