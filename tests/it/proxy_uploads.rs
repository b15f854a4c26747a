//! Bodies cachet does not read go upstream as they arrive: a file upload (`POST /v1/files`,
//! multipart), a message batch (`POST /v1/messages/batches`), any API call other than a
//! generation. `server.max_body_bytes` bounds the bodies cachet reads, not these: the
//! Files APIs take uploads of hundreds of megabytes, and an SDK pointed at cachet sends them
//! here like every other call. Anthropic: "Maximum file size: 500 MB per file", and
//! 256 MB a batch request (platform.claude.com/docs/en/build-with-claude/files,
//! /docs/en/api/overview); OpenAI: "Individual files can be up to 512 MB" (API reference,
//! `POST /files`).

use bytes::Bytes;
use futures_util::StreamExt;

use crate::support::*;

/// A multipart upload as the SDKs send one to `/v1/files`, of `size` bytes of content.
fn multipart_upload(size: usize) -> (String, Vec<u8>) {
    let boundary = "----cachet-upload-7d1f";
    let mut body = format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"rows.jsonl\"\r\ncontent-type: application/jsonl\r\n\r\n"
    )
    .into_bytes();
    let line = b"{\"custom_id\":\"r\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\"}\n";
    while body.len() < size {
        body.extend_from_slice(line);
    }
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// The same bytes as a chunked body (no `content-length`), 64 KiB a frame.
fn chunked(body: &[u8]) -> reqwest::Body {
    let frames: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    reqwest::Body::wrap_stream(futures_util::stream::iter(frames))
}

/// An upload eight times `server.max_body_bytes` reaches the upstream whole, byte for byte,
/// with its declared length, through either upstream client; sent chunked it arrives whole
/// too. A generation body over the limit is still refused (413) before it is forwarded.
#[tokio::test]
async fn an_upload_larger_than_the_body_limit_goes_through_as_sent() {
    let upstream = FakeUpstream::start(Script::json(200, r#"{"id":"file-1"}"#)).await;
    let mut config = test_config(&upstream.url());
    config.server.max_body_bytes = 128 * 1024;
    let proxy = start_proxy(config).await;
    let (content_type, upload) = multipart_upload(1024 * 1024);
    let files = format!("http://{}/v1/files", proxy.addr);
    let answer = client()
        .post(&files)
        .header("authorization", "Bearer sk-test")
        .header("content-type", &content_type)
        .body(upload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    // Anthropic's batches, JSON of the same size, sent chunked.
    let batch = format!(
        "{{\"requests\":[{{\"custom_id\":\"a\",\"params\":{{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":8,\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}}}]}}",
        "y".repeat(1024 * 1024)
    );
    let answer = client()
        .post(format!("http://{}/v1/messages/batches", proxy.addr))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(chunked(batch.as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let got = upstream.requests();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].path_and_query, "/v1/files");
    assert!(got[0].body == upload, "the upload changed on its way");
    assert_eq!(
        got[0].headers["content-length"],
        upload.len().to_string().as_str(),
        "the declared length was lost"
    );
    assert_eq!(got[0].headers["content-type"], content_type.as_str());
    assert_eq!(got[1].path_and_query, "/v1/messages/batches");
    assert!(got[1].body == batch.as_bytes());
    // What cachet reads stays bounded.
    let generation = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "z".repeat(256 * 1024)}],
    });
    let answer = post_anthropic(&proxy, "uploads", &generation).await;
    assert_eq!(answer.0, 413);
    assert_eq!(upstream.requests().len(), 2);
    proxy.shutdown().await;
}

/// A head announcing 100,000 bytes, then 10 of them, then silence.
const STALLED_UPLOAD: &str = "POST /v1/files HTTP/1.1\r\nhost: x\r\nauthorization: Bearer sk-test\r\ncontent-type: multipart/form-data; boundary=b\r\ncontent-length: 100000\r\n\r\n--b\r\ncontent";

/// An upload that stalls is cut off after `server.body_read_timeout_ms` without news: the
/// client gets the 408 a stalled generation body gets, counted; the upstream never receives
/// the request whole.
#[tokio::test]
async fn a_stalled_upload_is_answered_408_and_never_reaches_the_upstream_whole() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let mut config = test_config(&upstream.url());
    config.server.body_read_timeout_ms = 300;
    let proxy = start_proxy(config).await;
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        raw_exchange(proxy.addr, STALLED_UPLOAD),
    )
    .await
    .expect("the stalled upload was never answered");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
    assert!(upstream.requests().iter().all(|r| r.body.len() < 100_000));
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&metrics, "cachet_requests_total", &[("status", "408")]),
        1.0
    );
    proxy.shutdown().await;
}

/// `upstream.response_timeout_ms` waits for the answer once the upload has been sent, not
/// from its first byte: an upload that takes longer than the time-out to send is answered.
#[tokio::test]
async fn the_answer_time_out_starts_once_the_upload_is_sent() {
    let upstream = FakeUpstream::start(Script::json(200, r#"{"id":"file-2"}"#)).await;
    let mut config = test_config(&upstream.url());
    config.upstream.response_timeout_ms = 400;
    let proxy = start_proxy(config).await;
    let (content_type, upload) = multipart_upload(64 * 1024);
    // Eight pieces 150 ms apart: about three times the time-out to send.
    let pieces: Vec<Bytes> = upload
        .chunks(upload.len() / 8 + 1)
        .map(Bytes::copy_from_slice)
        .collect();
    let slow = futures_util::stream::iter(pieces).then(|piece| async move {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        Ok::<_, std::io::Error>(piece)
    });
    let answer = client()
        .post(format!("http://{}/v1/files", proxy.addr))
        .header("authorization", "Bearer sk-test")
        .header("content-type", &content_type)
        .header("content-length", upload.len())
        .body(reqwest::Body::wrap_stream(slow))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    assert!(upstream.requests()[0].body == upload);
    proxy.shutdown().await;
}

/// A call without a body (listing models, deleting a file) goes upstream without one: no
/// `transfer-encoding`, no `content-length`, through either upstream client.
#[tokio::test]
async fn a_call_without_a_body_goes_without_one() {
    let upstream = FakeUpstream::start(Script::json(200, r#"{"data":[]}"#)).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let base = format!("http://{}", proxy.addr);
    for request in [
        client().get(format!("{base}/v1/models")),
        client().delete(format!("{base}/v1/files/file-1")),
        client().get(format!("{base}/v1/files/file-1/content")),
    ] {
        let answer = request
            .header("authorization", "Bearer sk-test")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    for got in upstream.requests() {
        let framing = ["transfer-encoding", "content-length"].map(|h| got.headers.get(h));
        assert_eq!(
            framing,
            [None, None],
            "{} {}",
            got.method,
            got.path_and_query
        );
        assert!(got.body.is_empty());
    }
    proxy.shutdown().await;
}

/// An upload above the default `server.max_body_bytes` (32 MiB), through cachet to the
/// emulator, is answered with the file object of its provider, sized as sent: Anthropic's
/// `size_bytes` (with the Files beta), OpenAI's `bytes`.
#[tokio::test]
async fn an_upload_above_the_default_limit_reaches_the_emulator_whole() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&format!("http://{}", emulator.addr))).await;
    let (content_type, body) = multipart_upload(40 * 1024 * 1024);
    // The file part: from the end of its head to the closing boundary.
    let start = body.windows(4).rposition(|w| w == b"\r\n\r\n").unwrap() + 4;
    let file_size = body.len() - start - "\r\n------cachet-upload-7d1f--\r\n".len();
    let files = format!("http://{}/v1/files", proxy.addr);
    let anthropic = answer_of(
        client()
            .post(format!("{files}?beta=true"))
            .header("x-api-key", "sk-ant-test")
            .header("anthropic-version", "2023-06-01")
            .header("anthropic-beta", "files-api-2025-04-14")
            .header("content-type", &content_type)
            .body(body.clone()),
    )
    .await;
    assert_eq!(anthropic["type"], "file", "{anthropic}");
    assert_eq!(anthropic["size_bytes"], file_size, "{anthropic}");
    assert_eq!(anthropic["filename"], "rows.jsonl");
    let openai = answer_of(
        client()
            .post(&files)
            .header("authorization", "Bearer sk-test")
            .header("content-type", &content_type)
            .body(chunked(&body)),
    )
    .await;
    assert_eq!(openai["object"], "file", "{openai}");
    assert_eq!(openai["bytes"], file_size, "{openai}");
    assert_eq!(openai["purpose"], "batch");
    proxy.shutdown().await;
}
