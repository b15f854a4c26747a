//! Bedrock Runtime as the emulator serves it: `InvokeModel` and
//! `InvokeModelWithResponseStream` with Anthropic bodies, answered by the Messages rules and
//! accounting (Bedrock runs Anthropic's models and reports Anthropic's cache counters), the
//! stream framed as an AWS event stream. Requests are checked as Bedrock checks them: a
//! SigV4 signature against the test credentials the emulator knows (`--aws-credentials`),
//! or a Bedrock API key (`authorization: Bearer`, one of `--api-key`); the body must name
//! `anthropic_version: "bedrock-2023-05-31"` and no `model` (the path names it).

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::generate::{answer, Asked};
use super::routes::{error_response, Shared};
use crate::cache_model::Accounting;
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::ResponseBody;
use crate::providers::bedrock::{self, eventstream, sigv4};
use crate::route::{Endpoint, Provider};

/// Serve a request under `/model/`.
pub(super) async fn serve(
    shared: &Shared,
    seq: u64,
    request_id: &str,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    match invoke(shared, seq, request_id, req).await {
        Ok(resp) => resp,
        Err(err) => refusal(request_id, &err),
    }
}

/// A Bedrock error: `{"message"}`, its type in `x-amzn-errortype`.
fn refusal(request_id: &str, err: &ApiError) -> Response<ResponseBody> {
    let mut resp = error_response(Provider::Bedrock, request_id, err);
    resp.headers_mut().insert(
        "x-amzn-errortype",
        HeaderValue::from_static(bedrock::error_type(err.kind)),
    );
    resp
}

async fn invoke(
    shared: &Shared,
    seq: u64,
    request_id: &str,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let path = req.uri().path().to_string();
    let (op, model) = match (
        req.method() == http::Method::POST,
        bedrock::operation(&path),
        bedrock::model_of(&path),
    ) {
        (true, Some(op), Some(model)) => (op, model),
        _ => {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!("{} {path} is not served by the emulator", req.method()),
            ))
        }
    };
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or(path.clone(), |p| p.as_str().to_string());
    let (parts, body) = req.into_parts();
    let body = super::read::read_bytes(body).await?;
    shared.check_aws(
        parts.method.as_str(),
        &path_and_query,
        &parts.headers,
        &body,
    )?;
    if op.endpoint == Endpoint::Converse {
        return super::converse::respond(
            shared,
            seq,
            request_id,
            &parts.headers,
            &model,
            op,
            &body,
        )
        .await;
    }
    let mut request: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("Malformed input request: {e}")))?;
    let Some(fields) = request.as_object_mut() else {
        return Err(ApiError::invalid(
            "Malformed input request, please reformat your input and try again.",
        ));
    };
    // "#: extraneous key [model] is not permitted": Bedrock takes the model from the path,
    // the stream from the operation.
    for key in ["model", "stream"] {
        if fields.contains_key(key) {
            return Err(ApiError::invalid(format!(
                "Malformed input request: #: extraneous key [{key}] is not permitted, please reformat your input and try again."
            )));
        }
    }
    if fields.get("anthropic_version").and_then(Value::as_str) != Some(bedrock::ANTHROPIC_VERSION) {
        return Err(ApiError::invalid(
            "Malformed input request: #: required key [anthropic_version] not found or invalid, please reformat your input and try again.",
        ));
    }
    // Bedrock takes the betas in the body (`anthropic_beta`, a list), not in a header.
    let betas = fields
        .get("anthropic_beta")
        .and_then(Value::as_array)
        .map(|list| {
            let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
            names.join(",")
        });
    fields.insert("model".into(), json!(model));
    fields.insert("stream".into(), json!(op.stream));
    let mut asked = Asked::of(&parts.headers)?;
    asked.event_stream = op.stream;
    asked.betas = betas.or(asked.betas);
    let (endpoint, provider) = (Endpoint::Messages, Provider::Bedrock);
    let mut resp = answer(
        shared,
        endpoint,
        provider,
        (seq, request_id),
        asked,
        request,
    )
    .await?;
    if !op.stream {
        resp.headers_mut().insert(
            "x-amzn-bedrock-content-type",
            HeaderValue::from_static("application/json"),
        );
    }
    Ok(resp)
}

/// The SSE events of a Messages answer as the event stream InvokeModelWithResponseStream
/// sends: each event's JSON in a `chunk` frame, the last (`message_stop`) with Bedrock's
/// invocation metrics; an `error` event as an exception frame.
pub(super) fn frames(
    events: Vec<Bytes>,
    accounting: &Accounting,
    output_tokens: u64,
) -> Vec<Bytes> {
    events
        .into_iter()
        .filter_map(|event| {
            let text = std::str::from_utf8(&event).ok()?;
            let data = text.lines().find_map(|l| l.strip_prefix("data: "))?;
            let mut json: Value = serde_json::from_str(data).ok()?;
            match json.get("type").and_then(Value::as_str) {
                Some("error") => {
                    let message = json
                        .pointer("/error/message")
                        .and_then(Value::as_str)
                        .unwrap_or("the model stream failed");
                    return Some(eventstream::exception_frame(
                        "modelStreamErrorException",
                        message,
                    ));
                }
                Some("message_stop") => {
                    json["amazon-bedrock-invocationMetrics"] = json!({
                        "inputTokenCount": accounting.input_tokens,
                        "outputTokenCount": output_tokens,
                        "invocationLatency": 0,
                        "firstByteLatency": 0,
                    });
                }
                _ => {}
            }
            Some(eventstream::chunk_frame(json.to_string().as_bytes()))
        })
        .collect()
}

impl Shared {
    /// Check a Bedrock request's credential: a SigV4 signature by known credentials, or a
    /// Bedrock API key. With neither configured, any request is served.
    fn check_aws(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Result<(), ApiError> {
        let known = self.aws_credentials();
        if sigv4::is_signed(headers) {
            if known.is_empty() {
                return Ok(());
            }
            // Signatures are checked against real time, as Bedrock does, whatever the cache
            // clock says.
            let now = std::time::SystemTime::now();
            return sigv4::verify(known, method, path_and_query, headers, body, now)
                .map_err(|e| ApiError::new(ErrorKind::Authentication, e));
        }
        let checks_keys = self.checks_keys();
        if known.is_empty() && !checks_keys {
            return Ok(());
        }
        let bearer_accepted = checks_keys
            && self
                .refuse_credentials(Provider::Bedrock, headers)
                .is_none();
        match bearer_accepted {
            true => Ok(()),
            false => Err(ApiError::new(
                ErrorKind::Authentication,
                "Missing Authentication Token",
            )),
        }
    }
}
