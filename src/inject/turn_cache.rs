//! Content computed once per user prompt and reused by every call of that turn.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// Which injection of which session for which user prompt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TurnKey {
    pub session: String,
    /// Identifies the `[[inject]]` table (e.g. policy name and table index).
    pub inject: String,
    /// SHA-256 of the latest user prompt.
    pub prompt_hash: [u8; 32],
}

impl TurnKey {
    pub fn new(session: &str, inject: &str, prompt: &str) -> Self {
        TurnKey {
            session: session.to_string(),
            inject: inject.to_string(),
            prompt_hash: Sha256::digest(prompt.as_bytes()).into(),
        }
    }
}

/// What a turn's fetch gave: the text to inject ("" means none) or why there is none.
/// A failure is kept too, so every call of the turn agrees (no injection flapping in and
/// out of the prefix within one turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub text: String,
    pub error: Option<String>,
}

/// A bounded cache of fetched content, shared across requests.
#[derive(Clone)]
pub struct TurnCache {
    inner: moka::future::Cache<TurnKey, Arc<Fetched>>,
}

impl TurnCache {
    pub fn new(capacity: u64) -> Self {
        TurnCache {
            inner: moka::future::Cache::new(capacity),
        }
    }

    /// The turn's content, running `fetch` only for the first call of the turn. The flag
    /// says whether this call ran it (count a source error once, not per call).
    pub async fn get_or_fetch<F>(&self, key: TurnKey, fetch: F) -> (Arc<Fetched>, bool)
    where
        F: std::future::Future<Output = Fetched>,
    {
        let entry = self
            .inner
            .entry(key)
            .or_insert_with(async { Arc::new(fetch.await) })
            .await;
        let fresh = entry.is_fresh();
        (entry.into_value(), fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fetches_once_per_prompt() {
        let cache = TurnCache::new(100);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let fetch = || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Fetched {
                text: "notes".into(),
                error: None,
            }
        };
        let k = TurnKey::new("s1", "memory#0", "fix the test");
        let (a, fresh_a) = cache.get_or_fetch(k.clone(), fetch()).await;
        let (b, fresh_b) = cache.get_or_fetch(k, fetch()).await;
        assert_eq!((fresh_a, fresh_b), (true, false));
        assert_eq!(a, b);
        let (_, fresh_c) = cache
            .get_or_fetch(TurnKey::new("s1", "memory#0", "next prompt"), fetch())
            .await;
        assert!(fresh_c);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
