//! Bedrock requests on their way upstream: a SigV4 signature covers the host it was made
//! for, so a client's signature made for cachet's own address cannot be forwarded as it
//! came. cachet signs the request itself when it holds AWS credentials (the client's
//! signature, if any, is replaced: only the signature headers change), passes a request
//! without a signature (or with a Bedrock API key, `authorization: Bearer`) on as it came,
//! and refuses a signed one it cannot sign anew, rather than forward a broken signature.

use http::{HeaderMap, Method};

use crate::error::{ApiError, ErrorKind};
use crate::providers::bedrock::sigv4::{self, AwsCredentials};
use crate::transport::upstream_client::RequestBody;

/// Sign a Bedrock request for `url` with cachet's credentials, or leave it as it came; a
/// request the client signed, which cachet cannot sign anew, is refused.
pub fn sign_or_refuse(
    credentials: Option<&AwsCredentials>,
    method: &Method,
    url: &reqwest::Url,
    headers: &mut HeaderMap,
    body: &RequestBody,
) -> Result<(), ApiError> {
    let Some(credentials) = credentials else {
        if sigv4::is_signed(headers) {
            return Err(ApiError::new(
                ErrorKind::Authentication,
                "cachet cannot forward a request signed with SigV4 for its own address (the \
                 signature covers the host): give cachet the AWS credentials \
                 (upstream.aws_credentials or upstream.aws_profile) and send requests unsigned \
                 (Claude Code: CLAUDE_CODE_SKIP_BEDROCK_AUTH=1), or send a Bedrock API key \
                 (authorization: Bearer)",
            ));
        }
        return Ok(());
    };
    let RequestBody::Whole(payload) = body else {
        return Err(ApiError::invalid(
            "cachet signs the Bedrock requests it reads: this path's body is not one of them",
        ));
    };
    // A Bedrock API key the client sent is not cachet's to replace; a cachet key it
    // presented was taken off at the edge.
    if !sigv4::is_signed(headers) && headers.contains_key(http::header::AUTHORIZATION) {
        return Ok(());
    }
    let hash = sigv4::payload_hash(payload.pieces());
    credentials
        .sign(
            method.as_str(),
            url.as_str(),
            headers,
            &hash,
            std::time::SystemTime::now(),
        )
        .map_err(|e| ApiError::new(ErrorKind::Internal, e))
}
