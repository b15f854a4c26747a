//! The proxy passes bodies through byte for byte, streams without buffering and counts usage.

use std::sync::Arc;

use crate::support::*;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::Notify;

const ANTHROPIC_REQ: &str = "{\"model\":  \"claude-sonnet-4-5\", \"max_tokens\":1024,\n \"system\":[{\"type\":\"text\",\"text\":\"You are terse.\",\"cache_control\":{\"type\":\"ephemeral\"}}],\n  \"messages\":[{\"role\":\"user\",\"content\":\"hi \\u00e9 1.0e3\"}],\"stream\":false , \"unknown_field\": {\"b\":1,\"a\":2.50}}";
const CHAT_REQ: &str = "{ \"model\":\"gpt-4o\",\"messages\":[ {\"role\":\"system\",\"content\":\"sys\"},{\"role\":\"user\",\"content\":\"hi\"} ],\"temperature\":0.70}";
const RESPONSES_REQ: &str = "{\"model\":\"gpt-5\",\"instructions\":\"be brief\",\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]}],\"prompt_cache_key\":\"s-1\"}";

const ANTHROPIC_RESP: &str = "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":7,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":2000,\"output_tokens\":3}}";
const CHAT_RESP: &str = "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1300,\"completion_tokens\":2,\"total_tokens\":1302,\"prompt_tokens_details\":{\"cached_tokens\":1152}}}";
const RESPONSES_RESP: &str = "{\"id\":\"r1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":1500,\"input_tokens_details\":{\"cached_tokens\":1280},\"output_tokens\":4,\"total_tokens\":1504}}";

async fn roundtrip(
    path: &str,
    req: &str,
    resp: &str,
    headers: &[(&str, &str)],
) -> (FakeUpstream, cachet::transport::server::ProxyHandle, Bytes) {
    let upstream =
        FakeUpstream::start(Script::json(200, resp).header("request-id", "req_abc")).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let mut rb = client()
        .post(format!("http://{}{path}", proxy.addr))
        .body(req.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["request-id"], "req_abc");
    let body = r.bytes().await.unwrap();
    (upstream, proxy, body)
}

#[tokio::test]
async fn non_streaming_bodies_are_byte_identical_for_all_three_apis() {
    let cases = [
        (
            "/v1/messages?beta=true",
            ANTHROPIC_REQ,
            ANTHROPIC_RESP,
            vec![
                ("x-api-key", "sk-test"),
                ("anthropic-version", "2023-06-01"),
            ],
        ),
        (
            "/v1/chat/completions",
            CHAT_REQ,
            CHAT_RESP,
            vec![("authorization", "Bearer sk-test")],
        ),
        (
            "/v1/responses",
            RESPONSES_REQ,
            RESPONSES_RESP,
            vec![("authorization", "Bearer sk-test")],
        ),
    ];
    for (path, req, resp, headers) in cases {
        let (upstream, proxy, body) = roundtrip(path, req, resp, &headers).await;
        let got = upstream.requests();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].body,
            Bytes::from(req),
            "upstream got different bytes on {path}"
        );
        assert_eq!(got[0].path_and_query, path);
        for (k, v) in &headers {
            assert_eq!(got[0].headers[*k], *v, "credential header {k} forwarded");
        }
        assert_eq!(
            body,
            Bytes::from(resp),
            "client got different bytes on {path}"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn usage_counters_equal_what_the_upstream_reported() {
    let (_u, proxy, _) = roundtrip(
        "/v1/messages",
        ANTHROPIC_REQ,
        ANTHROPIC_RESP,
        &[("x-api-key", "k")],
    )
    .await;
    let text = metrics_text(&proxy).await;
    let m = |kind| {
        metric_value(
            &text,
            "cachet_input_tokens_total",
            &[("provider", "anthropic"), ("kind", kind)],
        )
    };
    assert_eq!(m("cache_read"), Some(2000.0));
    assert_eq!(m("cache_write"), Some(100.0));
    assert_eq!(m("uncached"), Some(7.0));
    assert_eq!(
        metric_value(
            &text,
            "cachet_output_tokens_total",
            &[("provider", "anthropic")]
        ),
        Some(3.0)
    );
    assert_eq!(
        metric_value(
            &text,
            "cachet_requests_total",
            &[("endpoint", "messages"), ("status", "200")]
        ),
        Some(1.0)
    );
    assert!(text.contains("cachet_overhead_duration_seconds_count{endpoint=\"messages\"} 1"));
    assert!(text.contains("cachet_upstream_duration_seconds_count{endpoint=\"messages\",phase=\"first_byte\",provider=\"anthropic\"} 1"));
    proxy.shutdown().await;

    let (_u, proxy, _) = roundtrip("/v1/chat/completions", CHAT_REQ, CHAT_RESP, &[]).await;
    let text = metrics_text(&proxy).await;
    let m = |kind| {
        metric_value(
            &text,
            "cachet_input_tokens_total",
            &[("provider", "openai"), ("kind", kind)],
        )
    };
    assert_eq!(
        (m("cache_read"), m("uncached"), m("cache_write")),
        (Some(1152.0), Some(148.0), Some(0.0))
    );
    proxy.shutdown().await;

    let (_u, proxy, _) = roundtrip("/v1/responses", RESPONSES_REQ, RESPONSES_RESP, &[]).await;
    let text = metrics_text(&proxy).await;
    let m = |kind| {
        metric_value(
            &text,
            "cachet_input_tokens_total",
            &[("provider", "openai"), ("kind", kind)],
        )
    };
    assert_eq!(
        (m("cache_read"), m("uncached")),
        (Some(1280.0), Some(220.0))
    );
    proxy.shutdown().await;
}

fn anthropic_events() -> Vec<&'static str> {
    vec![
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":11,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4096,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: ping\ndata: {\"type\": \"ping\"}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]
}

#[tokio::test]
async fn streams_are_byte_identical_and_not_buffered() {
    let chat: Vec<&str> = vec![
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":2100,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":2048}}}\n\n",
        "data: [DONE]\n\n",
    ];
    let responses: Vec<&str> = vec![
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"status\":\"in_progress\",\"usage\":null}}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"Hi\"}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"r\",\"status\":\"completed\",\"usage\":{\"input_tokens\":1200,\"input_tokens_details\":{\"cached_tokens\":1024},\"output_tokens\":2}}}\n\n",
    ];
    let cases = [
        (
            "/v1/messages",
            ANTHROPIC_REQ,
            anthropic_events(),
            "anthropic",
            4096.0,
        ),
        ("/v1/chat/completions", CHAT_REQ, chat, "openai", 2048.0),
        ("/v1/responses", RESPONSES_REQ, responses, "openai", 1024.0),
    ];
    // Once with each upstream client: both must stream chunk by chunk.
    for (path, req, events, provider, cache_read) in cases.clone() {
        // The upstream sends the first event, then waits until the client has seen it.
        let gate = Arc::new(Notify::new());
        let mut steps = vec![chunk(events[0]), Step::Wait(gate.clone())];
        steps.extend(events[1..].iter().map(|e| chunk(e)));
        let upstream = FakeUpstream::start(Script::sse(steps)).await;
        let proxy = start_proxy(test_config(&upstream.url())).await;
        let resp = client()
            .post(format!("http://{}{path}", proxy.addr))
            .header("x-api-key", "k")
            .body(req)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut stream = resp.bytes_stream();
        let mut got = Vec::new();
        while got.len() < events[0].len() {
            got.extend_from_slice(&stream.next().await.unwrap().unwrap());
        }
        assert_eq!(
            &got[..],
            events[0].as_bytes(),
            "first event arrived alone, before the upstream finished"
        );
        gate.notify_one();
        while let Some(c) = stream.next().await {
            got.extend_from_slice(&c.unwrap());
        }
        assert_eq!(String::from_utf8(got).unwrap(), events.concat(), "{path}");
        assert_eq!(upstream.requests()[0].body, Bytes::from(req));
        let text = metrics_text(&proxy).await;
        assert_eq!(
            metric_value(
                &text,
                "cachet_input_tokens_total",
                &[("provider", provider), ("kind", "cache_read")]
            ),
            Some(cache_read),
            "{path}: {text}"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn other_v1_paths_are_forwarded_to_their_family() {
    let upstream = FakeUpstream::start(Script::json(200, "{\"data\":[]}")).await;
    let mut config = test_config(&upstream.url());
    config.upstream.openai = "http://127.0.0.1:1".into(); // must not be used for Anthropic
    let proxy = start_proxy(config).await;
    let r = client()
        .get(format!("http://{}/v1/models?limit=5", proxy.addr))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "{\"data\":[]}");
    let r = client()
        .post(format!("http://{}/v1/messages/batches", proxy.addr))
        .header("x-api-key", "k")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = upstream.requests();
    assert_eq!(got[0].path_and_query, "/v1/models?limit=5");
    assert_eq!(got[1].path_and_query, "/v1/messages/batches");
    let r = client()
        .head(format!("http://{}/", proxy.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "Claude Code's connectivity probe is answered"
    );
    let r = client()
        .get(format!("http://{}/api/hello", proxy.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    proxy.shutdown().await;
}

/// The headers a `GET /v1/models` with an extra header of the client's reaches the upstream
/// with, through a cachet of `config` (pointed at the upstream this starts).
async fn headers_upstream_sees(
    config: impl FnOnce(&str) -> cachet::config::Config,
) -> http::HeaderMap {
    let upstream = FakeUpstream::start(Script::json(200, "{\"data\":[]}")).await;
    let proxy = start_proxy(config(&upstream.url())).await;
    let answer = raw_exchange(
        proxy.addr,
        "GET /v1/models HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nx-api-key: k\r\nx-custom: 1\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    proxy.shutdown().await;
    upstream.requests()[0].headers.clone()
}

/// Untouched means the headers too: the upstream gets the client's headers as they came,
/// with no `accept` added on the way.
#[tokio::test]
async fn by_default_the_upstream_gets_the_clients_headers_as_they_came() {
    let headers = headers_upstream_sees(test_config).await;
    let mut names: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
    names.sort_unstable();
    // What the client sent, less `host` and `connection` (one hop's), plus the `host` of
    // the upstream's own address.
    assert_eq!(
        names,
        ["anthropic-version", "host", "x-api-key", "x-custom"],
        "{headers:?}"
    );
}

/// The client reads the body framed as the provider framed it: a JSON answer the upstream
/// sent with a `content-length` keeps it, where it used to reach the client re-chunked. An
/// event stream stays chunked whatever the upstream said, since cachet may close a broken
/// stream with an error event of its own.
#[tokio::test]
async fn a_response_keeps_the_upstreams_content_length() {
    let upstream = FakeUpstream::start(
        Script::json(200, ANTHROPIC_RESP)
            .header("content-length", &ANTHROPIC_RESP.len().to_string()),
    )
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{ANTHROPIC_REQ}",
        ANTHROPIC_REQ.len()
    );
    let answer = raw_exchange(proxy.addr, &request).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{answer}");
    assert!(
        head.contains(&format!("\r\ncontent-length: {}", ANTHROPIC_RESP.len())),
        "{head}"
    );
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert_eq!(body, ANTHROPIC_RESP);
    // hyper stops at the declared length without asking the body for its end: the
    // answer must still count as whole, not as a client that went away.
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&text, "cachet_stream_errors_total", &[]),
        0.0,
        "{text}"
    );
    assert_eq!(
        metric_value(
            &text,
            "cachet_input_tokens_total",
            &[("provider", "anthropic"), ("kind", "cache_read")]
        ),
        Some(2000.0)
    );
    proxy.shutdown().await;

    // An upstream that breaks off: the client gets fewer bytes than the length said, and
    // so knows the answer is not whole.
    let half = &ANTHROPIC_RESP[..ANTHROPIC_RESP.len() / 2];
    let mut cut =
        Script::json(200, half).header("content-length", &ANTHROPIC_RESP.len().to_string());
    cut.steps.push(Step::Cut);
    let upstream = FakeUpstream::start(cut).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let answer = raw_exchange(proxy.addr, &request).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains(&format!("\r\ncontent-length: {}", ANTHROPIC_RESP.len())),
        "{head}"
    );
    assert!(body.len() < ANTHROPIC_RESP.len(), "{answer}");
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(
            &text,
            "cachet_stream_errors_total",
            &[("cause", "upstream_cut")]
        ),
        1.0,
        "{text}"
    );
    proxy.shutdown().await;

    let events = anthropic_events().concat();
    let upstream = FakeUpstream::start(
        Script::sse(vec![chunk(&events)]).header("content-length", &events.len().to_string()),
    )
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let answer = raw_exchange(proxy.addr, &request).await;
    let head = answer
        .split_once("\r\n\r\n")
        .unwrap()
        .0
        .to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{answer}");
    assert!(!head.contains("content-length"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    proxy.shutdown().await;
}

/// A response to HEAD, a 204 and a 304 carry no body whatever their `content-length` says:
/// hyper never asks for one, and that is not a client that went away.
#[tokio::test]
async fn a_bodiless_answer_is_not_a_broken_one() {
    for (status, method) in [(200, "HEAD"), (204, "GET"), (304, "GET")] {
        let upstream =
            FakeUpstream::start(Script::json(status, "").header("content-length", "11")).await;
        let proxy = start_proxy(test_config(&upstream.url())).await;
        let answer = raw_exchange(
            proxy.addr,
            &format!("{method} /v1/models HTTP/1.1\r\nhost: x\r\nanthropic-version: 2023-06-01\r\nx-api-key: k\r\nconnection: close\r\n\r\n"),
        )
        .await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{method} {status}: {answer}"
        );
        if status == 204 {
            // RFC 9110 §8.6: a 204 never carries a length, even if the upstream sent one.
            assert!(
                !answer.to_ascii_lowercase().contains("content-length"),
                "{answer}"
            );
        }
        let mut errors = 0.0;
        // The answer is counted once hyper drops its body: give it the time.
        for _ in 0..20 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let text = metrics_text(&proxy).await;
            errors = metric_sum(&text, "cachet_stream_errors_total", &[]);
            if errors > 0.0 {
                break;
            }
        }
        assert_eq!(errors, 0.0, "{method} {status}");
        proxy.shutdown().await;
    }
}

/// `cachet serve` reads the proxy variables as reqwest did: with `HTTP_PROXY` (credentials
/// in its URL) a plain-http upstream is asked of the proxy by its absolute URL, the proxy's
/// credentials beside the client's headers; `NO_PROXY` exempts a host, which is then
/// reached directly. (The fake upstream plays the proxy: it answers what it is asked.)
#[tokio::test]
async fn the_proxy_variables_are_honoured() {
    let proxy = FakeUpstream::start(Script::json(200, ANTHROPIC_RESP)).await;
    let proxy_url = proxy.url().replace("http://", "http://ann:s3cret@");
    let serve = |upstream: String, no_proxy: &'static str| {
        let proxy_url = proxy_url.clone();
        serve_process(move |cmd| {
            for name in [
                "HTTPS_PROXY",
                "ALL_PROXY",
                "https_proxy",
                "all_proxy",
                "http_proxy",
                "no_proxy",
            ] {
                cmd.env_remove(name);
            }
            cmd.args(["--anthropic-upstream", &upstream])
                .env("HTTP_PROXY", proxy_url)
                .env("NO_PROXY", no_proxy);
        })
    };
    let send = |addr: String| async move {
        client()
            .post(format!("http://{addr}/v1/messages"))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .body(ANTHROPIC_REQ)
            .send()
            .await
            .unwrap()
    };
    // No name resolves here: only the proxy can reach this upstream.
    let mut through = serve("http://api.upstream.test:8080".into(), "");
    let answer = send(through.addr.clone()).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), ANTHROPIC_RESP);
    let asked = proxy.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].path_and_query, "/v1/messages");
    assert_eq!(asked[0].headers["host"], "api.upstream.test:8080");
    assert_eq!(
        asked[0].headers["proxy-authorization"],
        "Basic YW5uOnMzY3JldA=="
    );
    assert_eq!(asked[0].headers["x-api-key"], "k");
    assert_eq!(asked[0].body, ANTHROPIC_REQ);
    let _ = through.child.kill();
    let _ = through.child.wait();

    let upstream = FakeUpstream::start(Script::json(200, ANTHROPIC_RESP)).await;
    let mut direct = serve(upstream.url(), "127.0.0.1");
    assert_eq!(send(direct.addr.clone()).await.status(), 200);
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(
        proxy.requests().len(),
        1,
        "the exempt host is reached directly"
    );
    let _ = direct.child.kill();
    let _ = direct.child.wait();
}
