//! The Conversations API (`/v1/conversations`): a conversation holds items, and a Responses
//! request naming it (`conversation`) is read by the model after the conversation's items;
//! its input and its answer are then added to the conversation. Every token of the
//! conversation is billed again as input on each request, read from cache where the cache
//! holds it, as with `previous_response_id`.
//!
//! Served: create (with up to 20 items and metadata), retrieve, update (metadata), delete,
//! and the items: list (`limit`, `order`, `after`), add (up to 20 at a time), retrieve,
//! delete. The shapes are the OpenAI SDK's `Conversation`, `ConversationDeletedResource`
//! and `ConversationItemList`.

use http::Method;
use serde_json::{json, Value};

use super::recent::Recent;
use crate::error::{ApiError, ErrorKind};

/// Conversations kept (the oldest are forgotten, as if expired).
pub const CAPACITY: usize = 1024;
/// "Initial items to include in the conversation context. You may add up to 20 items at a
/// time." (openai-python's `ConversationCreateParams`; `ItemCreateParams` the same).
const ITEMS_AT_A_TIME: usize = 20;
/// "Set of 16 key-value pairs that can be attached to an object." (its `Conversation`).
const METADATA_PAIRS: usize = 16;
/// The default and largest page of a listing: "Limit can range between 1 and 100, and the
/// default is 20." (its `ItemListParams`, whose `order` defaults to `desc`).
const PAGE_DEFAULT: usize = 20;
const PAGE_MAX: usize = 100;

struct Conversation {
    created_at: u64,
    metadata: Value,
    items: Vec<Kept>,
    /// Items ever added, for their ids.
    added: u64,
}

/// An item of a conversation: as it was sent (what the model reads), and its id.
struct Kept {
    id: String,
    sent: Value,
}

impl Kept {
    /// The item as the API lists it: a message as a `message` item with its content as
    /// parts (a string is one text part) and a status, every item with its id.
    fn listed(&self) -> Value {
        let Value::Object(mut fields) = self.sent.clone() else {
            return self.sent.clone();
        };
        let is_message = fields
            .get("type")
            .map_or(fields.contains_key("role"), |t| t == "message");
        if is_message {
            fields.insert("type".into(), json!("message"));
            let part = match fields.get("role").and_then(Value::as_str) {
                Some("assistant") => "output_text",
                _ => "input_text",
            };
            if let Some(Value::String(text)) = fields.get("content") {
                let text = text.clone();
                fields.insert("content".into(), json!([{"type": part, "text": text}]));
            }
            fields.entry("status").or_insert(json!("completed"));
        }
        fields.insert("id".into(), json!(self.id));
        Value::Object(fields)
    }
}

/// The emulator's conversations, by id.
pub struct Conversations {
    by_id: Recent<Conversation>,
    created: u64,
}

impl Default for Conversations {
    fn default() -> Self {
        Conversations {
            by_id: Recent::new(CAPACITY),
            created: 0,
        }
    }
}

impl Conversations {
    /// Serve a request under `/v1/conversations` (`path` without a trailing `/`, `query`
    /// the URI's query): the object to answer with.
    pub fn serve(
        &mut self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        body: Option<Value>,
        now_secs: u64,
    ) -> Result<Value, ApiError> {
        let rest = path
            .strip_prefix("/v1/conversations")
            .ok_or_else(not_served)?;
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let body = body.unwrap_or_else(|| json!({}));
        match (method, parts.as_slice()) {
            (&Method::POST, []) => self.create(&body, now_secs),
            (&Method::GET, [id]) => Ok(self.get(id)?.object(id)),
            (&Method::POST, [id]) => {
                let metadata = metadata(body.get("metadata"))?
                    .ok_or_else(|| ApiError::invalid("metadata: Field required"))?;
                let conversation = self.get_mut(id)?;
                conversation.metadata = metadata;
                Ok(conversation.object(id))
            }
            (&Method::DELETE, [id]) => {
                self.get(id)?;
                self.by_id.remove(id);
                Ok(json!({"id": id, "object": "conversation.deleted", "deleted": true}))
            }
            (&Method::GET, [id, "items"]) => self.get(id)?.list(query),
            (&Method::POST, [id, "items"]) => {
                let items = body
                    .get("items")
                    .and_then(Value::as_array)
                    .ok_or_else(|| ApiError::invalid("items: Field required"))?;
                check_count(items)?;
                let added = self.get_mut(id)?.add(id, items.iter().cloned());
                Ok(page(added, false))
            }
            (&Method::GET, [id, "items", item]) => self
                .get(id)?
                .items
                .iter()
                .find(|kept| kept.id == *item)
                .map(Kept::listed)
                .ok_or_else(|| item_not_found(item)),
            (&Method::DELETE, [id, "items", item]) => {
                let conversation = self.get_mut(id)?;
                let before = conversation.items.len();
                conversation.items.retain(|kept| kept.id != *item);
                if conversation.items.len() == before {
                    return Err(item_not_found(item));
                }
                Ok(conversation.object(id))
            }
            _ => Err(not_served()),
        }
    }

    /// The conversation a Responses request names, if any, checked: it exists, and the
    /// request does not also name a previous response.
    pub fn named(&self, request: &Value) -> Result<Option<String>, ApiError> {
        let Some(field) = request.get("conversation").filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let id = crate::providers::openai_responses::conversation_id_of(field)
            .ok_or_else(|| ApiError::invalid("conversation: Input should be a valid string"))?;
        if request
            .get("previous_response_id")
            .is_some_and(|v| !v.is_null())
        {
            return Err(ApiError::invalid(
                "previous_response_id: cannot be used in conjunction with conversation",
            ));
        }
        self.get(&id)?;
        Ok(Some(id))
    }

    /// The request as the model reads it: the conversation's items as they were sent, then
    /// its own input.
    pub fn expand(&self, id: &str, request: &Value) -> Result<Value, ApiError> {
        let conversation = self.get(id)?;
        let mut items: Vec<Value> = conversation.items.iter().map(|k| k.sent.clone()).collect();
        items.extend(crate::providers::openai_responses::input_items(request));
        let mut expanded = request.clone();
        expanded["input"] = Value::Array(items);
        Ok(expanded)
    }

    /// Add a request's input and its answer's output to the conversation.
    pub fn answered(&mut self, id: &str, request: &Value, output: &Value) {
        let input = crate::providers::openai_responses::input_items(request);
        let output = output.as_array().into_iter().flatten().cloned();
        if let Ok(conversation) = self.get_mut(id) {
            conversation.add(id, input.into_iter().chain(output));
        }
    }

    fn create(&mut self, body: &Value, now_secs: u64) -> Result<Value, ApiError> {
        let items = match body.get("items") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => return Err(ApiError::invalid("items: Input should be a valid list")),
        };
        check_count(&items)?;
        let metadata = metadata(body.get("metadata"))?.unwrap_or_else(|| json!({}));
        self.created += 1;
        let id = format!("conv_emu{:020}", self.created);
        let mut conversation = Conversation {
            created_at: now_secs,
            metadata,
            items: Vec::new(),
            added: 0,
        };
        conversation.add(&id, items);
        let object = conversation.object(&id);
        self.by_id.insert(id, conversation);
        Ok(object)
    }

    fn get(&self, id: &str) -> Result<&Conversation, ApiError> {
        self.by_id.get(id).ok_or_else(|| not_found(id))
    }

    fn get_mut(&mut self, id: &str) -> Result<&mut Conversation, ApiError> {
        self.by_id.get_mut(id).ok_or_else(|| not_found(id))
    }
}

impl Conversation {
    fn object(&self, id: &str) -> Value {
        json!({"id": id, "object": "conversation", "created_at": self.created_at,
               "metadata": self.metadata})
    }

    /// Add items, each with its own id or a new one; the added ones as listed.
    fn add(&mut self, conversation: &str, items: impl IntoIterator<Item = Value>) -> Vec<Value> {
        let start = self.items.len();
        for sent in items {
            self.added += 1;
            let id = match sent.get("id").and_then(Value::as_str) {
                Some(id) => id.to_string(),
                None => {
                    let serial = conversation.trim_start_matches("conv_");
                    format!("item_{serial}_{:06}", self.added)
                }
            };
            self.items.push(Kept { id, sent });
        }
        self.items[start..].iter().map(Kept::listed).collect()
    }

    /// A page of the items: `order` `desc` (the default) or `asc`, after the item `after`.
    fn list(&self, query: Option<&str>) -> Result<Value, ApiError> {
        let param = |name: &str| crate::http_serve::query_value(query, name);
        let limit = match param("limit") {
            None => PAGE_DEFAULT,
            Some(n) => n
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=PAGE_MAX).contains(n))
                .ok_or_else(|| ApiError::invalid("limit: must be between 1 and 100"))?,
        };
        let mut items: Vec<&Kept> = self.items.iter().collect();
        match param("order") {
            None | Some("desc") => items.reverse(),
            Some("asc") => {}
            Some(_) => return Err(ApiError::invalid("order: Input should be 'asc' or 'desc'")),
        }
        if let Some(after) = param("after") {
            let at = items
                .iter()
                .position(|kept| kept.id == after)
                .ok_or_else(|| item_not_found(after))?;
            items.drain(..=at);
        }
        let has_more = items.len() > limit;
        let shown = items.into_iter().take(limit).map(Kept::listed).collect();
        Ok(page(shown, has_more))
    }
}

/// A `list` object of items.
fn page(items: Vec<Value>, has_more: bool) -> Value {
    let id_at = |i: Option<&Value>| i.and_then(|i| i.get("id")).cloned().unwrap_or(Value::Null);
    json!({"object": "list", "first_id": id_at(items.first()), "last_id": id_at(items.last()),
           "has_more": has_more, "data": items})
}

fn metadata(field: Option<&Value>) -> Result<Option<Value>, ApiError> {
    match field {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(pairs)) if pairs.len() > METADATA_PAIRS => Err(ApiError::invalid(
            "metadata: Object should have at most 16 properties",
        )),
        Some(Value::Object(pairs)) if pairs.values().all(Value::is_string) => {
            Ok(Some(Value::Object(pairs.clone())))
        }
        Some(_) => Err(ApiError::invalid(
            "metadata: Input should be an object of strings",
        )),
    }
}

fn check_count(items: &[Value]) -> Result<(), ApiError> {
    if items.len() > ITEMS_AT_A_TIME {
        return Err(ApiError::invalid(format!(
            "items: You may add up to {ITEMS_AT_A_TIME} items at a time, got {}",
            items.len()
        )));
    }
    Ok(())
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("Conversation with id '{id}' not found."),
    )
}

fn item_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("Item with id '{id}' not found."),
    )
}

fn not_served() -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        "this conversations path is not served by the emulator",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(c: &mut Conversations, method: Method, path: &str, body: Value) -> Value {
        c.serve(&method, path, None, Some(body), 100).unwrap()
    }

    #[test]
    fn a_conversation_is_created_listed_and_deleted() {
        let mut c = Conversations::default();
        let created = serve(
            &mut c,
            Method::POST,
            "/v1/conversations",
            json!({"items": [{"role": "user", "content": "hello"}], "metadata": {"k": "v"}}),
        );
        let id = created["id"].as_str().unwrap().to_string();
        assert_eq!(created["object"], "conversation");
        assert_eq!(created["metadata"], json!({"k": "v"}));
        let path = format!("/v1/conversations/{id}/items");
        serve(
            &mut c,
            Method::POST,
            &path,
            json!({"items": [{"type": "message", "role": "assistant", "content": "hi"}]}),
        );
        let listed = c
            .serve(&Method::GET, &path, Some("order=asc"), None, 0)
            .unwrap();
        let data = listed["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!(
            data[0]["content"],
            json!([{"type": "input_text", "text": "hello"}])
        );
        assert_eq!(data[1]["content"][0]["type"], "output_text");
        assert_eq!(listed["first_id"], data[0]["id"]);
        // The default order is the newest first; a page of one says there is more.
        let newest = c
            .serve(&Method::GET, &path, Some("limit=1"), None, 0)
            .unwrap();
        assert_eq!(newest["data"][0]["id"], data[1]["id"]);
        assert_eq!(newest["has_more"], true);
        let deleted = serve(
            &mut c,
            Method::DELETE,
            &format!("/v1/conversations/{id}"),
            json!({}),
        );
        assert_eq!(deleted["deleted"], true);
        let gone = c.serve(
            &Method::GET,
            &format!("/v1/conversations/{id}"),
            None,
            None,
            0,
        );
        assert_eq!(gone.unwrap_err().kind, ErrorKind::NotFound);
    }

    #[test]
    fn a_request_reads_the_conversation_before_its_input_and_adds_to_it() {
        let mut c = Conversations::default();
        let id = serve(&mut c, Method::POST, "/v1/conversations", json!({}))["id"]
            .as_str()
            .unwrap()
            .to_string();
        let first = json!({"model": "m", "input": "one", "conversation": id});
        assert_eq!(c.named(&first).unwrap().as_deref(), Some(id.as_str()));
        let answer = json!([{"id": "msg_1", "type": "message", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": "A"}]}]);
        c.answered(&id, &first, &answer);
        let second = json!({"model": "m", "input": [{"role": "user", "content": "two"}],
            "conversation": {"id": id}});
        let expanded = c.expand(&id, &second).unwrap();
        let input = expanded["input"].as_array().unwrap();
        assert_eq!(input.len(), 3, "{expanded}");
        // The items as they were sent (the answer as the provider gave it), as
        // `previous_response_id` reads a stored answer.
        assert_eq!(input[0], json!({"role": "user", "content": "one"}));
        assert_eq!(input[1], answer[0]);
        assert_eq!(input[2], json!({"role": "user", "content": "two"}));
        // Naming both a conversation and a previous response is refused, as is a
        // conversation that does not exist.
        let both = json!({"model": "m", "input": "x", "conversation": id,
            "previous_response_id": "resp_1"});
        assert_eq!(c.named(&both).unwrap_err().kind, ErrorKind::InvalidRequest);
        let unknown = json!({"model": "m", "input": "x", "conversation": "conv_nope"});
        assert_eq!(c.named(&unknown).unwrap_err().kind, ErrorKind::NotFound);
        let too_many = json!({"items": vec![json!({"role": "user", "content": "x"}); 21]});
        let refused = c.serve(&Method::POST, "/v1/conversations", None, Some(too_many), 0);
        assert_eq!(refused.unwrap_err().kind, ErrorKind::InvalidRequest);
    }
}
