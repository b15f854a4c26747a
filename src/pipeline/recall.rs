//! Identify the session: the first identifier that applies (see `session::identity`);
//! without one, the session whose latest request this request's history extends, as the
//! provider's prefix cache would see it; then the session a compacted history's kept
//! messages come from; only when none does, the fingerprint of a new session. A tool or
//! system change mid-session (an MCP server connecting) is then a diagnosed break inside
//! the session, not a new session. Two conversations with one fingerprint (the same first
//! prompt in the same folder) are told apart by the message after the first: the first
//! answer, with its own tool-call ids.
//!
//! With client keys configured, every session lives in its key's namespace: the id a
//! request names (or its fingerprint) becomes `NAME:id`, and history continuation looks
//! only at the same key's sessions. One client cannot write into, or continue, another's
//! session by sending its id. Key names cannot hold `:`, so namespaces never overlap.

use std::sync::Arc;

use http::HeaderMap;

use super::Pipeline;
use crate::envelope::Envelope;
use crate::providers::cache_key::MessageKey;
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
/// How many message pairs of recent histories without a session id are remembered with
/// their session, for the request that goes on after a compaction (a summary, then the
/// messages kept): about 370 bytes each with the allocator's overhead (250 allocated, the
/// pairs of one request sharing their session's id), so about 12 MB when full. Each request
/// adds the pairs it is the first to send.
pub(super) const REMEMBERED_PAIRS: u64 = 32_768;
/// A compacted history is looked for by the pairs that start at these positions: after
/// the summary (which may be a message or two), where its kept messages begin.
const KEPT_STARTS: std::ops::RangeInclusive<usize> = 1..=3;
/// How many fingerprint sessions are remembered with the message after their first, which
/// tells a second conversation with the same first prompt apart: about 400 bytes each with
/// the allocator's overhead (275 allocated), so about 6.5 MB when full.
pub(super) const REMEMBERED_STARTS: u64 = 16_384;

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
        // Messages of this history a remembered one already had.
        let mut known = 0;
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
                    known = n;
                    break;
                }
            }
        }
        if id.source == IdSource::Fingerprint {
            if let Some(found) = self.compacted_from(hashes, namespace).await {
                id = SessionId {
                    id: found,
                    source: IdSource::Compacted,
                };
            }
        }
        if id.source == IdSource::Fingerprint {
            id.id = self.apart_from_twins(id.id, hashes).await;
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
        if id.source.is_inferred() {
            self.remember_pairs(hashes, known, &id.id, namespace).await;
        }
        id
    }

    /// The session of the conversation a compacted history goes on: a history that
    /// continues no remembered one, but whose messages after its summary (a pair of them,
    /// one of the first few) were sent in that session.
    async fn compacted_from(
        &self,
        hashes: &PrefixHashes,
        namespace: Option<&str>,
    ) -> Option<String> {
        let keys = hashes.keys();
        for at in KEPT_STARTS {
            let Some(pair) = keys.get(at..at + 2) else {
                break;
            };
            if let Some(found) = self.pairs.get(&pair_key(pair, namespace)).await {
                return Some(found.to_string());
            }
        }
        None
    }

    /// Remember the message pairs of a history without a session id with its session,
    /// from where the remembered history it continues ended (`known` messages).
    async fn remember_pairs(
        &self,
        hashes: &PrefixHashes,
        known: usize,
        session: &str,
        namespace: Option<&str>,
    ) {
        let keys = hashes.keys();
        let session: Arc<str> = Arc::from(session);
        for pair in keys[known.saturating_sub(1)..].windows(2) {
            let key = pair_key(pair, namespace);
            self.pairs.insert(key, session.clone()).await;
        }
    }

    /// A fingerprint session's id, or, for a second conversation with the same fingerprint
    /// (the same system prompt, tools and first prompt: two sessions of one agent started
    /// alike in one folder), an id of its own. The first history of two messages or more
    /// under a fingerprint claims it by its second message (the first answer, whose tool-call
    /// ids are its own); a history with another second message is another conversation,
    /// named by the fingerprint and that message. After a restart the claim is read from the
    /// session's log, so both conversations keep their ids.
    async fn apart_from_twins(&self, fingerprint: String, hashes: &PrefixHashes) -> String {
        let Some(&second) = hashes.keys().get(1) else {
            return fingerprint;
        };
        let first = hashes.anchor_at(1).map(|a| a.hash);
        let claim = async {
            let log = match &self.store {
                Some(store) => store.load(&fingerprint).await.ok(),
                None => None,
            };
            log.and_then(|log| session::lanes::second_of(&log, first.as_deref()))
                .unwrap_or(second)
        };
        let claimed = self
            .starts
            .entry(namespaced_key(fingerprint.as_bytes(), None))
            .or_insert_with(claim)
            .await
            .into_value();
        if claimed == second {
            fingerprint
        } else {
            format!("{fingerprint}-{}", &hex::encode(second)[..12])
        }
    }
}

/// A remembered answer: the session it belongs to and the `turn_index` of its request,
/// and whether that request was a warmup (whose turn is the one it prepared).
#[derive(Clone)]
pub(super) struct Answered {
    session: Arc<str>,
    turn_index: u64,
    warmup: bool,
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
    /// it continues when it is a stateful Responses request (the provider holds them), or,
    /// with its session's log, counted on from that log (a compacted history goes on from
    /// its session's turn, see [`session::lanes::turn_index`]).
    pub(super) fn turn_index(
        &self,
        env: &Envelope,
        namespace: Option<&str>,
        session: Option<(&session::SessionLog, &PrefixHashes)>,
    ) -> u64 {
        let log = session.map(|(log, _)| log);
        self.continued_turn_index(env, namespace, log)
            .unwrap_or_else(|| match session {
                Some((log, client)) => {
                    session::lanes::turn_index(log, client, &env.history_kinds())
                }
                None => env.turn_index(),
            })
    }

    /// `meta.turn_index` of an observed request counted again once its session's log is
    /// loaded, after its own answer was remembered: a stateful request's from the log alone
    /// (the remembered answer of its conversation may be its own by now; `None` when the log
    /// does not hold what it continues), any other's on from the log's lanes.
    pub(super) fn turn_index_in_log(
        &self,
        env: &Envelope,
        log: &session::SessionLog,
        client: &PrefixHashes,
    ) -> Option<u64> {
        let kinds = env.history_kinds();
        match Continued::of(env) {
            Some(continued) => Some(crate::envelope::turns::continued_turn_index(
                continued.turn_in_log(log)?,
                &kinds,
            )),
            None => Some(session::lanes::turn_index(log, client, &kinds)),
        }
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
        let (turn, warmup) = match self.answers.get(&continued.key(namespace)) {
            Some(found) => (found.turn_index, found.warmup),
            None => (continued.turn_in_log(log?)?, false),
        };
        let counted = crate::envelope::turns::continued_turn_index(turn, &env.history_kinds());
        // A warmup's turn is already the one its follower's first prompt starts.
        Some(match warmup {
            true => counted.saturating_sub(1).max(turn),
            false => counted,
        })
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
        if sent.endpoint() != crate::route::Endpoint::Responses {
            return;
        }
        let answered = Answered {
            session: Arc::from(session),
            turn_index,
            warmup: crate::providers::openai_responses::is_warmup(sent),
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
pub(super) fn namespaced_key(bytes: &[u8], namespace: Option<&str>) -> u128 {
    let mut hasher = crate::memo::hasher();
    hasher.update(namespace.unwrap_or("").as_bytes());
    hasher.update(&[0]);
    hasher.update(bytes);
    hasher.digest128()
}

/// Two consecutive messages' keys inside a client key's namespace, as the pairs are
/// remembered.
fn pair_key(pair: &[MessageKey], namespace: Option<&str>) -> u128 {
    namespaced_key(pair.concat().as_slice(), namespace)
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
    use crate::route::{Endpoint, Provider, Route};

    /// A pipeline with no policy and no monitoring, and a runtime to drive it: no store
    /// (whose SQLite would take memory these tests measure), which identifying does not need.
    fn unmonitored() -> (tokio::runtime::Runtime, super::Pipeline) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
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
        (rt, pipeline)
    }

    /// What remembering a request's history keeps, per request: the cache's entry and the
    /// session's id, and no copy of the history's hash (2,000 requests, each named by
    /// `x-cachet-session`).
    #[test]
    fn a_remembered_history_keeps_no_copy_of_its_hash() {
        let (rt, pipeline) = unmonitored();
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

    /// What a request without a session id keeps, per request, beside its remembered
    /// history: its message pairs (for a compaction) and its fingerprint's claim (for a
    /// twin conversation). 2,000 conversations of three messages each.
    #[test]
    fn an_inferred_session_keeps_its_pairs_and_claim_small() {
        let (rt, pipeline) = unmonitored();
        let route = Route {
            provider: Provider::Anthropic,
            endpoint: Endpoint::Messages,
        };
        const REQUESTS: usize = 2_000;
        let requests: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let body = serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
                    "messages": [{"role": "user", "content": format!("task {i}")},
                                 {"role": "assistant", "content": format!("done {i}")},
                                 {"role": "user", "content": "next"}]});
                let body = bytes::Bytes::from(body.to_string());
                let (env, hashes) = pipeline.read_envelope(route, body, None, None).unwrap();
                (env, hashes)
            })
            .collect();
        let headers = http::HeaderMap::new();
        let ((), kept) = crate::alloc_meter::kept_by(|| {
            rt.block_on(async {
                for (env, hashes) in &requests {
                    pipeline.identify(&headers, env, hashes, None).await;
                }
                pipeline.histories.run_pending_tasks().await;
                pipeline.pairs.run_pending_tasks().await;
                pipeline.starts.run_pending_tasks().await;
            })
        });
        assert_eq!(pipeline.starts.entry_count(), REQUESTS as u64);
        assert_eq!(pipeline.pairs.entry_count(), 2 * REQUESTS as u64);
        // About 1,460 bytes allocated: a history (273), two pairs sharing their session's id
        // (about 540) and a fingerprint's claim (about 275), beside the sessions' ids.
        let each = kept / REQUESTS;
        assert!(each < 2_000, "{each} bytes a request without a session id");
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
