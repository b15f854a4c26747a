//! Client keys (`[[server.client_keys]]`): when any are configured, every proxied request
//! must present one of them, as `x-api-key` or `authorization: Bearer`, before its body is
//! read. Keys are compared in constant time (over their SHA-256 digests, so that a key's
//! length does not show either). The header that carried the key is removed at the edge:
//! the client's cachet key never goes upstream. The key's name labels the request's metrics
//! and namespaces its sessions.
//!
//! cachet refuses to start holding an upstream key (`*_api_key_env`, `vertex_token_env`, a
//! service-account key, AWS credentials) without client keys,
//! unless `server.allow_open_relay = true`: otherwise anyone who can reach the listener
//! spends the held key.

use std::sync::Arc;

use http::header::{HeaderName, AUTHORIZATION};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{ServerConfig, UpstreamConfig};
use crate::secret::Secret;

struct ClientKey {
    name: Arc<str>,
    digest: [u8; 32],
}

/// The configured client keys (empty: every request is let through).
#[derive(Default)]
pub struct ClientKeys {
    keys: Vec<ClientKey>,
}

impl std::fmt::Debug for ClientKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.keys.iter().map(|k| &*k.name).collect();
        f.debug_struct("ClientKeys").field("names", &names).finish()
    }
}

/// A request that presented a configured key: its name, and the header that carried it.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub name: Arc<str>,
    pub header: HeaderName,
}

impl ClientKeys {
    /// Read every key from its environment variable; refuse an open relay.
    pub fn from_config(server: &ServerConfig, upstream: &UpstreamConfig) -> anyhow::Result<Self> {
        let holds_key = upstream.holds_credentials();
        if holds_key && server.client_keys.is_empty() && !server.allow_open_relay {
            anyhow::bail!(
                "cachet holds an upstream key (upstream.*_api_key_env, upstream.vertex_token_env, \
                 upstream.vertex_credentials(_file), upstream.aws_credentials or \
                 upstream.aws_profile) but no client keys are \
                 configured: anyone who \
                 reaches the listener would spend it. Add [[server.client_keys]] entries, or \
                 set server.allow_open_relay = true"
            );
        }
        let mut keys: Vec<ClientKey> = Vec::new();
        for entry in &server.client_keys {
            let value = match std::env::var(&entry.key_env) {
                Ok(v) if !v.is_empty() => Secret::new(v),
                _ => anyhow::bail!(
                    "environment variable {} (client key `{}`) is not set",
                    entry.key_env,
                    entry.name
                ),
            };
            let digest: [u8; 32] = Sha256::digest(value.expose().as_bytes()).into();
            if keys.iter().any(|k| bool::from(k.digest.ct_eq(&digest))) {
                anyhow::bail!(
                    "client key `{}` has the same value as another client key",
                    entry.name
                );
            }
            keys.push(ClientKey {
                name: Arc::from(entry.name.as_str()),
                digest,
            });
        }
        Ok(ClientKeys { keys })
    }

    /// Whether requests must present a key.
    pub fn required(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The key a request presents, if it is one of ours. Every configured key is compared
    /// with every candidate, whatever matched before.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<Authenticated> {
        let mut found = None;
        for (header, presented) in candidates(headers) {
            let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
            for key in &self.keys {
                if bool::from(key.digest.ct_eq(&digest)) {
                    found = Some(Authenticated {
                        name: key.name.clone(),
                        header: header.clone(),
                    });
                }
            }
        }
        found
    }
}

/// The credentials a request carries: `x-api-key`, Gemini's `x-goog-api-key`, and the
/// token of `authorization: Bearer`.
fn candidates(headers: &HeaderMap) -> Vec<(HeaderName, String)> {
    let mut out = Vec::new();
    for key in [
        crate::providers::ANTHROPIC_KEY,
        crate::providers::gemini::API_KEY_HEADER,
    ] {
        if let Some(v) = headers.get(&key).and_then(|v| v.to_str().ok()) {
            out.push((key, v.trim().to_string()));
        }
    }
    if let Some(v) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            out.push((AUTHORIZATION, v[7..].trim().to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientKeyConfig;

    fn keys(entries: &[(&str, &str, &str)]) -> anyhow::Result<ClientKeys> {
        let mut server = ServerConfig::default();
        for (name, env, value) in entries {
            std::env::set_var(env, value);
            server.client_keys.push(ClientKeyConfig {
                name: name.to_string(),
                key_env: env.to_string(),
            });
        }
        ClientKeys::from_config(&server, &UpstreamConfig::default())
    }

    #[test]
    fn either_header_authenticates_and_names_itself() {
        let k = keys(&[
            ("team-a", "CACHET_UNIT_KEY_A", "ck-a-1"),
            ("team-b", "CACHET_UNIT_KEY_B", "ck-b-2"),
        ])
        .unwrap();
        let mut h = HeaderMap::new();
        assert!(k.authenticate(&h).is_none());
        h.insert("x-api-key", "ck-b-2".parse().unwrap());
        let a = k.authenticate(&h).unwrap();
        assert_eq!((&*a.name, a.header.as_str()), ("team-b", "x-api-key"));
        let mut h = HeaderMap::new();
        h.insert("authorization", "bearer ck-a-1".parse().unwrap());
        let a = k.authenticate(&h).unwrap();
        assert_eq!((&*a.name, a.header.as_str()), ("team-a", "authorization"));
        for wrong in ["ck-a-", "ck-a-11", "", "Bearer"] {
            let mut h = HeaderMap::new();
            h.insert("x-api-key", wrong.parse().unwrap());
            assert!(k.authenticate(&h).is_none(), "{wrong}");
        }
    }

    #[test]
    fn a_held_key_without_client_keys_is_an_open_relay() {
        let upstream = UpstreamConfig {
            anthropic_api_key_env: Some("CACHET_UNIT_HELD".into()),
            ..Default::default()
        };
        let err = ClientKeys::from_config(&ServerConfig::default(), &upstream).unwrap_err();
        assert!(err.to_string().contains("allow_open_relay"), "{err}");
        let open = ServerConfig {
            allow_open_relay: true,
            ..Default::default()
        };
        assert!(!ClientKeys::from_config(&open, &upstream)
            .unwrap()
            .required());
    }

    #[test]
    fn duplicate_values_and_missing_variables_are_refused() {
        let err = keys(&[
            ("a", "CACHET_UNIT_DUP_1", "same"),
            ("b", "CACHET_UNIT_DUP_2", "same"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("same value"), "{err}");
        let mut server = ServerConfig::default();
        server.client_keys.push(ClientKeyConfig {
            name: "a".into(),
            key_env: "CACHET_UNIT_NEVER_SET".into(),
        });
        let err = ClientKeys::from_config(&server, &UpstreamConfig::default()).unwrap_err();
        assert!(err.to_string().contains("CACHET_UNIT_NEVER_SET"), "{err}");
        assert!(!err.to_string().contains("same"));
    }
}
