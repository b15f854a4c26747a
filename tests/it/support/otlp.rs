//! An OTLP/HTTP trace receiver on port 0: accepts `POST /v1/traces` (protobuf), decodes each
//! export with the OpenTelemetry protocol crate and keeps the spans for the test.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One exported span with the `service.name` of its resource.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub span: Span,
}

impl Received {
    pub fn attr(&self, key: &str) -> Option<&any_value::Value> {
        attr(&self.span.attributes, key)
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        match self.attr(key) {
            Some(any_value::Value::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key) {
            Some(any_value::Value::IntValue(n)) => Some(*n),
            _ => None,
        }
    }

    pub fn double(&self, key: &str) -> Option<f64> {
        match self.attr(key) {
            Some(any_value::Value::DoubleValue(n)) => Some(*n),
            _ => None,
        }
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

pub struct Receiver {
    /// The base URL, as `telemetry.otlp.endpoint` takes it.
    pub url: String,
    spans: Arc<Mutex<Vec<Received>>>,
    /// Content types of the exports received.
    pub content_types: Arc<Mutex<Vec<String>>>,
    release: watch::Sender<bool>,
}

impl Receiver {
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Let held exports through.
    pub fn release(&self) {
        let _ = self.release.send(true);
    }
}

/// `held`: exports wait for `release()` before they are answered (a stuck collector).
pub async fn start_receiver(held: bool) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let spans = Arc::new(Mutex::new(Vec::new()));
    let content_types = Arc::new(Mutex::new(Vec::new()));
    let (release, released) = watch::channel(!held);
    let (s, c) = (spans.clone(), content_types.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (s, c, released) = (s.clone(), c.clone(), released.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (s, c, mut released) = (s.clone(), c.clone(), released.clone());
                    async move {
                        let _ = released.wait_for(|open| *open).await;
                        Ok::<_, Infallible>(answer(req, &s, &c).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Receiver {
        url,
        spans,
        content_types,
        release,
    }
}

async fn answer(
    req: Request<Incoming>,
    spans: &Mutex<Vec<Received>>,
    content_types: &Mutex<Vec<String>>,
) -> Response<Full<Bytes>> {
    let status = |code| {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = code;
        r
    };
    if req.method() != http::Method::POST || req.uri().path() != "/v1/traces" {
        return status(StatusCode::NOT_FOUND);
    }
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    content_types.lock().unwrap().push(content_type);
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let Ok(export) = ExportTraceServiceRequest::decode(body) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let mut kept = spans.lock().unwrap();
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| attr(&r.attributes, "service.name"))
            .and_then(|v| match v {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                kept.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse.
    let mut ok = status(StatusCode::OK);
    ok.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    ok
}
