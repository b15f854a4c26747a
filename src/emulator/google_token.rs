//! Google's OAuth 2.0 token endpoint as the emulator serves it (`POST /token`, where a test's
//! service-account key file points its `token_uri`): the JWT-bearer grant of "Using OAuth 2.0
//! for Server to Server Applications". The assertion must be signed (RS256) by the private
//! half of a service account the emulator knows (`EmulatorOptions::service_accounts`: its
//! `client_email` and public key), for the audience of this endpoint, with the
//! `cloud-platform` scope, issued now and expiring at most an hour later. An access token it
//! mints is accepted on Vertex AI's routes until it expires (3,599 s), beside `--api-key`.
//! Refusals are Google's: 400 `unsupported_grant_type` or `invalid_grant`.

use std::collections::HashMap;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;

use super::routes::Shared;
use crate::http_serve::{full, ResponseBody};

/// The path the emulator serves the grant at.
pub const PATH: &str = "/token";
/// How long a minted token lives, as Google's do.
pub const LIFETIME_SECS: u64 = 3599;
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The longest an assertion may live (`exp` - `iat`).
const MAX_ASSERTION_SECS: u64 = 3600;
/// Clock skew allowed on `iat`.
const SKEW_SECS: u64 = 300;

/// A service account the emulator knows: the public half of its key.
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    pub client_email: String,
    /// Its RSA public key, PEM (`-----BEGIN PUBLIC KEY-----` or `RSA PUBLIC KEY`).
    pub public_key_pem: String,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    scope: String,
    aud: String,
    iat: u64,
    exp: u64,
}

/// The tokens the endpoint minted, with their expiry (seconds on the emulator's clock).
#[derive(Debug, Default)]
pub struct MintedTokens {
    tokens: HashMap<String, u64>,
}

impl MintedTokens {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn insert(&mut self, token: String, expires: u64) {
        self.tokens.insert(token, expires);
    }

    /// Whether `token` was minted here and has not expired at `now`.
    pub fn valid(&self, token: &str, now: u64) -> bool {
        self.tokens.get(token).is_some_and(|expires| *expires > now)
    }
}

fn refusal(error: &str, description: &str) -> Response<ResponseBody> {
    let body = json!({"error": error, "error_description": description});
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header("content-type", "application/json; charset=utf-8")
        .body(full(body.to_string()))
        .expect("static response parts")
}

/// Serve `POST /token`.
pub(super) async fn serve(
    shared: &Shared,
    seq: u64,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let audience = match req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
    {
        Some(host) => format!("http://{host}{PATH}"),
        None => return refusal("invalid_request", "Missing host"),
    };
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return refusal("invalid_request", "Unreadable body");
    };
    let form: HashMap<String, String> = String::from_utf8_lossy(&body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("%3A", ":").replace("%3a", ":")))
        .collect();
    let grant = form.get("grant_type").map(String::as_str).unwrap_or("");
    if grant != JWT_BEARER {
        return refusal(
            "unsupported_grant_type",
            &format!("Invalid grant_type: {grant}"),
        );
    }
    let Some(assertion) = form.get("assertion") else {
        return refusal("invalid_request", "Missing required parameter: assertion");
    };
    let now = shared.now_secs();
    let claims = match verify(shared.service_accounts(), assertion, &audience, now) {
        Ok(claims) => claims,
        Err(description) => return refusal("invalid_grant", description),
    };
    let token = format!(
        "ya29.emu{seq:012}{:016x}",
        xxhash_rust::xxh3::xxh3_64(assertion.as_bytes())
    );
    shared.mint(token.clone(), now + LIFETIME_SECS);
    tracing::debug!(account = %claims.iss, "minted a token");
    let body = json!({"access_token": token, "expires_in": LIFETIME_SECS, "token_type": "Bearer"});
    Response::builder()
        .header("content-type", "application/json; charset=utf-8")
        .body(full(body.to_string()))
        .expect("static response parts")
}

/// The assertion's claims, when a known account signed it for this endpoint, now.
fn verify(
    accounts: &[ServiceAccount],
    assertion: &str,
    audience: &str,
    now: u64,
) -> Result<Claims, &'static str> {
    let header = jsonwebtoken::decode_header(assertion).map_err(|_| "Invalid JWT: malformed")?;
    if header.alg != jsonwebtoken::Algorithm::RS256 {
        return Err("Invalid JWT: the algorithm must be RS256");
    }
    // The account is the one `iss` names: read it unverified, then check its signature.
    let mut peek = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    peek.insecure_disable_signature_validation();
    peek.validate_exp = false;
    peek.validate_aud = false;
    let unverified = jsonwebtoken::decode::<Claims>(
        assertion,
        &jsonwebtoken::DecodingKey::from_secret(&[]),
        &peek,
    )
    .map_err(|_| "Invalid JWT: the claims iss, scope, aud, iat and exp are required")?;
    let account = accounts
        .iter()
        .find(|a| a.client_email == unverified.claims.iss)
        .ok_or("Invalid grant: account not found")?;
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(account.public_key_pem.as_bytes())
        .map_err(|_| "Invalid grant: account not found")?;
    let mut check = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    // Time is the emulator's clock's, checked below.
    check.validate_exp = false;
    check.validate_aud = false;
    check.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Claims>(assertion, &key, &check)
        .map_err(|_| "Invalid JWT Signature.")?
        .claims;
    if claims.aud != audience {
        return Err("Invalid JWT: aud must be this token endpoint");
    }
    if !claims.scope.split(' ').any(|s| s == SCOPE) {
        return Err("Invalid grant: the scope does not include cloud-platform");
    }
    let fresh = claims.iat <= now + SKEW_SECS
        && claims.exp > now
        && claims.exp > claims.iat
        && claims.exp - claims.iat <= MAX_ASSERTION_SECS;
    if !fresh {
        return Err("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.");
    }
    Ok(claims)
}
