//! Amazon Bedrock Runtime: every rule cachet knows about this API.
//!
//! - Routes: `POST /model/{modelId}/invoke` and `/invoke-with-response-stream` carry an
//!   Anthropic Messages body ([`INVOKE`]: the Messages wire's rules on Bedrock's route);
//!   `/model/{modelId}/converse` and `/converse-stream` carry a Converse body
//!   ([`converse`]). The model is the path's (a model id, an inference profile such as
//!   `us.anthropic.claude-opus-5-5`, or a percent-encoded ARN), never the body's: Bedrock
//!   refuses a `model` (or `stream`) key in an InvokeModel body, which names
//!   `anthropic_version: "bedrock-2023-05-31"` instead (docs.aws.amazon.com, "Anthropic
//!   Claude Messages API": "anthropic_version – (Required) The anthropic version. The value
//!   must be bedrock-2023-05-31"), and its betas in `anthropic_beta`.
//! - Streams are AWS event streams, not SSE ([`eventstream`]): each Anthropic event in a
//!   `chunk` frame. The answer of `InvokeModel` is the Messages answer itself.
//! - Credentials: SigV4 ([`sigv4`]) or a Bedrock API key (`authorization: Bearer`).
//! - Errors: `{"message": M}` with the type in the `x-amzn-errortype` header.

pub mod converse;
pub mod eventstream;
pub mod sigv4;

use bytes::Bytes;

use super::anthropic::Messages;
use crate::error::ErrorKind;
use crate::route::{Endpoint, Provider};

/// InvokeModel and InvokeModelWithResponseStream: the Messages rules on Bedrock's route.
pub static INVOKE: Messages = Messages::routed(Provider::Bedrock, Endpoint::Invoke);

/// The `anthropic_version` an InvokeModel body of a Claude model names.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The Bedrock Runtime endpoint of a region (docs.aws.amazon.com, "Amazon Bedrock
/// endpoints and quotas": `bedrock-runtime.{region}.amazonaws.com`).
pub fn regional_endpoint(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// The operation a Bedrock Runtime path names, and whether its answer streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    pub endpoint: Endpoint,
    pub stream: bool,
}

/// The operation of `POST /model/{modelId}/{op}`.
pub fn operation(path: &str) -> Option<Operation> {
    let (_, op) = split(path)?;
    let (endpoint, stream) = match op {
        "invoke" => (Endpoint::Invoke, false),
        "invoke-with-response-stream" => (Endpoint::Invoke, true),
        "converse" => (Endpoint::Converse, false),
        "converse-stream" => (Endpoint::Converse, true),
        _ => return None,
    };
    Some(Operation { endpoint, stream })
}

/// The model a Bedrock Runtime path names, percent-decoded (an ARN arrives encoded).
pub fn model_of(path: &str) -> Option<String> {
    let (model, _) = split(path)?;
    let decoded = percent_encoding::percent_decode_str(model)
        .decode_utf8()
        .ok()?
        .into_owned();
    (!decoded.is_empty()).then_some(decoded)
}

/// `/model/{modelId}/{op}` as (model, op).
fn split(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/model/")?;
    let (model, op) = rest.rsplit_once('/')?;
    (!model.is_empty() && !model.contains('/')).then_some((model, op))
}

/// The `x-amzn-errortype` of an error (the Bedrock Runtime API reference's error list).
pub fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::UpgradeRefused | ErrorKind::TooLarge => {
            "ValidationException"
        }
        ErrorKind::Authentication => "UnrecognizedClientException",
        ErrorKind::NotFound => "ResourceNotFoundException",
        ErrorKind::RateLimit => "ThrottlingException",
        ErrorKind::RequestTimeout | ErrorKind::Timeout => "ModelTimeoutException",
        ErrorKind::Unavailable | ErrorKind::Overloaded => "ServiceUnavailableException",
        ErrorKind::Internal | ErrorKind::BadGateway => "InternalServerException",
    }
}

/// An error body: `{"message": M}` (the type goes in `x-amzn-errortype`).
pub fn error_body(_kind: ErrorKind, message: &str) -> Bytes {
    Bytes::from(serde_json::json!({ "message": message }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_and_models_from_paths() {
        let op = operation("/model/us.anthropic.claude-opus-5-5/invoke-with-response-stream");
        assert_eq!(
            op,
            Some(Operation {
                endpoint: Endpoint::Invoke,
                stream: true
            })
        );
        assert_eq!(
            operation("/model/m/converse").map(|o| (o.endpoint, o.stream)),
            Some((Endpoint::Converse, false))
        );
        assert_eq!(operation("/model/m/other"), None);
        assert_eq!(operation("/model//invoke"), None);
        assert_eq!(
            model_of("/model/us.anthropic.claude-opus-4-5-20251101-v1:0/invoke").as_deref(),
            Some("us.anthropic.claude-opus-4-5-20251101-v1:0")
        );
        // An inference profile's ARN arrives percent-encoded, its slash included.
        assert_eq!(
            model_of("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.anthropic.claude-opus-5-5/converse").as_deref(),
            Some("arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude-opus-5-5")
        );
    }
}
