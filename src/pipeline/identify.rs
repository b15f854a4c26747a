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

use std::sync::Arc;

use http::HeaderMap;

use super::Pipeline;
use crate::envelope::Envelope;
use crate::session::{self, IdSource, PrefixHashes, SessionId};

/// How many recent histories are remembered for continuation: one per request, about
/// 400 bytes each with the system allocator's overhead (273 allocated: moka's entry with
/// the 128-bit key, and the session id; 72 fewer than with the hash's hex as the key), so
/// about 13 MB when full.
/// A conversation idle while this many other requests pass continues under its
/// fingerprint, the same session unless its tools or system prompt changed meanwhile.
pub(super) const REMEMBERED_HISTORIES: u64 = 32_768;
/// How many recent stored Responses answers are remembered with their session, for
/// requests that continue one by `previous_response_id` (and the latest answer of each
/// Conversations API conversation, for the requests naming it): about 385 bytes each
/// (measured as `REMEMBERED_HISTORIES`), so about 6.3 MB when full. A conversation idle
/// while this many other stored answers pass starts a new session (or, named by
/// `conversation`, counts its turns from the session's log).
pub(super) const REMEMBERED_ANSWER_SESSIONS: u64 = 16_384;
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
            if let Some(found) = self.continued_answer(env, namespace) {
                id = SessionId {
                    id: found,
                    source: IdSource::PreviousResponse,
                };
            }
        }
        if id.source == IdSource::Fingerprint {
            for n in (MIN_CONTINUED..=hashes.len()).rev() {
                let Some(hash) = hashes.hash_at(n) else {
                    continue;
                };
                if let Some(found) = self.histories.get(&history_key(hash, namespace)).await {
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
        let whole = hashes
            .hash_at(hashes.len())
            .filter(|_| hashes.len() >= MIN_CONTINUED);
        if let Some(hash) = whole {
            let remembered = history_key(hash, namespace);
            self.histories.insert(remembered, id.id.clone()).await;
        }
        id
    }
}

/// A remembered answer: the session it belongs to and the `turn_index` of its request.
#[derive(Clone)]
pub(super) struct Answered {
    session: Arc<str>,
    turn_index: u64,
}

impl Pipeline {
    /// The session of the answer a stateful Responses request names in
    /// `previous_response_id`, when it is remembered: such a request carries only its new
    /// input, and the answer says which conversation it goes on.
    pub(super) fn continued_answer(
        &self,
        env: &Envelope,
        namespace: Option<&str>,
    ) -> Option<String> {
        let answer = session::identity::previous_response(env)?;
        let found = self.answers.get(&answer_key(&answer, namespace))?;
        Some(found.session.to_string())
    }

    /// `meta.turn_index` of a request: the turns its history carries, after those of what
    /// it continues when it is a stateful Responses request (the provider holds them).
    pub(super) fn turn_index(
        &self,
        env: &Envelope,
        namespace: Option<&str>,
        log: Option<&session::SessionLog>,
    ) -> u64 {
        self.continued_turn_index(env, namespace, log)
            .unwrap_or_else(|| env.turn_index())
    }

    /// `meta.turn_index` of a stateful Responses request, counted from the turn of what it
    /// continues: remembered with the answer as it ended, else read from the session's log
    /// when that is at hand (after a restart). `None` when the request is not stateful, or
    /// that turn is not found.
    pub(super) fn continued_turn_index(
        &self,
        env: &Envelope,
        namespace: Option<&str>,
        log: Option<&session::SessionLog>,
    ) -> Option<u64> {
        let continued = Continued::of(env)?;
        let turn = match self.answers.get(&continued.key(namespace)) {
            Some(found) => found.turn_index,
            None => continued.turn_in_log(log?)?,
        };
        Some(crate::providers::turns::continued_turn_index(
            turn,
            &env.history_kinds(),
        ))
    }

    /// [`Pipeline::continued_turn_index`] read from the session's log alone: what an
    /// observed request's turn is once its session is loaded, when nothing was remembered.
    pub(super) fn continued_turn_index_in_log(
        &self,
        env: &Envelope,
        log: &session::SessionLog,
    ) -> Option<u64> {
        let turn = Continued::of(env)?.turn_in_log(log)?;
        Some(crate::providers::turns::continued_turn_index(
            turn,
            &env.history_kinds(),
        ))
    }

    /// Remember which session an answer belongs to, and its request's turn, for the
    /// requests that continue it: by `previous_response_id`, a Responses answer the
    /// provider stored (`store` not `false`; only a stored answer can be continued, so
    /// Codex's and pi's are not kept); by `conversation`, the latest answer of the
    /// conversation its request named.
    pub(super) fn remember_answer(
        &self,
        sent: &Envelope,
        answer: Option<&str>,
        session: &str,
        turn_index: u64,
        namespace: Option<&str>,
    ) {
        let Some(answer) = answer else { return };
        if sent.endpoint() != crate::providers::Endpoint::Responses {
            return;
        }
        let answered = Answered {
            session: Arc::from(session),
            turn_index,
        };
        if let Some(conversation) = session::identity::conversation(sent) {
            let key = Continued::Conversation(conversation).key(namespace);
            self.answers.insert(key, answered.clone());
        }
        if crate::providers::openai_responses::stores_answer(sent.option_raw("store")) {
            self.answers.insert(answer_key(answer, namespace), answered);
        }
    }
}

/// What a stateful Responses request continues, whose turns the provider holds: where its
/// turn counts on from, and the lane it goes on.
pub(super) enum Continued {
    /// The answer `previous_response_id` names.
    Answer(String),
    /// The latest answer of the Conversations API conversation `conversation` names.
    Conversation(String),
}

impl Continued {
    /// `None` for a request that is not stateful: its history carries its turns.
    pub(super) fn of(env: &Envelope) -> Option<Continued> {
        session::identity::previous_response(env)
            .map(Continued::Answer)
            .or_else(|| session::identity::conversation(env).map(Continued::Conversation))
    }

    /// Where its answer is remembered.
    fn key(&self, namespace: Option<&str>) -> u128 {
        match self {
            Continued::Answer(answer) => answer_key(answer, namespace),
            Continued::Conversation(id) => conversation_key(id, namespace),
        }
    }

    /// The lane it goes on: that of the answer it names, or of its conversation's latest
    /// request, when the session's log has it.
    pub(super) fn lane_in_log(&self, log: &session::SessionLog) -> Option<u32> {
        match self {
            Continued::Answer(answer) => session::lanes::continued_by_answer(log, answer),
            Continued::Conversation(id) => session::lanes::continued_in_conversation(log, id),
        }
    }

    /// The turn of the request it continues, as the session's log has it.
    fn turn_in_log(&self, log: &session::SessionLog) -> Option<u64> {
        match self {
            Continued::Answer(answer) => session::lanes::continued_request(log, answer)?.turn_index,
            Continued::Conversation(id) => {
                session::lanes::conversation_answered(log, id)?.turn_index
            }
        }
    }
}

/// An answer's id inside a client key's namespace, as the answers are remembered.
fn answer_key(answer: &str, namespace: Option<&str>) -> u128 {
    namespaced_key(answer.as_bytes(), namespace)
}

/// A conversation's id inside a client key's namespace, apart from the answers' ids.
fn conversation_key(conversation: &str, namespace: Option<&str>) -> u128 {
    namespaced_key(
        format!("conversation\0{conversation}").as_bytes(),
        namespace,
    )
}

/// A history's rolling hash inside a client key's namespace, as the histories are
/// remembered.
fn history_key(hash: &[u8; 32], namespace: Option<&str>) -> u128 {
    namespaced_key(hash, namespace)
}

/// A 128-bit hash of `bytes` inside a namespace (key names cannot hold the 0 byte that
/// ends it), so a remembered entry holds no copy of either.
fn namespaced_key(bytes: &[u8], namespace: Option<&str>) -> u128 {
    let mut hasher = crate::memo::hasher();
    hasher.update(namespace.unwrap_or("").as_bytes());
    hasher.update(&[0]);
    hasher.update(bytes);
    hasher.digest128()
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
    use crate::providers::{Endpoint, Provider, Route};

    /// What remembering a request's history keeps, per request: the cache's entry and the
    /// session's id, and no copy of the history's hash (2,000 requests, each named by
    /// `x-cachet-session`).
    #[test]
    fn a_remembered_history_keeps_no_copy_of_its_hash() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // No policy and no monitoring: no store (whose SQLite would take memory other tests
        // measure), which identifying does not need.
        let mut config = crate::config::Config::default();
        config.sessions.monitor = false;
        let pipeline = rt
            .block_on(super::Pipeline::new(
                config,
                Default::default(),
                std::sync::Arc::new(crate::metrics::Metrics::new()),
                None,
                Default::default(),
            ))
            .unwrap();
        let route = Route {
            provider: Provider::Anthropic,
            endpoint: Endpoint::Messages,
        };
        const REQUESTS: usize = 2_000;
        let requests: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let body = serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
                    "messages": [{"role": "user", "content": format!("task {i}")},
                                 {"role": "assistant", "content": "done"},
                                 {"role": "user", "content": "next"}]});
                let body = bytes::Bytes::from(body.to_string());
                let mut headers = http::HeaderMap::new();
                headers.insert("x-cachet-session", format!("s-{i:04}").parse().unwrap());
                let (env, hashes) = pipeline.read_envelope(route, body, None, None).unwrap();
                (headers, env, hashes)
            })
            .collect();
        let ((), kept) = crate::alloc_meter::kept_by(|| {
            rt.block_on(async {
                for (headers, env, hashes) in &requests {
                    pipeline.identify(headers, env, hashes, None).await;
                }
                pipeline.histories.run_pending_tasks().await;
            })
        });
        assert_eq!(pipeline.histories.entry_count(), REQUESTS as u64);
        // 273 bytes allocated, against 345 when the key was the hash in hex and the
        // namespace (64 bytes and more of key, besides the entry's share).
        let each = kept / REQUESTS;
        assert!(each < 300, "{each} bytes a remembered history");
    }

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
