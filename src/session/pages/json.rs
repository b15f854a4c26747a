//! The admin listener's JSON: `GET /sessions/{id}` and `GET /sessions`.

use serde_json::{json, Value};

use crate::session::entry::Entry;
use crate::session::store::{SessionStore, StoreResult};
use crate::usage::Usage;

/// A session's entries with totals, or `None` when the session is unknown.
pub async fn session_json(store: &dyn SessionStore, id: &str) -> StoreResult<Option<Value>> {
    let log = store.load_from(id, 0).await?;
    if log.is_empty() {
        return Ok(None);
    }
    let mut total = Usage::default();
    let (mut requests, mut transforms) = (0u64, 0u64);
    // The prefix breaks by who can fix them.
    let mut breaks: serde_json::Map<String, Value> = (crate::measure::Who::ALL.iter())
        .map(|w| (w.label().to_owned(), json!(0)))
        .collect();
    let entries: Vec<Value> = log
        .iter()
        .map(|entry| {
            match entry {
                Entry::Request(r) => {
                    requests += 1;
                    if let Some(usage) = &r.usage {
                        total.add(usage);
                    }
                    if let Some(d) = &r.diagnosis {
                        let n = &mut breaks[d.blame().who.label()];
                        *n = json!(n.as_u64().unwrap_or(0) + 1);
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
        "breaks": breaks,
        "entries": entries,
    })))
}

/// The most recently active sessions, newest first.
pub async fn sessions_json(store: &dyn SessionStore, limit: usize) -> StoreResult<Value> {
    let sessions = store.list_sessions(limit).await?;
    Ok(json!({ "sessions": sessions }))
}

/// Default and largest `limit` for `GET /sessions`.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 1000;

/// Answer an admin request under `/sessions`: `None` when `path` is not a sessions path,
/// else the status and JSON body (404 for an unknown session, 503 when the store is down).
/// `query` is the raw query string; `limit=N` bounds `GET /sessions`.
pub async fn admin_route(
    store: &dyn SessionStore,
    path: &str,
    query: Option<&str>,
) -> Option<(u16, Value)> {
    let result = if path == "/sessions" || path == "/sessions/" {
        sessions_json(store, limit_from(query)).await.map(Some)
    } else {
        let id = session_id_segment(path.strip_prefix("/sessions/")?)?;
        session_json(store, &id).await
    };
    Some(match result {
        Ok(Some(body)) => (200, body),
        Ok(None) => (404, json!({"error": "no such session"})),
        Err(err) => (503, json!({"error": err.to_string()})),
    })
}

/// A session id from one path segment, percent-decoded (`team-a%3Ab7…` is `team-a:b7…`, as
/// browsers and links send it). `None` for an empty segment, more than one, or bytes that
/// do not decode to UTF-8.
pub fn session_id_segment(segment: &str) -> Option<String> {
    if segment.is_empty() || segment.contains('/') {
        return None;
    }
    let id = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()?;
    (!id.is_empty()).then(|| id.into_owned())
}

/// The `limit=N` of a `GET /sessions` query, bounded (the HTML overview reads it too).
pub(crate) fn limit_from(query: Option<&str>) -> usize {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("limit="))
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(DEFAULT_LIMIT, |n| n.min(MAX_LIMIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_read_and_bounded() {
        assert_eq!(limit_from(None), DEFAULT_LIMIT);
        assert_eq!(limit_from(Some("limit=3")), 3);
        assert_eq!(limit_from(Some("x=1&limit=7")), 7);
        assert_eq!(limit_from(Some("limit=abc")), DEFAULT_LIMIT);
        assert_eq!(limit_from(Some("limit=999999")), MAX_LIMIT);
    }
}
