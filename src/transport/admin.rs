//! The admin listener: `/metrics`, `/healthz` (liveness), `/readyz` (the session store's
//! health), `/sessions` and `/sessions/{id}`.

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use std::sync::Arc;

use super::http::{full, ProxyBody};
use crate::metrics::Metrics;
use crate::session::SessionStore;

/// What the admin listener reads: metrics and the session store.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// `None` when neither a policy nor monitoring keeps sessions.
    pub store: Option<Arc<dyn SessionStore>>,
}

pub async fn handle(state: &AdminState, req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    match (req.method().as_str(), path) {
        ("GET", "/metrics") => with_type(
            Response::new(full(state.metrics.render())),
            "text/plain; version=0.0.4",
        ),
        ("GET", "/healthz") => Response::new(full("ok\n")),
        ("GET", "/readyz") => readiness(state).await,
        ("GET", p) if p.starts_with("/sessions/") && p.ends_with("/timeline") => {
            let Some(store) = state.store.clone() else {
                return status(
                    StatusCode::NOT_FOUND,
                    "sessions are not kept (sessions.monitor = false and no policy is active)\n",
                );
            };
            let id = &p["/sessions/".len()..p.len() - "/timeline".len()];
            match crate::session::timeline::timeline_html(store.as_ref(), id).await {
                Ok(Some(page)) => with_type(Response::new(full(page)), "text/html; charset=utf-8"),
                Ok(None) => status(StatusCode::NOT_FOUND, "no such session\n"),
                Err(e) => status(StatusCode::SERVICE_UNAVAILABLE, &format!("{e}\n")),
            }
        }
        ("GET", p) if p == "/sessions" || p.starts_with("/sessions/") => {
            let Some(store) = state.store.clone() else {
                return status(
                    StatusCode::NOT_FOUND,
                    "sessions are not kept (sessions.monitor = false and no policy is active)\n",
                );
            };
            match crate::session::admin_route(store.as_ref(), p, req.uri().query()).await {
                Some((code, body)) => {
                    let mut resp = with_type(
                        Response::new(full(serde_json::to_vec_pretty(&body).unwrap_or_default())),
                        "application/json",
                    );
                    *resp.status_mut() =
                        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    resp
                }
                None => status(StatusCode::NOT_FOUND, "not found\n"),
            }
        }
        _ => status(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// 200 when the session store is healthy or none is kept; 503 with the reason otherwise.
async fn readiness(state: &AdminState) -> Response<ProxyBody> {
    let (code, body) = match &state.store {
        None => (
            StatusCode::OK,
            serde_json::json!({"status": "ready", "store": "none"}),
        ),
        Some(store) => {
            let health = store.health().await;
            let code = match health.ok {
                true => StatusCode::OK,
                false => StatusCode::SERVICE_UNAVAILABLE,
            };
            let status = if health.ok { "ready" } else { "unavailable" };
            let mut body = serde_json::json!({"status": status, "store": health.store});
            if let Some(reason) = health.reason {
                body["reason"] = reason.into();
            }
            (code, body)
        }
    };
    let mut resp = with_type(
        Response::new(full(serde_json::to_vec(&body).unwrap_or_default())),
        "application/json",
    );
    *resp.status_mut() = code;
    resp
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
