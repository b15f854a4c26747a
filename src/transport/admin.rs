//! The admin listener: `/metrics`, `/healthz`, `/sessions` and `/sessions/{id}`.
//!
//! With `server.admin_token_env` set, every route asks for `authorization: Bearer TOKEN`
//! except the probes (`/healthz`, `/readyz`): a liveness or readiness check must work
//! without a secret, and tells nothing but up or down.

use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::http::{full, ProxyBody};
use crate::metrics::Metrics;
use crate::session::SessionStore;

/// What the admin listener reads: metrics and the session store.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// `None` when neither a policy nor monitoring keeps sessions.
    pub store: Option<Arc<dyn SessionStore>>,
    /// The bearer token every non-probe route requires (SHA-256 digest), when configured.
    pub token: Option<[u8; 32]>,
}

/// The admin token from `server.admin_token_env`, as a digest to compare in constant time.
pub fn token_from_config(server: &crate::config::ServerConfig) -> anyhow::Result<Option<[u8; 32]>> {
    let Some(var) = &server.admin_token_env else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(Some(Sha256::digest(v.as_bytes()).into())),
        _ => anyhow::bail!("environment variable {var} (the admin token) is not set"),
    }
}

/// Routes that answer without the admin token: health probes.
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
}

impl AdminState {
    fn authorized(&self, headers: &http::HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let presented = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.get(..7)
                    .filter(|p| p.eq_ignore_ascii_case("bearer "))
                    .map(|_| &v[7..])
            })
            .unwrap_or("");
        let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        bool::from(digest.ct_eq(token))
    }
}

pub async fn handle(state: &AdminState, req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    if !is_probe(path) && !state.authorized(req.headers()) {
        let mut resp = status(StatusCode::UNAUTHORIZED, "admin token required\n");
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
        return resp;
    }
    match (req.method().as_str(), path) {
        ("GET", "/metrics") => with_type(
            Response::new(full(state.metrics.render())),
            "text/plain; version=0.0.4",
        ),
        ("GET", "/healthz") => Response::new(full("ok\n")),
        ("GET", p) if timeline_id(p).is_some() => {
            let Some(store) = state.store.clone() else {
                return status(
                    StatusCode::NOT_FOUND,
                    "sessions are not kept (sessions.monitor = false and no policy is active)\n",
                );
            };
            let id = timeline_id(p).unwrap_or_default();
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

/// The session of `/sessions/{id}/timeline` (an id without slashes, not empty).
fn timeline_id(path: &str) -> Option<&str> {
    path.strip_prefix("/sessions/")?
        .strip_suffix("/timeline")
        .filter(|id| !id.is_empty() && !id.contains('/'))
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

#[cfg(test)]
mod tests {
    use super::timeline_id;

    #[test]
    fn timeline_paths_name_one_session() {
        assert_eq!(timeline_id("/sessions/s1/timeline"), Some("s1"));
        // `/sessions/timeline` once panicked on a reversed slice.
        assert_eq!(timeline_id("/sessions/timeline"), None);
        assert_eq!(timeline_id("/sessions//timeline"), None);
        assert_eq!(timeline_id("/sessions/a/b/timeline"), None);
    }
}
