//! The Google access token cachet sends to Vertex AI when it holds a service-account key
//! (`upstream.vertex_credentials_file`, or `upstream.vertex_credentials = "environment"` for
//! `GOOGLE_APPLICATION_CREDENTIALS`): minted by OAuth 2.0's JWT-bearer grant, as Google's
//! "Using OAuth 2.0 for Server to Server Applications" describes it. An assertion signed
//! with the key (RS256; claims `iss` = the key's `client_email`, `scope` =
//! `https://www.googleapis.com/auth/cloud-platform`, `aud` = the token URI, `iat`, and `exp`
//! at most an hour later) is posted as `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`
//! and `assertion=...` to the key file's own `token_uri`, which answers `access_token` and
//! `expires_in` (3,599 s).
//!
//! The token is kept until [`REFRESH_BEFORE`] ahead of its expiry; requests that need one
//! meanwhile wait for a single mint. Neither the key nor the token is ever logged or put in
//! an error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::error::{ApiError, ErrorKind};
use crate::secret::Secret;
use crate::transport::upstream_client::{RequestBody, UpstreamClient};

/// The scope Vertex AI's calls need.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The grant a signed assertion is exchanged under (RFC 7523 §2.1).
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// An assertion's lifetime: Google takes at most an hour.
const ASSERTION_SECS: u64 = 3600;
/// A held token is replaced this long before it expires.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// Time allowed for the token endpoint's answer.
const MINT_TIMEOUT: Duration = Duration::from_secs(30);

/// The fields of a service-account key file (`"type": "service_account"`) cachet reads.
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
    token_uri: String,
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

/// The token endpoint's answer.
#[derive(Deserialize)]
struct Minted {
    access_token: String,
    expires_in: u64,
}

/// Mints and holds Vertex AI's access token from one service-account key.
pub struct TokenMinter {
    email: String,
    key_id: Option<String>,
    key: jsonwebtoken::EncodingKey,
    token_uri: reqwest::Url,
    held: Mutex<Option<(Secret, SystemTime)>>,
}

impl std::fmt::Debug for TokenMinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenMinter")
            .field("email", &self.email)
            .field("token_uri", &self.token_uri.as_str())
            .finish_non_exhaustive()
    }
}

impl TokenMinter {
    /// Read a service-account key file. The error names the file and what is wrong with
    /// it, never its content.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<TokenMinter> {
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the service-account key {shown}: {e}"))?;
        let file: KeyFile = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{shown} is not a service-account key file (line {}: a field is missing or \
                 of the wrong type)",
                e.line()
            )
        })?;
        if file.kind != "service_account" {
            anyhow::bail!(
                "{shown} is a key of type {:?}: cachet mints tokens from a service account's \
                 key (\"type\": \"service_account\")",
                file.kind
            );
        }
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(file.private_key.as_bytes())
            .map_err(|_| anyhow::anyhow!("{shown}: private_key is not an RSA key in PEM"))?;
        let token_uri = reqwest::Url::parse(&file.token_uri)
            .map_err(|e| anyhow::anyhow!("{shown}: token_uri is not a URL: {e}"))?;
        Ok(TokenMinter {
            email: file.client_email,
            key_id: file.private_key_id,
            key,
            token_uri,
            held: Mutex::new(None),
        })
    }

    /// Put the held token (minted when none is fresh) in place of any credential the client
    /// sent.
    pub async fn authorize(
        &self,
        client: &UpstreamClient,
        headers: &mut HeaderMap,
    ) -> Result<(), ApiError> {
        let token = self.token(client).await?;
        let value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| ApiError::new(ErrorKind::BadGateway, self.failed("an unusable token")))?;
        crate::transport::forward::hold(headers, http::header::AUTHORIZATION, value);
        Ok(())
    }

    /// The held token, or a new one when it is within [`REFRESH_BEFORE`] of its expiry.
    pub async fn token(&self, client: &UpstreamClient) -> Result<Secret, ApiError> {
        let mut held = self.held.lock().await;
        let now = SystemTime::now();
        if let Some((token, expires)) = held.as_ref() {
            if still_fresh(*expires, now) {
                return Ok(token.clone());
            }
        }
        let minted = self.mint(client, now).await.inspect_err(|e| {
            tracing::warn!(account = %self.email, "minting a Vertex AI token failed: {}", e.message);
        })?;
        let expires = now + Duration::from_secs(minted.expires_in);
        let token = Secret::new(minted.access_token);
        *held = Some((token.clone(), expires));
        Ok(token)
    }

    fn failed(&self, what: &str) -> String {
        let host = self.token_uri.host_str().unwrap_or("the token endpoint");
        format!(
            "cachet could not mint a Vertex AI access token from its service-account key: \
             {host} answered {what}"
        )
    }

    async fn mint(&self, client: &UpstreamClient, now: SystemTime) -> Result<Minted, ApiError> {
        let iat = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let claims = Claims {
            iss: &self.email,
            scope: SCOPE,
            aud: self.token_uri.as_str(),
            iat,
            exp: iat + ASSERTION_SECS,
        };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = self.key_id.clone();
        let assertion = jsonwebtoken::encode(&header, &claims, &self.key).map_err(|_| {
            ApiError::new(ErrorKind::Internal, "signing the token assertion failed")
        })?;
        // The assertion is base64url and dots: nothing to escape in a form.
        let form = format!(
            "grant_type={}&assertion={assertion}",
            form_escape(JWT_BEARER)
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let body = RequestBody::Whole(Bytes::from(form).into());
        let sent = client.send(Method::POST, self.token_uri.clone(), headers, body);
        let host = self.token_uri.host_str().unwrap_or("the token endpoint");
        let response = match tokio::time::timeout(MINT_TIMEOUT, sent).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(crate::transport::forward::send_error(&e, host)),
            Err(_) => {
                return Err(ApiError::new(
                    ErrorKind::Timeout,
                    self.failed("nothing in time"),
                ))
            }
        };
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|_| ApiError::new(ErrorKind::BadGateway, self.failed("a broken body")))?;
        if !status.is_success() {
            // Google's errors (`invalid_grant`, ...) name what is wrong, never a secret.
            let said: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let reason = ["error", "error_description"]
                .iter()
                .filter_map(|k| said.get(*k).and_then(|v| v.as_str()))
                .collect::<Vec<_>>()
                .join(": ");
            return Err(ApiError::new(
                ErrorKind::BadGateway,
                self.failed(&format!("{} ({reason})", status.as_u16())),
            ));
        }
        serde_json::from_slice(&body)
            .map_err(|_| ApiError::new(ErrorKind::BadGateway, self.failed("no access_token")))
    }
}

/// Whether a token expiring at `expires` is still sent at `now` (not within
/// [`REFRESH_BEFORE`] of its expiry).
fn still_fresh(expires: SystemTime, now: SystemTime) -> bool {
    now + REFRESH_BEFORE < expires
}

/// `:` as a form value writes it (the grant type's only reserved character).
fn form_escape(value: &str) -> String {
    value.replace(':', "%3A")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_replaced_shortly_before_it_expires() {
        let now = SystemTime::now();
        let lifetime = Duration::from_secs(3599);
        assert!(still_fresh(now + lifetime, now));
        assert!(still_fresh(
            now + lifetime,
            now + lifetime - REFRESH_BEFORE * 2
        ));
        assert!(!still_fresh(
            now + lifetime,
            now + lifetime - REFRESH_BEFORE
        ));
        assert!(!still_fresh(now + lifetime, now + lifetime));
    }

    #[test]
    fn a_key_file_error_names_the_file_never_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.json");
        let secret =
            "-----BEGIN PRIVATE KEY-----\nnot-a-key-but-secret\n-----END PRIVATE KEY-----\n";
        let file = serde_json::json!({"type": "service_account", "client_email": "a@p.iam.gserviceaccount.com",
            "private_key": secret, "token_uri": "https://oauth2.googleapis.com/token"});
        std::fs::write(&path, file.to_string()).unwrap();
        let err = TokenMinter::from_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("key.json") && err.contains("not an RSA key"),
            "{err}"
        );
        assert!(!err.contains("not-a-key-but-secret"));
        let user = serde_json::json!({"type": "authorized_user", "client_email": "a", "private_key": "",
            "token_uri": "https://oauth2.googleapis.com/token"});
        std::fs::write(&path, user.to_string()).unwrap();
        let err = TokenMinter::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("authorized_user"), "{err}");
    }
}
