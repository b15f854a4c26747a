//! Vertex AI's Anthropic models as the emulator serves them: `:rawPredict` and
//! `:streamRawPredict` with Anthropic bodies, answered by the Messages rules and
//! accounting (the same models, the same cache), the stream as the Messages API's SSE. The
//! body must name `anthropic_version: "vertex-2023-10-16"`; the model is the path's. The
//! credential (`authorization: Bearer`, a Google access token) is checked against
//! `--api-key` like any other.

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::generate::{answer, Asked};
use super::routes::{error_response, read_json, Shared};
use crate::error::ApiError;
use crate::http_serve::ResponseBody;
use crate::providers::vertex;
use crate::route::{Endpoint, Provider};

/// Serve a publisher-model request of Vertex.
pub(super) async fn serve(
    shared: &Shared,
    seq: u64,
    request_id: &str,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    match predict(shared, seq, request_id, req).await {
        Ok(resp) => resp,
        Err(err) => error_response(Provider::Vertex, request_id, &err),
    }
}

async fn predict(
    shared: &Shared,
    seq: u64,
    request_id: &str,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let path = req.uri().path().to_string();
    let target = vertex::target(&path)
        .filter(|_| req.method() == http::Method::POST)
        .ok_or_else(|| ApiError::invalid(format!("{} {path} is not served", req.method())))?;
    let (model, stream) = (target.model.to_string(), target.stream);
    let asked = Asked::of(req.headers())?;
    let mut request = read_json(req).await?;
    let Some(fields) = request.as_object_mut() else {
        return Err(ApiError::invalid("request body must be a JSON object"));
    };
    if fields.get("anthropic_version").and_then(Value::as_str) != Some(vertex::ANTHROPIC_VERSION) {
        return Err(ApiError::invalid(format!(
            "anthropic_version: Input should be '{}'",
            vertex::ANTHROPIC_VERSION
        )));
    }
    // The model is the path's; `:streamRawPredict` streams whatever the body says.
    fields.insert("model".into(), json!(model));
    if stream {
        fields.insert("stream".into(), json!(true));
    }
    let (endpoint, provider) = (Endpoint::Messages, Provider::Vertex);
    answer(
        shared,
        endpoint,
        provider,
        (seq, request_id),
        asked,
        request,
    )
    .await
}
