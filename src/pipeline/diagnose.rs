//! The prefix-break diagnosis of a request against the previous request of its lane,
//! with what the session log and its store keep of that request.

use super::Pipeline;
use crate::envelope::Envelope;
use crate::measure::PromptShape;
use crate::session;

/// The request being diagnosed: its shape, the envelope it went out as, its usage and when
/// its answer ended.
pub(super) type Current<'a> = (&'a PromptShape, &'a Envelope, crate::usage::Usage, u64);

impl Pipeline {
    /// The diagnosis of a request, answered with `usage` at `now_ms`, against the previous
    /// request of its lane.
    pub(super) async fn diagnose(
        &self,
        store: &dyn session::SessionStore,
        session: &str,
        log: &session::SessionLog,
        prev: &session::RequestRecord,
        (shape, sent, usage, now_ms): Current<'_>,
    ) -> Option<crate::measure::Diagnosis> {
        let prev_shape = previous_shape(store, session, log, prev, shape).await;
        let min_tokens = crate::measure::breaks::min_tokens(&shape.model);
        let previous = crate::measure::Previous {
            shape: &prev_shape,
            usage: prev.usage.unwrap_or_default(),
            time_ms: prev.time,
        };
        let current = crate::measure::breaks::Current {
            shape,
            usage,
            time_ms: now_ms,
            min_tokens,
            thinking_stripped_from: crate::measure::breaks::thinking_stripped_from(sent),
            retention: crate::measure::breaks::retention(sent),
        };
        if crate::measure::breaks::may_count_tokens(&current) && !crate::tokens::is_warm() {
            // The vocabulary loads off the runtime's threads.
            let _ = tokio::task::spawn_blocking(crate::tokens::warm).await;
        }
        let tokens_through =
            |block| crate::measure::prompt::tokens_through(sent, block, min_tokens);
        let mut diagnosis = crate::measure::diagnose(&previous, &current, &tokens_through)?;
        // An edited message is read from the store, to tell what kind of edit it is.
        if diagnosis.reason == crate::measure::BreakReason::MessageEdited {
            let at = diagnosis.message_index.unwrap_or(0);
            if let (Some(key), Some(now)) =
                (prev_shape.messages.get(at), sent.history_raw().nth(at))
            {
                if let Ok(found) = store.get_blobs(session, std::slice::from_ref(key)).await {
                    if let Some(Some(before)) = found.first() {
                        let edit = (&before[..], now);
                        if let Some(again) =
                            diagnosis.as_appended(&previous, &current, &tokens_through, edit)
                        {
                            return again;
                        }
                        diagnosis.refine_thinking(before, now);
                    }
                }
            }
        }
        Some(diagnosis)
    }
}

impl Pipeline {
    /// Who can fix the break `d` of a request against `prev`: a client's-looking break is
    /// handed to the policy whose patch made it (see [`crate::measure::blame::attribute`]),
    /// from the request's patches and its policies (`shaping`, when it was shaped), the
    /// previous request's patches, and whether the client's own `history` extends the
    /// previous request's.
    pub(super) fn blame(
        &self,
        d: &mut crate::measure::Diagnosis,
        prev: &session::RequestRecord,
        shaping: Option<&super::Shaping>,
        history: &session::PrefixHashes,
    ) {
        use crate::policy::BreakpointMode;
        let now = shaping.map_or(&[][..], |s| &s.patches[..]);
        let patches: Vec<_> = (prev.patches.iter().filter_map(|p| p.patched(true)))
            .chain(now.iter().filter_map(|p| p.patched(false)))
            .collect();
        let markers_by = shaping.and_then(|s| {
            self.policies
                .iter()
                .filter(|p| s.policy_names.contains(&p.name))
                .find(|p| {
                    p.breakpoints
                        .is_some_and(|b| b.mode == BreakpointMode::Auto)
                })
                .map(|p| p.name.as_str())
        });
        let facts = crate::measure::blame::Facts {
            patches: &patches,
            client_extends: Some(history.matches(&prev.conversation.history)),
            markers_by,
        };
        crate::measure::blame::attribute(d, &facts);
    }
}

/// The previous request's shape, rebuilt from its log entry (the tool and system lists are
/// read from the store only when they differ from this request's).
async fn previous_shape(
    store: &dyn session::SessionStore,
    session: &str,
    log: &session::SessionLog,
    prev: &session::RequestRecord,
    current: &PromptShape,
) -> PromptShape {
    let decode = |k: &Option<String>| k.as_deref().and_then(session::entry::decode_key);
    let tools_key = decode(&prev.tools_key);
    let system_key = decode(&prev.system_key);
    let list = |key: Option<session::MessageKey>, same: bool, mine: &Vec<crate::measure::Named>| {
        let mine = mine.clone();
        async move {
            if same {
                return mine;
            }
            let Some(key) = key else { return Vec::new() };
            match store.get_blobs(session, &[key]).await {
                Ok(found) => found
                    .into_iter()
                    .flatten()
                    .next()
                    .and_then(|b| session::record::named_list(&b))
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            }
        }
    };
    let tools = list(tools_key, tools_key == current.tools_key, &current.tools).await;
    let system = list(
        system_key,
        system_key == current.system_key,
        &current.system,
    )
    .await;
    PromptShape {
        endpoint: current.endpoint,
        model: prev.model.clone(),
        tools,
        tools_key,
        system,
        system_key,
        messages: log.sent_keys(prev.request_index).unwrap_or_default(),
        tail: prev.tail.clone(),
        marks: prev.marks.clone(),
        compacted_at: None,
    }
}
