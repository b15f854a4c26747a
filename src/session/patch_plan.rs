//! Replay planning: which persisted patches apply to this request.
//!
//! A patch applies when the request's client history starts with the prefix it was made
//! against; the caller applies its message operations to that prefix, with the client's
//! newer messages after it. Others are stale (the client edited, compacted or forked its
//! history) and are skipped. Hook code is never rerun: only stored patches are applied.
//!
//! Stale patches are counted, not listed: a session that persists a patch per turn has
//! more stale ones with every compaction, and a request reads only their tally (every
//! patch of the session, less those that apply), which its loaded log keeps as it grows
//! ([`crate::session::SessionLog`]).

use std::sync::Arc;

use super::anchor::PrefixHashes;
use super::entry::{ContextTransform, PatchEvent, PatchOutcome};

#[derive(Debug, Default)]
pub struct PatchPlan<'a> {
    /// Patches to apply, in log order.
    pub apply: Vec<&'a ContextTransform>,
    /// Patches whose anchor no longer matches, tallied per transformer; count as
    /// `cachet_patches_total{outcome="stale"}`.
    pub stale: Vec<Tally>,
}

/// Sort a session's persisted patches into those that apply to this history and stale ones.
/// The plan by walking every persisted patch: what `Entries::replay_plan` does for a log
/// that keeps no index.
pub(crate) fn walk_plan<'a>(
    transforms: impl Iterator<Item = &'a ContextTransform>,
    history: &PrefixHashes,
) -> PatchPlan<'a> {
    let mut all = Tallies::default();
    let mut apply = Vec::new();
    for transform in transforms {
        all.add(transform);
        if history.matches(&transform.anchor) {
            apply.push(transform);
        }
    }
    PatchPlan {
        stale: all.without(&apply),
        apply,
    }
}

/// One transformer's persisted patches, counted: how many, and how many times each op
/// and each invalidate-cache reason occurs in them, in the order the session first
/// persisted them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub transformer: String,
    pub patches: usize,
    pub ops: Vec<(String, usize)>,
    pub reasons: Vec<(String, usize)>,
}

impl Tally {
    /// The session log's event for these patches, replayed with `outcome`.
    pub fn event(&self, outcome: PatchOutcome) -> PatchEvent {
        PatchEvent {
            transformer: self.transformer.clone(),
            reason: "replay".into(),
            outcome,
            ops: self.ops.iter().map(|(op, _)| op.clone()).collect(),
            invalidate: self.reasons.iter().map(|(r, _)| r.clone()).collect(),
            error: None,
            parts: Vec::new(),
            count: u32::try_from(self.patches).unwrap_or(u32::MAX),
        }
    }

    /// Count `transform` in (`sign` 1) or out (`sign` -1).
    fn count(&mut self, transform: &ContextTransform, sign: isize) {
        fn bump(list: &mut Vec<(String, usize)>, name: &str, sign: isize) {
            match list.iter_mut().find(|(n, _)| n == name) {
                Some((_, n)) => *n = n.saturating_add_signed(sign),
                None if sign > 0 => list.push((name.to_owned(), 1)),
                None => {}
            }
        }
        self.patches = self.patches.saturating_add_signed(sign);
        for op in &transform.patch {
            bump(&mut self.ops, op.name(), sign);
            if let Some(reason) = op.invalidate_cache_reason() {
                bump(&mut self.reasons, reason, sign);
            }
        }
    }
}

/// Every transformer's tally, in the order the session first persisted a patch of each.
/// Shared on clone: a loaded log's snapshots share it until one grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tallies(Arc<Vec<Tally>>);

impl Tallies {
    /// Count one more persisted patch.
    pub fn add(&mut self, transform: &ContextTransform) {
        let all = Arc::make_mut(&mut self.0);
        let at = match all
            .iter()
            .position(|t| t.transformer == transform.transformer)
        {
            Some(at) => at,
            None => {
                all.push(Tally {
                    transformer: transform.transformer.clone(),
                    ..Tally::default()
                });
                all.len() - 1
            }
        };
        all[at].count(transform, 1);
    }

    /// These tallies less `applied` (patches counted in them), without the transformers,
    /// ops and reasons left at zero.
    pub fn without(&self, applied: &[&ContextTransform]) -> Vec<Tally> {
        let mut out: Vec<Tally> = self.0.as_ref().clone();
        for transform in applied {
            if let Some(t) = out
                .iter_mut()
                .find(|t| t.transformer == transform.transformer)
            {
                t.count(transform, -1);
            }
        }
        out.retain(|t| t.patches > 0);
        for t in &mut out {
            t.ops.retain(|(_, n)| *n > 0);
            t.reasons.retain(|(_, n)| *n > 0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::ops::Op;
    use crate::session::anchor::Anchor;
    use crate::session::entry::fixtures::conversation;
    use crate::session::entry::{Entry, RequestRecord, SentMessages, ENTRY_VERSION};
    use crate::session::log::Entries;
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
        let plan = log.replay_plan(&PrefixHashes::new(&forked));
        let names: Vec<&str> = plan.apply.iter().map(|t| t.transformer.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(plan.stale.len(), 1);
        assert_eq!(plan.stale[0].transformer, "c");
        assert_eq!(plan.stale[0].patches, 1);
    }

    #[test]
    fn compaction_leaves_every_anchored_patch_stale() {
        let log = SessionLog::from(vec![transform("a", Anchor::of(&history(2)))]);
        let compacted = vec![json!({"role": "user", "content": "summary"})];
        let plan = log.replay_plan(&PrefixHashes::new(&compacted));
        assert!(plan.apply.is_empty());
        assert_eq!(plan.stale.len(), 1);
    }

    /// A generated patch: transformer `t`, anchored at the first `n` messages of
    /// conversation `c`, with an insert and, for `extra`, a system-part removal with a
    /// reason of its own.
    fn generated(t: usize, c: usize, n: usize, extra: bool) -> Entry {
        let Entry::ContextTransform(mut transform) =
            transform(&format!("t{t}"), Anchor::of(&conversation(c, n)))
        else {
            unreachable!()
        };
        if extra {
            transform.patch.insert(
                0,
                Op::SystemPartRemove {
                    part_name: "date".into(),
                    invalidate_cache_reason: Some(format!("reason {t}")),
                },
            );
        }
        Entry::ContextTransform(transform)
    }

    /// The plan a loaded log makes from what it keeps (patches by anchor, tallies per
    /// transformer), however it grew, is the plan of walking every patch: the same patches
    /// apply in the same order, and the stale tallies are equal. Sessions of several
    /// conversations and transformers, with requests between the patches.
    #[test]
    fn the_kept_plan_is_the_walked_plan() {
        use proptest::prelude::*;
        use proptest::test_runner::TestRunner;
        // (transformer, conversation, messages, two ops, a request instead)
        let entry = (
            0usize..3,
            0usize..3,
            0usize..10,
            any::<bool>(),
            any::<bool>(),
        );
        let mut runner = TestRunner::default();
        runner
            .run(
                &(
                    prop::collection::vec(entry, 0..40),
                    1usize..6,
                    (0usize..3, 0usize..12),
                ),
                |(items, chunk, (c, n))| {
                    let entries: Vec<Entry> = items
                        .iter()
                        .map(|&(t, conv, len, extra, req)| {
                            if req {
                                request()
                            } else {
                                generated(t, conv, len, extra)
                            }
                        })
                        .collect();
                    let history = PrefixHashes::new(&conversation(c, n));
                    let walked = walk_plan(entries.transforms(), &history);
                    prop_assert_eq!(
                        walked.apply.len() + walked.stale.iter().map(|t| t.patches).sum::<usize>(),
                        entries.transforms().count()
                    );
                    for log in SessionLog::loaded_and_grown(&entries, chunk) {
                        let kept = log.replay_plan(&history);
                        prop_assert_eq!(&kept.apply, &walked.apply);
                        prop_assert_eq!(&kept.stale, &walked.stale);
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn stale_patches_are_one_tally_per_transformer_with_their_ops_and_reasons() {
        let log = SessionLog::from(vec![
            generated(0, 0, 2, true),
            generated(0, 1, 2, false),
            generated(1, 1, 4, false),
            generated(0, 1, 3, true),
        ]);
        // Conversation 0 goes on: the first patch applies, the others are stale.
        let plan = log.replay_plan(&PrefixHashes::new(&conversation(0, 5)));
        assert_eq!(plan.apply.len(), 1);
        let t0 = &plan.stale[0];
        assert_eq!((t0.transformer.as_str(), t0.patches), ("t0", 2));
        assert_eq!(
            t0.ops,
            [
                ("system_part_remove".to_string(), 1),
                ("messages_insert".to_string(), 2)
            ]
        );
        assert_eq!(
            t0.reasons,
            [("reason 0".to_string(), 1), ("memory".to_string(), 2)]
        );
        let event = t0.event(PatchOutcome::Stale);
        assert_eq!(event.count, 2);
        assert_eq!(event.ops, ["system_part_remove", "messages_insert"]);
        assert_eq!(event.invalidate, ["reason 0", "memory"]);
        assert_eq!(plan.stale[1].transformer, "t1");
        assert_eq!(plan.stale.len(), 2);
    }

    #[test]
    fn a_patch_anchored_at_an_empty_history_always_applies() {
        let log = SessionLog::from(vec![transform("system", Anchor::of(&[]))]);
        let plan = log.replay_plan(&PrefixHashes::new(&history(9)));
        assert_eq!(plan.apply.len(), 1);
    }
}
