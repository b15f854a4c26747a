//! The admin listener: `/metrics`, `/healthz`, `/sessions` and `/sessions/{id}`.

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::server::{full, ProxyBody, State};

/// Sessions listed by `GET /sessions` unless `?limit=N` says otherwise.
const DEFAULT_SESSION_LIMIT: usize = 50;

pub async fn handle(state: &State, req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    match (req.method().as_str(), path) {
        ("GET", "/metrics") => with_type(
            Response::new(full(state.metrics.render())),
            "text/plain; version=0.0.4",
        ),
        ("GET", "/healthz") => Response::new(full("ok\n")),
        ("GET", "/sessions") => {
            let limit = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("limit=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_SESSION_LIMIT);
            sessions(state, None, limit).await
        }
        ("GET", p) if p.starts_with("/sessions/") => {
            let id = percent_decode(&p["/sessions/".len()..]);
            sessions(state, Some(id), 0).await
        }
        _ => status(StatusCode::NOT_FOUND, "not found\n"),
    }
}

async fn sessions(state: &State, id: Option<String>, limit: usize) -> Response<ProxyBody> {
    let Some(store) = state.pipeline.as_ref().and_then(|p| p.store().cloned()) else {
        return status(
            StatusCode::NOT_FOUND,
            "sessions are recorded only when a policy is active\n",
        );
    };
    let result = match &id {
        Some(id) => crate::session::session_json(store.as_ref(), id).await,
        None => crate::session::sessions_json(store.as_ref(), limit)
            .await
            .map(Some),
    };
    match result {
        Ok(Some(v)) => with_type(
            Response::new(full(serde_json::to_vec_pretty(&v).unwrap_or_default())),
            "application/json",
        ),
        Ok(None) => status(StatusCode::NOT_FOUND, "no such session\n"),
        Err(e) => status(StatusCode::SERVICE_UNAVAILABLE, &format!("{e}\n")),
    }
}

fn with_type(mut resp: Response<ProxyBody>, content_type: &'static str) -> Response<ProxyBody> {
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    resp
}

fn status(code: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut resp = Response::new(full(text.to_string()));
    *resp.status_mut() = code;
    resp
}

/// Session ids come from clients and may hold any character; URLs carry them encoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
