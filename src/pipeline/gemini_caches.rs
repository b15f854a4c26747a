//! Gemini explicit caches a client creates through cachet: what each holds, so that a
//! request naming one is measured on the prompt the model reads (the cache's members, then
//! its own contents; [`crate::providers::gemini::explicit`]), not on the few contents it
//! sends. Observation only: the request goes upstream as it came.

use bytes::Bytes;
use serde_json::Value;

use super::exchange::{Answer, Exchange};
use super::recall::namespaced_key;
use super::Pipeline;
use crate::providers::gemini::explicit;
use crate::route::Endpoint;

/// The bytes of what the remembered caches hold, at most: the least recently used are
/// forgotten first (a cache may hold megabytes of inline data).
pub(super) const REMEMBERED_CACHE_BYTES: u64 = 64 << 20;

/// The remembered caches, weighed by the bytes each holds.
pub(super) fn remembered_caches() -> moka::sync::Cache<u128, Bytes> {
    moka::sync::Cache::builder()
        .weigher(|_, held: &Bytes| u32::try_from(held.len()).unwrap_or(u32::MAX))
        .max_capacity(REMEMBERED_CACHE_BYTES)
        .build()
}

impl Pipeline {
    /// Remember what a create through cachet stored, under the name its answer gives, in
    /// the client key's namespace.
    pub(super) fn remember_gemini_cache(&self, ex: &Exchange, answer: &Answer) {
        let created = ex.route.endpoint == Endpoint::CachedContents
            && ex.parts.method == http::Method::POST
            && (200..300).contains(&answer.status);
        let Some(name) = answer.tap.response_id.as_deref().filter(|_| created) else {
            return;
        };
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&ex.body) else {
            return;
        };
        let key = namespaced_key(name.as_bytes(), ex.namespace());
        if let Ok(held) = serde_json::to_vec(&explicit::prefix_of(&body)) {
            self.gemini_caches.insert(key, Bytes::from(held));
        }
    }

    /// The body a `generateContent` that names a remembered cache is measured as; `None`
    /// for any other request.
    pub(super) fn expanded_gemini_body(&self, ex: &Exchange) -> Option<Bytes> {
        let names_one = |field: &[u8]| memchr::memmem::find(&ex.body, field).is_some();
        if ex.route.endpoint != Endpoint::GenerateContent
            || !(names_one(b"\"cachedContent\"") || names_one(b"\"cached_content\""))
        {
            return None;
        }
        let request: Value = serde_json::from_slice(&ex.body).ok()?;
        let name = explicit::named_cache(&request)?;
        let held = self
            .gemini_caches
            .get(&namespaced_key(name.as_bytes(), ex.namespace()))?;
        let prefix: Value = serde_json::from_slice(&held).ok()?;
        serde_json::to_vec(&explicit::expand(&request, &prefix))
            .ok()
            .map(Bytes::from)
    }
}
