//! Replay planning: which persisted patches apply to this request.
//!
//! A patch applies when the request's client history starts with the prefix it was made
//! against; the caller applies its message operations to that prefix, with the client's
//! newer messages after it. Others are stale (the client edited, compacted or forked its
//! history) and are skipped. Hook code is never rerun: only stored patches are applied.

use super::anchor::PrefixHashes;
use super::entry::ContextTransform;
use super::log::Entries;

#[derive(Debug, Default)]
pub struct ReplayPlan<'a> {
    /// Patches to apply, in log order.
    pub apply: Vec<&'a ContextTransform>,
    /// Patches whose anchor no longer matches; count as `cachet_patches_total{outcome="stale"}`.
    pub stale: Vec<&'a ContextTransform>,
}

/// Sort a session's persisted patches into those that apply to this history and stale ones.
pub fn plan_replay<'a>(log: &'a (impl Entries + ?Sized), history: &PrefixHashes) -> ReplayPlan<'a> {
    let mut plan = ReplayPlan::default();
    for transform in log.transforms() {
        if history.matches(&transform.anchor) {
            plan.apply.push(transform);
        } else {
            plan.stale.push(transform);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::ops::Op;
    use crate::session::anchor::Anchor;
    use crate::session::entry::{Entry, RequestRecord, SentMessages, ENTRY_VERSION};
    use crate::session::log::SessionLog;
    use serde_json::{json, Value};

    fn history(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| {
                json!({"role": if i % 2 == 0 { "user" } else { "assistant" },
                "content": format!("m{i}")})
            })
            .collect()
    }

    fn transform(name: &str, anchor: Anchor) -> Entry {
        Entry::ContextTransform(ContextTransform {
            version: ENTRY_VERSION,
            time: 0,
            transformer: name.into(),
            reason: "turn_end".into(),
            anchor,
            patch: vec![Op::MessagesInsert {
                at: crate::patch::Selector::End,
                messages: vec![json!({"role": "user", "content": "note"})],
                invalidate_cache_reason: Some("memory".into()),
            }],
            display: None,
            request_index: None,
        })
    }

    fn request() -> Entry {
        Entry::Request(RequestRecord {
            version: ENTRY_VERSION,
            time: 0,
            request_index: 0,
            turn_index: None,
            model: "m".into(),
            provider: "anthropic".into(),
            endpoint: "messages".into(),
            client: None,
            sent: SentMessages {
                count: 0,
                hash: String::new(),
                extends: None,
                base: 0,
                keys: vec![],
            },
            ..Default::default()
        })
    }

    #[test]
    fn matching_patches_apply_in_log_order_and_others_are_stale() {
        let log = SessionLog::from(vec![
            transform("a", Anchor::of(&history(2))),
            request(),
            transform("b", Anchor::of(&history(4))),
            transform("c", Anchor::of(&history(6))),
        ]);
        // The client dropped its last two turns and went on differently.
        let mut forked = history(4);
        forked.push(json!({"role": "user", "content": "other way"}));
        forked.push(json!({"role": "assistant", "content": "ok"}));
        let plan = plan_replay(&log, &PrefixHashes::new(&forked));
        let names: Vec<&str> = plan.apply.iter().map(|t| t.transformer.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(plan.stale.len(), 1);
        assert_eq!(plan.stale[0].transformer, "c");
    }

    #[test]
    fn compaction_leaves_every_anchored_patch_stale() {
        let log = SessionLog::from(vec![transform("a", Anchor::of(&history(2)))]);
        let compacted = vec![json!({"role": "user", "content": "summary"})];
        let plan = plan_replay(&log, &PrefixHashes::new(&compacted));
        assert!(plan.apply.is_empty());
        assert_eq!(plan.stale.len(), 1);
    }

    #[test]
    fn a_patch_anchored_at_an_empty_history_always_applies() {
        let log = SessionLog::from(vec![transform("system", Anchor::of(&[]))]);
        let plan = plan_replay(&log, &PrefixHashes::new(&history(9)));
        assert_eq!(plan.apply.len(), 1);
    }
}
