//! The admin listener: `/metrics`, `/healthz` (liveness), `/readyz` (the session store's
//! health), `/sessions` (JSON, or the overview page for a browser), `/sessions/{id}` and
//! `/sessions/{id}/timeline`.
//!
//! With `server.admin_token_env` set, every route asks for `authorization: Bearer TOKEN`
//! except the probes (`/healthz`, `/readyz`): a liveness or readiness check must work
//! without a secret, and tells nothing but up or down.

use http::header::{ACCEPT, CONTENT_TYPE, VARY};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::metrics::Metrics;
use crate::session::{pages, SessionStore};
use crate::transport::http::{full, ProxyBody};

/// What the admin listener reads: metrics and the session store.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// `None` when neither a policy nor monitoring keeps sessions.
    pub store: Option<Arc<dyn SessionStore>>,
    /// The live what-if's figures (`sessions.whatif`).
    pub whatif: Option<crate::session::whatif::SharedBoard>,
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

const HTML: &str = "text/html; charset=utf-8";

pub async fn handle(state: &AdminState, req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    let query = req.uri().query();
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
        ("GET", "/readyz") => readiness(state).await,
        ("GET", p) if timeline_id(p).is_some() => {
            let Some(store) = kept(state) else {
                return not_kept();
            };
            let id = timeline_id(p).unwrap_or_default();
            let reads = (state.whatif.as_ref()).and_then(|b| {
                let board = b.read().ok()?;
                let (name, reads) = board.reads(&id)?;
                Some((name.to_owned(), reads))
            });
            let whatif = reads.as_ref().map(|(name, reads)| (name.as_str(), reads));
            match pages::timeline_html(store.as_ref(), &id, query, whatif).await {
                Ok(Some(page)) => with_type(Response::new(full(page)), HTML),
                Ok(None) => status(StatusCode::NOT_FOUND, "no such session\n"),
                Err(e) => status(StatusCode::SERVICE_UNAVAILABLE, &format!("{e}\n")),
            }
        }
        ("GET", "/sessions" | "/sessions/") if wants_html(req.headers()) => {
            let Some(store) = kept(state) else {
                return not_kept();
            };
            let board = state
                .whatif
                .as_ref()
                .and_then(|b| b.read().ok().map(|b| b.clone()));
            let resp = match pages::overview_html(store.as_ref(), query, board.as_ref()).await {
                Ok(page) => with_type(Response::new(full(page)), HTML),
                Err(e) => status(StatusCode::SERVICE_UNAVAILABLE, &format!("{e}\n")),
            };
            vary_on_accept(resp)
        }
        ("GET", p) if p == "/sessions" || p.starts_with("/sessions/") => {
            let Some(store) = kept(state) else {
                return not_kept();
            };
            match crate::session::admin_route(store.as_ref(), p, query).await {
                Some((code, mut body)) => {
                    with_whatif(state, p, &mut body);
                    let mut resp = with_type(
                        Response::new(full(serde_json::to_vec_pretty(&body).unwrap_or_default())),
                        "application/json",
                    );
                    *resp.status_mut() =
                        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    if p == "/sessions" || p == "/sessions/" {
                        resp = vary_on_accept(resp);
                    }
                    resp
                }
                None => status(StatusCode::NOT_FOUND, "not found\n"),
            }
        }
        _ => status(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `GET /sessions/{id}` with the live what-if's figures for the session, when it follows it.
fn with_whatif(state: &AdminState, path: &str, body: &mut serde_json::Value) {
    let id = path.strip_prefix("/sessions/");
    let id = id.and_then(crate::session::pages::json::session_id_segment);
    let (Some(id), Some(board), Some(doc)) = (id, &state.whatif, body.as_object_mut()) else {
        return;
    };
    if let Some(figures) = board.read().ok().and_then(|b| b.session_json(&id)) {
        doc.insert("whatif".into(), figures);
    }
}

/// The session id of `/sessions/{id}/timeline` (one non-empty path segment, decoded).
fn timeline_id(path: &str) -> Option<String> {
    let id = path.strip_prefix("/sessions/")?.strip_suffix("/timeline")?;
    crate::session::pages::json::session_id_segment(id)
}

fn kept(state: &AdminState) -> Option<Arc<dyn SessionStore>> {
    state.store.clone()
}

fn not_kept() -> Response<ProxyBody> {
    status(
        StatusCode::NOT_FOUND,
        "sessions are not kept (sessions.monitor = false and no policy is active)\n",
    )
}

/// Whether the client prefers HTML to JSON: a browser's `Accept` (`text/html,…,*/*;q=0.8`)
/// does; `application/json`, `*/*` and no `Accept` at all get JSON, as before the page.
fn wants_html(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    // The highest quality the client gives to any of `ranges`.
    let quality = |ranges: &[&str]| -> f32 {
        accept
            .split(',')
            .filter_map(|item| {
                let mut parts = item.split(';');
                let range = parts.next()?.trim().to_ascii_lowercase();
                if !ranges.contains(&range.as_str()) {
                    return None;
                }
                let q = parts
                    .filter_map(|p| p.trim().strip_prefix("q="))
                    .find_map(|q| q.trim().parse::<f32>().ok())
                    .unwrap_or(1.0);
                Some(q)
            })
            .fold(0.0, f32::max)
    };
    let html = quality(&["text/html"]);
    html > 0.0 && html > quality(&["application/json", "application/*", "*/*"])
}

fn vary_on_accept(mut resp: Response<ProxyBody>) -> Response<ProxyBody> {
    resp.headers_mut()
        .insert(VARY, HeaderValue::from_static("accept"));
    resp
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
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

fn status(code: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut resp = Response::new(full(text.to_string()));
    *resp.status_mut() = code;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_str(value).unwrap());
        wants_html(&headers)
    }

    #[test]
    fn browsers_get_the_page_and_everyone_else_json() {
        // Chromium's and Firefox's Accept for a page.
        assert!(accept("text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"));
        assert!(accept(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        ));
        assert!(!accept("*/*"), "curl");
        assert!(!accept("application/json"));
        assert!(!accept("application/json, text/html;q=0.5"));
        assert!(!accept("text/html;q=0"));
        assert!(!accept("text/html, application/json"), "a tie keeps JSON");
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn the_timeline_path_names_one_session() {
        assert_eq!(
            timeline_id("/sessions/abc/timeline").as_deref(),
            Some("abc")
        );
        assert_eq!(
            timeline_id("/sessions/team-a%3Aabc/timeline").as_deref(),
            Some("team-a:abc")
        );
        assert_eq!(timeline_id("/sessions/%FF/timeline"), None);
        assert_eq!(timeline_id("/sessions/timeline"), None);
        assert_eq!(timeline_id("/sessions//timeline"), None);
        assert_eq!(timeline_id("/sessions/a/b/timeline"), None);
        assert_eq!(timeline_id("/sessions/abc"), None);
    }
}
