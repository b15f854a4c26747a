//! JSON for the admin listener: `GET /sessions/{id}` and `GET /sessions`.

use serde_json::{json, Value};

use super::entry::Entry;
use super::store::{SessionStore, StoreResult};
use crate::usage::Usage;

/// A session's entries with totals, or `None` when the session is unknown.
pub async fn session_json(store: &dyn SessionStore, id: &str) -> StoreResult<Option<Value>> {
    let log = store.load(id).await?;
    if log.is_empty() {
        return Ok(None);
    }
    let mut total = Usage::default();
    let (mut requests, mut transforms) = (0u64, 0u64);
    let entries: Vec<Value> = log
        .iter()
        .map(|entry| {
            match entry {
                Entry::Request(r) => {
                    requests += 1;
                    if let Some(usage) = &r.usage {
                        total.add(usage);
                    }
                }
                Entry::ContextTransform(_) => transforms += 1,
                Entry::Unknown => {}
            }
            serde_json::to_value(entry).unwrap_or(Value::Null)
        })
        .collect();
    Ok(Some(json!({
        "session": id,
        "requests": requests,
        "context_transforms": transforms,
        "usage": total,
        "entries": entries,
    })))
}

/// The most recently active sessions, newest first.
pub async fn sessions_json(store: &dyn SessionStore, limit: usize) -> StoreResult<Value> {
    let sessions = store.list_sessions(limit).await?;
    Ok(json!({ "sessions": sessions }))
}
