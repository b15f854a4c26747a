//! Identify the session: the first identifier that applies (see `session::identity`);
//! without one, the session whose latest request this request's history extends, as the
//! provider's prefix cache would see it; only when none does, the fingerprint of a new
//! session. A tool or system change mid-session (an MCP server connecting) is then a
//! diagnosed break inside the session, not a new session.
//!
//! With client keys configured, every session lives in its key's namespace: the id a
//! request names (or its fingerprint) becomes `NAME:id`, and history continuation looks
//! only at the same key's sessions. One client cannot write into, or continue, another's
//! session by sending its id. Key names cannot hold `:`, so namespaces never overlap.

use http::HeaderMap;

use super::Pipeline;
use crate::envelope::Envelope;
use crate::session::{self, IdSource, PrefixHashes, SessionId};

/// How many recent histories are remembered for continuation: one per request, about
/// 230 bytes each (key, session id and the cache's own entry), so about 7.5 MB when full.
/// A conversation idle while this many other requests pass continues under its
/// fingerprint, the same session unless its tools or system prompt changed meanwhile.
pub(super) const REMEMBERED_HISTORIES: u64 = 32_768;
/// How many recent Responses answers are remembered with their session, for requests that
/// continue one by `previous_response_id`: about 150 bytes each, so about 5 MB when full.
pub(super) const REMEMBERED_ANSWER_SESSIONS: u64 = 32_768;
/// A request continues a session only by a history of this many messages or more (a
/// prompt and an answer at least): a shared first prompt alone is no continuation.
const MIN_CONTINUED: usize = 2;

impl Pipeline {
    pub(super) async fn identify(
        &self,
        headers: &HeaderMap,
        env: &Envelope,
        hashes: &PrefixHashes,
        namespace: Option<&str>,
    ) -> SessionId {
        let mut id = session::identify(headers, env);
        id.id = in_namespace(&id.id, namespace);
        if id.source == IdSource::Fingerprint {
            // A stateful Responses request carries only its new input: the answer it names
            // says which conversation it goes on.
            let continued = session::identity::previous_response(env)
                .and_then(|answer| self.answers.get(&in_namespace(&answer, namespace)));
            if let Some(found) = continued {
                id = SessionId {
                    id: found,
                    source: IdSource::PreviousResponse,
                };
            }
        }
        if id.source == IdSource::Fingerprint {
            for n in (MIN_CONTINUED..=hashes.len()).rev() {
                let Some(anchor) = hashes.anchor_at(n) else {
                    continue;
                };
                let remembered = in_namespace(&anchor.hash, namespace);
                if let Some(found) = self.histories.get(&remembered).await {
                    id = SessionId {
                        id: found,
                        source: IdSource::History,
                    };
                    break;
                }
            }
        }
        // Remembered as soon as it is identified: the next request may come before this
        // one's entry is written.
        if hashes.len() >= MIN_CONTINUED {
            let remembered = in_namespace(&hashes.full().hash, namespace);
            self.histories.insert(remembered, id.id.clone()).await;
        }
        id
    }
}

impl Pipeline {
    /// Remember which session an answer belongs to, for the requests that name it in
    /// `previous_response_id` (Responses answers only: no other API names its answers).
    pub(super) fn remember_answer(
        &self,
        route: crate::providers::Route,
        answer: Option<&str>,
        session: &str,
        namespace: Option<&str>,
    ) {
        if let (crate::providers::Endpoint::Responses, Some(answer)) = (route.endpoint, answer) {
            self.answers
                .insert(in_namespace(answer, namespace), session.to_string());
        }
    }
}

/// A session id (or remembered history) inside a client key's namespace.
pub(super) fn in_namespace(id: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(name) => format!("{name}:{id}"),
        None => id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::in_namespace;

    #[test]
    fn namespaces_keep_keys_apart() {
        assert_eq!(in_namespace("s", None), "s");
        assert_eq!(in_namespace("s", Some("team-a")), "team-a:s");
        // Team b naming team a's namespaced id still lands in its own namespace.
        assert_ne!(
            in_namespace("team-a:s", Some("team-b")),
            in_namespace("s", Some("team-a"))
        );
    }
}
