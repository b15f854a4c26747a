//! The processes the load driver starts besides cachet: the fake upstream and the two bare
//! pass-through hops it measures cachet against.
//!
//! - `reqwest-hop`: a hyper server forwarding through reqwest (reads the request body
//!   whole, streams the answer back), the hop cachet was first measured against.
//! - `hyper-hop`: a hyper server forwarding through hyper-util's pooled legacy client,
//!   streaming both bodies; nothing between the two sockets but hyper itself: the physical
//!   limit of a hop written on this stack.
//! - `hyper-buffered-hop` (with `LOAD_BUFFERED_HOP=1`): the same hyper client, but the request
//!   body read whole first, as cachet must to check it: tells the HTTP client's share from
//!   the buffering's.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// What a role process does with each request.
#[derive(Clone)]
enum Role {
    Upstream,
    Reqwest(reqwest::Client, String),
    Hyper(
        hyper_util::client::legacy::Client<HttpConnector, Incoming>,
        String,
    ),
    HyperBuffered(
        hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
        String,
    ),
}

/// Serve one role on a fresh loopback port, printing the address first.
pub async fn serve(role: &str, upstream: Option<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    let role = match (role, upstream) {
        ("upstream", _) => Role::Upstream,
        ("reqwest-hop", Some(u)) => Role::Reqwest(reqwest::Client::builder().build().unwrap(), u),
        ("hyper-hop", Some(u)) => {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            let client =
                hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
            Role::Hyper(client, u)
        }
        ("hyper-buffered-hop", Some(u)) => {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            let client =
                hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
            Role::HyperBuffered(client, u)
        }
        (other, _) => panic!("unknown role {other}"),
    };
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let role = role.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let role = role.clone();
                async move {
                    Ok::<_, Infallible>(match role {
                        Role::Upstream => answer(req).await,
                        Role::Reqwest(client, u) => reqwest_hop(&client, &u, req).await,
                        Role::Hyper(client, u) => hyper_hop(&client, &u, req).await,
                        Role::HyperBuffered(client, u) => {
                            let (parts, body) = req.into_parts();
                            let body = Full::new(body.collect().await.unwrap().to_bytes());
                            hyper_hop(&client, &u, Request::from_parts(parts, body)).await
                        }
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

const JSON_REPLY: &str = "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Done.\"}],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4000,\"output_tokens\":3}}";

fn sse_reply() -> String {
    let mut s = String::from("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..10 {
        s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word{i} \"}}}}\n\n"));
    }
    s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":11}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s
}

/// OpenAI's answers, for the large bodies sent in Chat and Responses.
const CHAT_REPLY: &str = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Done.\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":4012,\"completion_tokens\":3,\"total_tokens\":4015,\"prompt_tokens_details\":{\"cached_tokens\":4000}}}";
const RESPONSES_REPLY: &str = "{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\",\"model\":\"gpt-5-codex\",\"output\":[{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Done.\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":4012,\"input_tokens_details\":{\"cached_tokens\":4000},\"output_tokens\":3,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":4015}}";

/// The fake upstream: reads the body, answers JSON (in the API its path names), or 16 SSE
/// events (one chunk each) when the request carries `x-bench-stream`.
async fn answer(req: Request<Incoming>) -> Response<Body> {
    let stream = req.headers().contains_key("x-bench-stream");
    let reply = match req.uri().path() {
        "/v1/chat/completions" => CHAT_REPLY,
        "/v1/responses" => RESPONSES_REPLY,
        _ => JSON_REPLY,
    };
    let _ = req.into_body().collect().await;
    if stream {
        let events: Vec<Result<Frame<Bytes>, std::io::Error>> = sse_reply()
            .split_inclusive("\n\n")
            .map(|e| Ok(Frame::data(Bytes::from(e.to_string()))))
            .collect();
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
            events,
        ))));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        r
    } else {
        let mut r = Response::new(
            Full::new(Bytes::from_static(reply.as_bytes()))
                .map_err(|e| match e {})
                .boxed(),
        );
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    }
}

/// The reqwest hop: forward method, path, headers and body; stream the answer back.
async fn reqwest_hop(
    client: &reqwest::Client,
    upstream: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let mut headers = parts.headers.clone();
    for h in ["host", "connection", "content-length", "transfer-encoding"] {
        headers.remove(h);
    }
    let url = format!("{upstream}{}", parts.uri.path());
    let resp = client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let stream = resp
        .bytes_stream()
        .map_ok(Frame::data)
        .map_err(std::io::Error::other);
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *r.status_mut() = status;
    for (k, v) in headers.iter() {
        if k != "transfer-encoding" && k != "connection" && k != "content-length" {
            r.headers_mut().append(k.clone(), v.clone());
        }
    }
    r
}

/// The hyper hop: the client's request (head and streaming body) goes upstream as it came,
/// with the upstream's URI; the answer comes back as it came.
async fn hyper_hop<B>(
    client: &hyper_util::client::legacy::Client<HttpConnector, B>,
    upstream: &str,
    req: Request<B>,
) -> Response<Body>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{upstream}{path}").parse().unwrap();
    for h in ["host", "connection", "transfer-encoding"] {
        parts.headers.remove(h);
    }
    let resp = client
        .request(Request::from_parts(parts, body))
        .await
        .unwrap();
    let (mut parts, body) = resp.into_parts();
    for h in ["connection", "transfer-encoding"] {
        parts.headers.remove(h);
    }
    Response::from_parts(parts, body.map_err(std::io::Error::other).boxed())
}
