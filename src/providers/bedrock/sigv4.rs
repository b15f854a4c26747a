//! AWS Signature Version 4 on Bedrock requests, with `aws-sigv4`: cachet signs a request
//! itself when it holds AWS credentials (the signature covers the host, so a request the
//! client signed for cachet's own address could never be forwarded as it came), and the
//! emulator checks the signatures it receives against known test credentials.
//!
//! What is signed: every header the request goes upstream with (but those the signer leaves
//! out: `authorization`, `user-agent`, `x-amzn-trace-id`, `transfer-encoding`), the host
//! and path of the upstream URL, and the SHA-256 of the body.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderMap, HeaderName, HeaderValue};
use subtle::ConstantTimeEq;

use crate::secret::Secret;

/// The signing name of Bedrock (its credential scope's service).
pub const SERVICE: &str = "bedrock";
/// The algorithm an `authorization` header of a SigV4 signature starts with.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The headers a signature adds: removed from a client's request before cachet signs it
/// anew (or refuses to forward a signature it cannot keep).
pub const SIGNATURE_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// AWS credentials cachet holds, with the region they sign for.
#[derive(Clone)]
pub struct AwsCredentials {
    pub access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
    pub region: String,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The region when neither the environment nor the profile names one (the AWS SDKs' own
/// fallback is an error; Bedrock's first region is `us-east-1`).
pub const DEFAULT_REGION: &str = "us-east-1";

impl AwsCredentials {
    pub fn new(
        access_key_id: &str,
        secret_access_key: &str,
        session_token: Option<&str>,
        region: &str,
    ) -> AwsCredentials {
        AwsCredentials {
            access_key_id: access_key_id.to_string(),
            secret_access_key: Secret::new(secret_access_key),
            session_token: session_token.map(Secret::new),
            region: region.to_string(),
        }
    }

    /// From `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` (optional) and
    /// `AWS_REGION` (or `AWS_DEFAULT_REGION`), as every AWS SDK reads them.
    pub fn from_env() -> Result<AwsCredentials, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let id = var("AWS_ACCESS_KEY_ID").ok_or("AWS_ACCESS_KEY_ID is not set")?;
        let secret = var("AWS_SECRET_ACCESS_KEY").ok_or("AWS_SECRET_ACCESS_KEY is not set")?;
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| DEFAULT_REGION.to_string());
        let token = var("AWS_SESSION_TOKEN");
        Ok(AwsCredentials::new(&id, &secret, token.as_deref(), &region))
    }

    /// From a named profile of the shared files: its keys in `~/.aws/credentials`
    /// (`AWS_SHARED_CREDENTIALS_FILE`), its region in `~/.aws/config` (`AWS_CONFIG_FILE`,
    /// section `[profile NAME]`, or `[default]`), else `AWS_REGION`.
    pub fn from_profile(name: &str) -> Result<AwsCredentials, String> {
        let home = std::env::var("HOME").unwrap_or_default();
        let file = |var: &str, default: &str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| format!("{home}/.aws/{default}"))
        };
        let credentials_path = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let text = std::fs::read_to_string(&credentials_path)
            .map_err(|e| format!("cannot read {credentials_path}: {e}"))?;
        let section = ini_section(&text, name)
            .ok_or_else(|| format!("{credentials_path} has no profile [{name}]"))?;
        let get = |key: &str| {
            section
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let id = get("aws_access_key_id")
            .ok_or_else(|| format!("profile [{name}] has no aws_access_key_id"))?;
        let secret = get("aws_secret_access_key")
            .ok_or_else(|| format!("profile [{name}] has no aws_secret_access_key"))?;
        let config = std::fs::read_to_string(file("AWS_CONFIG_FILE", "config")).unwrap_or_default();
        let config_name = match name {
            "default" => "default".to_string(),
            other => format!("profile {other}"),
        };
        let region = ini_section(&config, &config_name)
            .and_then(|s| s.into_iter().find(|(k, _)| k == "region").map(|(_, v)| v))
            .or_else(|| get("region"))
            .or_else(|| std::env::var("AWS_REGION").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| DEFAULT_REGION.to_string());
        Ok(AwsCredentials::new(
            &id,
            &secret,
            get("aws_session_token").as_deref(),
            &region,
        ))
    }

    fn identity(&self) -> Identity {
        Credentials::new(
            self.access_key_id.clone(),
            self.secret_access_key.expose().to_string(),
            self.session_token.as_ref().map(|t| t.expose().to_string()),
            None,
            "cachet",
        )
        .into()
    }

    /// Sign a request for `url` (its host, path and query as sent) whose body has the
    /// SHA-256 `body_sha256` ([`payload_hash`]): the client's own signature headers are
    /// replaced by cachet's.
    pub fn sign(
        &self,
        method: &str,
        url: &str,
        headers: &mut HeaderMap,
        body_sha256: &str,
        at: SystemTime,
    ) -> Result<(), String> {
        strip_signature(headers);
        let body = SignableBody::Precomputed(body_sha256.to_string());
        let added = self.signature_headers(method, url, headers, body, at, &self.region)?;
        for (name, value) in added {
            let mut value =
                HeaderValue::from_str(&value).map_err(|_| "a signature header is not ASCII")?;
            value.set_sensitive(name == "authorization" || name == "x-amz-security-token");
            headers.insert(HeaderName::from_static(name), value);
        }
        Ok(())
    }

    /// The headers a signature of the request adds (`authorization`, `x-amz-date`, and
    /// `x-amz-security-token` with a session token).
    fn signature_headers(
        &self,
        method: &str,
        url: &str,
        headers: &HeaderMap,
        body: SignableBody<'_>,
        at: SystemTime,
        region: &str,
    ) -> Result<Vec<(&'static str, String)>, String> {
        let identity = self.identity();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(SERVICE)
            .time(at)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| format!("cannot sign: {e}"))?
            .into();
        let pairs = headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new(method, url, pairs, body)
            .map_err(|e| format!("cannot sign: {e}"))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| format!("cannot sign: {e}"))?
            .into_parts();
        let (added, _) = instructions.into_parts();
        Ok(added
            .into_iter()
            .map(|h| (h.name(), h.value().to_string()))
            .collect())
    }
}

/// The hex SHA-256 of a body sent in pieces, as the signature names it.
pub fn payload_hash(pieces: &[bytes::Bytes]) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for piece in pieces {
        hash.update(piece);
    }
    hex::encode(hash.finalize())
}

/// The `[name]` section of an INI file (the AWS shared files), as key-value pairs.
fn ini_section(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let mut inside = false;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') && line.ends_with(']') {
            inside = line[1..line.len() - 1].trim() == name;
            if inside {
                found.get_or_insert_with(Vec::new);
            }
            continue;
        }
        if !inside || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let (Some(section), Some((k, v))) = (found.as_mut(), line.split_once('=')) {
            section.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    found
}

/// Remove a client's signature from its headers.
pub fn strip_signature(headers: &mut HeaderMap) {
    for name in SIGNATURE_HEADERS {
        headers.remove(name);
    }
}

/// Whether a request carries a SigV4 signature (made for whatever host the client sent it
/// to: cachet's, behind a gateway).
pub fn is_signed(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with(ALGORITHM))
}

/// The parts of a SigV4 `authorization` header.
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Option<Authorization<'_>> {
    let rest = value.trim().strip_prefix(ALGORITHM)?.trim();
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let mut scope = credential?.split('/');
    let access_key_id = scope.next()?;
    let date = scope.next()?;
    let region = scope.next()?;
    let service = scope.next()?;
    (scope.next()? == "aws4_request").then_some(())?;
    Some(Authorization {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed?.split(';').collect(),
        signature: signature?,
    })
}

/// Check a request's SigV4 signature against the credentials that may have made it, as
/// Bedrock does: the access key must be known, the scope's service `bedrock`, the time
/// within 5 minutes of `now`, and the signature over the signed headers, the path, the query
/// and the body's hash must match. `host` is the `host` header it was sent with.
pub fn verify(
    known: &[AwsCredentials],
    method: &str,
    path_and_query: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<(), String> {
    let value = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or("Missing Authentication Token")?;
    let auth = parse_authorization(value).ok_or(
        "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters",
    )?;
    let creds = known
        .iter()
        .find(|c| c.access_key_id == auth.access_key_id)
        .ok_or("The security token included in the request is invalid.")?;
    if auth.service != SERVICE {
        return Err(format!(
            "Credential should be scoped to correct service: '{SERVICE}'."
        ));
    }
    let amz_date = headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or("the request has no x-amz-date")?;
    let at = parse_amz_date(amz_date).ok_or("x-amz-date is not a date")?;
    if !amz_date.starts_with(auth.date) {
        return Err("the credential scope's date is not the request's".into());
    }
    let skew = now
        .duration_since(at)
        .or_else(|_| at.duration_since(now))
        .unwrap_or_default();
    if skew.as_secs() > 300 {
        return Err("Signature expired: the request time is more than 5 minutes away".into());
    }
    let mut signed = HeaderMap::new();
    for name in &auth.signed_headers {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            return Err("a signed header's name is not valid".into());
        };
        for value in headers.get_all(&name) {
            signed.append(name.clone(), value.clone());
        }
    }
    let host = headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or("the request has no host")?;
    let url = format!("http://{host}{path_and_query}");
    let body = SignableBody::Bytes(body);
    let expected = creds.signature_headers(method, &url, &signed, body, at, auth.region)?;
    let computed = expected
        .iter()
        .find(|(name, _)| *name == "authorization")
        .and_then(|(_, v)| parse_authorization(v).map(|a| a.signature.to_string()))
        .ok_or("cannot compute the signature")?;
    if bool::from(computed.as_bytes().ct_eq(auth.signature.as_bytes())) {
        Ok(())
    } else {
        Err("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.".into())
    }
}

/// `20150830T123600Z` as a time.
fn parse_amz_date(value: &str) -> Option<SystemTime> {
    let civil = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", value).ok()?;
    // Days since the epoch of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let (y, m, d) = (
        i64::from(civil.year()),
        i64::from(civil.month()),
        i64::from(civil.day()),
    );
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400
        + i64::from(civil.hour()) * 3600
        + i64::from(civil.minute()) * 60
        + i64::from(civil.second());
    let secs = u64::try_from(secs).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AWS Signature Version 4 test suite's credentials and time (`aws-sig-v4-test-suite`:
    /// region `us-east-1`, service `service`, 2015-08-30T12:36:00Z).
    fn suite() -> (AwsCredentials, SystemTime) {
        let creds = AwsCredentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            "us-east-1",
        );
        (creds, parse_amz_date("20150830T123600Z").unwrap())
    }

    fn suite_signature(method: &str, url: &str) -> String {
        let (creds, at) = suite();
        let body = SignableBody::Bytes(b"");
        let added = creds
            .signature_headers(method, url, &HeaderMap::new(), body, at, "us-east-1")
            .unwrap();
        added
            .into_iter()
            .find(|(n, _)| *n == "authorization")
            .unwrap()
            .1
    }

    /// The suite's published vectors, signed with the suite's service name.
    #[test]
    fn the_signer_reproduces_the_sigv4_test_suite() {
        // The suite signs for the service `service`; our signer is Bedrock's, so the
        // vectors are checked through the same signing code with that name.
        fn with_service(method: &str, url: &str) -> String {
            let (creds, at) = suite();
            let identity = creds.identity();
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region("us-east-1")
                .name("service")
                .time(at)
                .settings(SigningSettings::default())
                .build()
                .unwrap()
                .into();
            let signable =
                SignableRequest::new(method, url, std::iter::empty(), SignableBody::Bytes(b""))
                    .unwrap();
            let (instructions, _) = sign(signable, &params).unwrap().into_parts();
            let found = instructions
                .headers()
                .find(|(n, _)| *n == "authorization")
                .map(|(_, v)| v.to_string());
            found.unwrap()
        }
        let scope = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=";
        for (name, method, url, signature) in [
            (
                "get-vanilla",
                "GET",
                "https://example.amazonaws.com/",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            ),
            (
                "get-vanilla-query-order-key-case",
                "GET",
                "https://example.amazonaws.com/?Param2=value2&Param1=value1",
                "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
            ),
            (
                "post-vanilla",
                "POST",
                "https://example.amazonaws.com/",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
            ),
        ] {
            assert_eq!(
                with_service(method, url),
                format!("{scope}{signature}"),
                "{name}"
            );
        }
        // Bedrock's scope names its own service.
        assert!(suite_signature("POST", "https://example.amazonaws.com/")
            .contains("/us-east-1/bedrock/aws4_request"));
    }

    fn signed_request(creds: &AwsCredentials, at: SystemTime, body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("host", "127.0.0.1:9000".parse().unwrap());
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("anthropic-beta", "claude-code-20250219".parse().unwrap());
        creds
            .sign(
                "POST",
                "http://127.0.0.1:9000/model/us.anthropic.claude-opus-5-5/invoke",
                &mut headers,
                &payload_hash(&[bytes::Bytes::copy_from_slice(body)]),
                at,
            )
            .unwrap();
        headers
    }

    #[test]
    fn a_signature_verifies_and_a_changed_request_does_not() {
        let (creds, at) = suite();
        let body = br#"{"anthropic_version":"bedrock-2023-05-31","messages":[]}"#;
        let headers = signed_request(&creds, at, body);
        assert!(is_signed(&headers));
        let path = "/model/us.anthropic.claude-opus-5-5/invoke";
        let known = [creds.clone()];
        assert_eq!(verify(&known, "POST", path, &headers, body, at), Ok(()));
        // Another body, another header value, another path, another key, too late.
        assert!(verify(&known, "POST", path, &headers, b"{}", at).is_err());
        let mut changed = headers.clone();
        changed.insert("anthropic-beta", "other".parse().unwrap());
        assert!(verify(&known, "POST", path, &changed, body, at).is_err());
        assert!(verify(&known, "POST", "/model/x/invoke", &headers, body, at).is_err());
        let stranger = AwsCredentials::new("AKIDEXAMPLE", "another secret", None, "us-east-1");
        assert!(verify(&[stranger], "POST", path, &headers, body, at).is_err());
        let later = at + std::time::Duration::from_secs(600);
        assert!(verify(&known, "POST", path, &headers, body, later).is_err());
        // A header added after signing, and not signed, does not matter.
        let mut added = headers.clone();
        added.insert("user-agent", "x".parse().unwrap());
        assert_eq!(verify(&known, "POST", path, &added, body, at), Ok(()));
    }

    #[test]
    fn a_session_token_is_signed_and_sent() {
        let (_, at) = suite();
        let creds = AwsCredentials::new("AKID", "secret", Some("token-1"), "eu-west-1");
        let headers = signed_request(&creds, at, b"{}");
        assert_eq!(headers["x-amz-security-token"], "token-1");
        assert!(headers["authorization"]
            .to_str()
            .unwrap()
            .contains("/eu-west-1/bedrock/aws4_request"));
        let path = "/model/us.anthropic.claude-opus-5-5/invoke";
        assert_eq!(verify(&[creds], "POST", path, &headers, b"{}", at), Ok(()));
    }

    #[test]
    fn a_profile_is_read_from_the_shared_files() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[team]\naws_access_key_id=C\naws_secret_access_key=D\n";
        let team = ini_section(text, "team").unwrap();
        assert_eq!(team[0], ("aws_access_key_id".into(), "C".into()));
        assert!(ini_section(text, "other").is_none());
    }
}
