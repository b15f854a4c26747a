//! Gemini explicit caches a client creates through cachet: what each holds, so that a
//! request naming one is measured on the prompt the model reads (the cache's members, then
//! its own contents; [`crate::providers::gemini::explicit`]), not on the few contents it
//! sends. Observation only: the request goes upstream as it came.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::exchange::{Answer, Exchange};
use super::recall::namespaced_key;
use super::Pipeline;
use crate::providers::gemini::explicit;
use crate::route::Endpoint;

/// How many caches are remembered, each with what it holds (a cache holds at least the
/// model's minimum, a few thousand tokens: some tens of kilobytes each).
pub(super) const REMEMBERED_CACHES: u64 = 1_024;

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
        self.gemini_caches
            .insert(key, Arc::new(explicit::prefix_of(&body)));
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
        let prefix = self
            .gemini_caches
            .get(&namespaced_key(name.as_bytes(), ex.namespace()))?;
        serde_json::to_vec(&explicit::expand(&request, &prefix))
            .ok()
            .map(Bytes::from)
    }
}
