//! The Gemini API's explicit caches (`/v1beta/cachedContents`): `POST` creates one, `GET`
//! lists them or reads one, `PATCH` moves its expiration, `DELETE` removes it; the rules
//! are [`crate::cache_model::gemini_explicit`]'s, shared with replay.

use http::{Method, Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::gemini::{error_response, ok, query_param};
use super::routes::{read_json, Accounted, Shared};
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::{full, ResponseBody};
use crate::route::Endpoint;

/// Serve one request under `/v1beta/cachedContents` (the key already checked).
pub async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<ResponseBody> {
    match serve(shared, req).await {
        Ok(body) => ok(full(body.to_string())),
        Err(err) => error_response(&err),
    }
}

async fn serve(shared: &Shared, req: Request<Incoming>) -> Result<Value, ApiError> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let name = path
        .strip_prefix("/v1beta/")
        .filter(|n| n.starts_with("cachedContents/"))
        .map(str::to_string);
    let update_mask = req
        .uri()
        .query()
        .and_then(|q| query_param(q, "updateMask").or_else(|| query_param(q, "update_mask")));
    let method = req.method().clone();
    match (method, name) {
        (Method::POST, None) => {
            let body = read_json(req).await?;
            let stored = shared.with_cache(|c, now| c.gemini_caches().create(&body, now))?;
            record(shared, &stored.resource, stored.accounting);
            Ok(stored.resource)
        }
        (Method::GET, None) => {
            let live = shared.with_cache(|c, now| c.gemini_caches().list(now));
            // An empty list is an empty object, as the API answers it.
            Ok(match live.is_empty() {
                true => json!({}),
                false => json!({"cachedContents": live}),
            })
        }
        (Method::GET, Some(name)) => {
            shared.with_cache(|c, now| c.gemini_caches().get(&name, now).map(|c| c.resource()))
        }
        (Method::PATCH, Some(name)) => {
            let body = read_json(req).await?;
            let stored = shared.with_cache(|c, now| {
                c.gemini_caches()
                    .update(&name, &body, update_mask.as_deref(), now)
            })?;
            record(shared, &stored.resource, stored.accounting);
            Ok(stored.resource)
        }
        (Method::DELETE, Some(name)) => {
            shared.with_cache(|c, now| c.gemini_caches().delete(&name, now))?;
            Ok(json!({}))
        }
        (method, _) => Err(ApiError::new(
            ErrorKind::NotFound,
            format!("Method not found: {method} {path}"),
        )),
    }
}

/// Keep what a create or an update billed in the emulator's log.
fn record(shared: &Shared, resource: &Value, accounting: crate::cache_model::Accounting) {
    let model = resource["model"].as_str().unwrap_or_default();
    shared.record(Accounted {
        endpoint: Endpoint::CachedContents,
        model: model.strip_prefix("models/").unwrap_or(model).to_string(),
        accounting,
        output_tokens: 0,
    });
}
