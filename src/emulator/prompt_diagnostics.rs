//! The Responses API's prompt cache diagnostics, answered from the cache model: every
//! answer of a model that has them keeps its fingerprint under its id, and a request naming
//! one in `prompt_cache_options.comparison_response_id` gets `prompt_cache_diagnostics`
//! back (see [`crate::cache_model::openai_diagnosis`]).

use serde_json::Value;

use super::routes::{recover, Shared};
use crate::cache_model::openai_diagnosis::{comparison_id, Comparison, ResponsesFingerprint};
use crate::cache_model::Accounting;
use crate::error::ApiError;

impl Shared {
    /// The `prompt_cache_diagnostics` of a Responses answer `id` to `prompt` (the request
    /// as the model reads it), `None` when it named no comparison response. A model without
    /// diagnostics answers `unavailable` ("the model does not support diagnostics").
    pub(super) fn diagnose_responses(
        &self,
        prompt: &Value,
        model: &str,
        id: &str,
        accounting: &Accounting,
        unavailable: bool,
    ) -> Result<Option<Value>, ApiError> {
        let compared = comparison_id(prompt)?;
        if !crate::cache_model::takes_breakpoints(model) {
            return Ok(compared.map(|_| Comparison::Unavailable.to_json()));
        }
        let current = ResponsesFingerprint::of(prompt, accounting)?;
        let mut store = recover(&self.responses_fingerprints);
        let outcome = compared.map(|earlier| match store.get(earlier) {
            _ if unavailable => Comparison::Unavailable,
            Some(before) => current.compared_with(before),
            None => Comparison::NotFound,
        });
        store.insert(id.to_string(), current);
        Ok(outcome.map(|o| o.to_json()))
    }
}
