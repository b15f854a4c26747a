//! Stored responses. A Responses answer the provider keeps (`store`, on by default) can be
//! continued by `previous_response_id`: the model then sees the stored conversation (its
//! input and output) before the new input, and every token of it is billed again as input,
//! read from cache where the cache holds it. The new request's `instructions` stand alone:
//! a previous response's are not carried over.

use serde_json::Value;

use super::recent::Recent;
use crate::error::ApiError;
use crate::providers::openai_responses::{input_items, stores_answer_of};

/// Stored conversations kept (the oldest are forgotten, as if expired).
pub const CAPACITY: usize = 1024;

/// Stored Responses answers: each answer's conversation (its input, then its output).
pub struct Stored(Recent<Vec<Value>>);

impl Default for Stored {
    fn default() -> Self {
        Stored(Recent::new(CAPACITY))
    }
}

impl Stored {
    /// The request as the model sees it, when it continues a stored response: the stored
    /// conversation's items before its own input. `None` when it names no previous response.
    pub fn expand(&self, request: &Value) -> Result<Option<Value>, ApiError> {
        let id = match request.get("previous_response_id") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(id)) => id,
            Some(_) => {
                return Err(ApiError::invalid(
                    "previous_response_id: Input should be a valid string",
                ))
            }
        };
        let stored = self.0.get(id).ok_or_else(|| {
            ApiError::invalid(format!("Previous response with id '{id}' not found."))
        })?;
        let mut items = stored.clone();
        items.extend(input_items(request));
        let mut expanded = request.clone();
        expanded["input"] = Value::Array(items);
        Ok(Some(expanded))
    }

    /// Keep an answer's conversation (`prompt`'s input, then `output`) under its id, unless
    /// the request asked not to store it.
    pub fn keep(&mut self, id: String, prompt: &Value, output: &Value) {
        if !stores_answer_of(prompt) {
            return;
        }
        let mut items = input_items(prompt);
        items.extend(output.as_array().into_iter().flatten().cloned());
        self.0.insert(id, items);
    }
}
