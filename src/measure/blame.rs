//! Who can fix a prefix break: the diagnosis' `blame`. A break is the **client**'s when
//! something in the request the client controls changed (its model, tools, system prompt or
//! history, its markers, its speed); a **policy**'s when a patch of a named policy or hook
//! made the difference (the patch's transformer and op are named); the **provider**'s only
//! for a behaviour the provider documents (a cache lifetime running out, earlier thinking
//! dropped at a new turn, OpenAI's overflow to other machines, the lookback of 20 blocks,
//! context editing the request asked for); **unknown** otherwise. The provider is never
//! blamed on a guess: what the session's own history cannot explain stays `unknown`.
//!
//! [`Blame::of_reason`] gives a diagnosis the blame its reason implies; [`attribute`] then
//! hands a client's-looking break to the policy whose patch made it, from the patches of
//! the request and of the previous request of its lane.

use serde::{Deserialize, Serialize};

use super::breaks::{BreakReason, Diagnosis};
use crate::route::Section;

/// Whose doing a break is. A bounded vocabulary: a label of `cachet_prefix_breaks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Who {
    Client,
    Policy,
    Provider,
    Unknown,
}

impl Who {
    pub const ALL: [Who; 4] = [Who::Client, Who::Policy, Who::Provider, Who::Unknown];

    pub fn label(self) -> &'static str {
        match self {
            Who::Client => "client",
            Who::Policy => "policy",
            Who::Provider => "provider",
            Who::Unknown => "unknown",
        }
    }
}

/// A diagnosis' blame, as the session log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blame {
    pub who: Who,
    /// What is at fault, in a few words: for the client what it changed (`system part
    /// `base``, `model a to b`), for a policy what its patch did, for the provider the
    /// documented behaviour (`cache lifetime`).
    pub what: String,
    /// A policy's: the transformer (policy or hook) whose patch made the difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformer: Option<String>,
    /// A policy's: the patch op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

impl Blame {
    fn new(who: Who, what: impl Into<String>) -> Blame {
        Blame {
            who,
            what: what.into(),
            transformer: None,
            op: None,
        }
    }

    /// The blame a diagnosis' reason implies, before patches are looked at.
    pub fn of_reason(d: &Diagnosis) -> Blame {
        let client = |what: String| Blame::new(Who::Client, what);
        let provider = |what: &str| Blame::new(Who::Provider, what);
        let named = |thing: &str, name: &Option<String>| match name {
            Some(n) => format!("{thing} `{n}`"),
            None => format!("{thing}s"),
        };
        match d.reason {
            BreakReason::ModelChanged => client(d.detail.replace("model changed from", "model")),
            BreakReason::SpeedChanged => client("speed".into()),
            BreakReason::ToolsChanged => client(named("tool", &d.tool)),
            BreakReason::SystemChanged => client(named("system part", &d.part)),
            BreakReason::MessageEdited => client(match d.message_index {
                Some(i) => format!("message {i}"),
                None => "a history message".into(),
            }),
            BreakReason::HistoryTruncated => client(d.detail.clone()),
            BreakReason::BelowMinimum => client("cache markers below the model's minimum".into()),
            BreakReason::TtlExpired => provider("cache lifetime"),
            BreakReason::OutsideLookback => provider("lookback of 20 blocks"),
            BreakReason::ThinkingDropped => provider("earlier thinking dropped at a new turn"),
            BreakReason::RateOverflow => provider("overflow to other machines"),
            BreakReason::ContextEdited => provider("context editing the request asked for"),
            BreakReason::Unexplained => Blame::new(Who::Unknown, "not explained"),
        }
    }

    fn policy(patch: &Patched<'_>, op: &str, what: String) -> Blame {
        Blame {
            who: Who::Policy,
            what,
            transformer: Some(patch.transformer.to_owned()),
            op: Some(op.to_owned()),
        }
    }
}

impl Diagnosis {
    /// Its blame: the one written with it, or, for a diagnosis written before blames
    /// were, the one its reason implies (`unknown` where the reason alone cannot tell).
    pub fn blame(&self) -> Blame {
        self.blame.clone().unwrap_or_else(|| match self.reason {
            BreakReason::ThinkingDropped => Blame::new(Who::Unknown, "thinking dropped"),
            _ => Blame::of_reason(self),
        })
    }
}

/// One applied patch, as [`attribute`] reads it (a session log's patch event).
#[derive(Debug, Clone, Copy)]
pub struct Patched<'a> {
    pub transformer: &'a str,
    /// The op names, in order.
    pub ops: &'a [String],
    /// The system parts its ops set or remove, when known.
    pub parts: &'a [String],
    /// Made for the previous request of the lane, not this one.
    pub previous: bool,
}

/// What [`attribute`] knows of the request besides its diagnosis.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts<'a> {
    /// The applied patches of this request and of the previous request of its lane.
    pub patches: &'a [Patched<'a>],
    /// Whether the client's own history (before any patch) extends the previous
    /// request's: then a history that stopped extending was not the client's doing.
    pub client_extends: Option<bool>,
    /// The policy that placed this request's cache markers, if one did.
    pub markers_by: Option<&'a str>,
}

/// Whether part `name` is the client's own (`base`, `base.1`, ...), not one a patch added.
fn is_client_part(name: &str) -> bool {
    name == "base"
        || name
            .strip_prefix("base.")
            .is_some_and(|n| n.parse::<u32>().is_ok())
}

/// The first op of `patch` on `section`, if any.
fn op_on<'a>(patch: &Patched<'a>, section: Section) -> Option<&'a str> {
    (patch.ops.iter())
        .find(|op| crate::patch::ops::op_section(op) == Some(section))
        .map(String::as_str)
}

/// Hand a break that looks like the client's to the policy whose patch made it:
/// - a history that stopped extending although the client's own history extends: the
///   patch that inserted or replaced history messages (in this request or the previous
///   one: an ephemeral insertion that is gone); `unknown` when no patch did;
/// - a changed system part a patch added (not the client's `base`, `base.1`, ...), or a
///   client's part a patch changed in only one of the two requests: that patch;
/// - tools a patch changed in only one of the two requests: that patch;
/// - markers below the minimum that a policy placed: that policy.
pub fn attribute(d: &mut Diagnosis, facts: &Facts<'_>) {
    let blame = d.blame.clone().unwrap_or_else(|| Blame::of_reason(d));
    d.blame = Some(match blame.who {
        Who::Client => by_patch(d, facts).unwrap_or(blame),
        _ => blame,
    });
}

/// The patches on `section`, each with its first op there.
fn on<'a>(patches: &'a [Patched<'a>], section: Section) -> Vec<(&'a Patched<'a>, &'a str)> {
    (patches.iter())
        .filter_map(|p| op_on(p, section).map(|op| (p, op)))
        .collect()
}

/// A patch on `section` (touching system part `part`, when given) made for only one of
/// the two requests: what it did then differs between them. The current request's first.
fn one_sided<'a>(
    patches: &'a [Patched<'a>],
    section: Section,
    part: Option<&str>,
) -> Option<(&'a Patched<'a>, &'a str)> {
    let touches = |p: &Patched<'_>| part.is_none_or(|t| p.parts.iter().any(|x| x == t));
    let made = |previous: bool| -> Vec<(&'a Patched<'a>, &'a str)> {
        (on(patches, section).into_iter())
            .filter(|(p, _)| p.previous == previous && touches(p))
            .collect()
    };
    let (before, now) = (made(true), made(false));
    let only_in = |a: &[(&'a Patched<'a>, &'a str)], b: &[(&'a Patched<'a>, &'a str)]| {
        let same = |x: &(&Patched<'_>, &str), y: &(&Patched<'_>, &str)| {
            x.0.transformer == y.0.transformer && x.1 == y.1
        };
        a.iter().find(|x| !b.iter().any(|y| same(x, y))).copied()
    };
    only_in(&now, &before).or_else(|| only_in(&before, &now))
}

/// The policy's blame for a client's-looking break `d`, when a patch made it.
fn by_patch(d: &Diagnosis, facts: &Facts<'_>) -> Option<Blame> {
    let patches = facts.patches;
    match d.reason {
        BreakReason::MessageEdited | BreakReason::HistoryTruncated
            if facts.client_extends == Some(true) =>
        {
            // Prefer the previous request's patch: a message it inserted is gone.
            let mut found = on(patches, Section::Messages);
            found.sort_by_key(|(p, _)| !p.previous);
            Some(match found.first() {
                Some((p, op)) => {
                    let what = match d.message_index {
                        Some(i) => format!("history changed by its patch from message {i}"),
                        None => "history changed by its patch".into(),
                    };
                    Blame::policy(p, op, what)
                }
                None => Blame::new(
                    Who::Unknown,
                    "the client's history extends the previous one, but what was sent does not",
                ),
            })
        }
        BreakReason::SystemChanged => {
            let part = d.part.as_deref();
            let system = on(patches, Section::System);
            let added = part.filter(|p| !is_client_part(p)).and_then(|p| {
                (system
                    .iter()
                    .find(|(patch, _)| patch.parts.iter().any(|x| x == p)))
                .or(system.first())
                .copied()
            });
            let (p, op) = added.or_else(|| one_sided(patches, Section::System, part))?;
            let what = format!("system part `{}`", part.unwrap_or("?"));
            Some(Blame::policy(p, op, what))
        }
        BreakReason::ToolsChanged => {
            let (p, op) = one_sided(patches, Section::Tools, None)?;
            let what = match &d.tool {
                Some(tool) => format!("tool `{tool}`"),
                None => "tools".into(),
            };
            Some(Blame::policy(p, op, what))
        }
        BreakReason::BelowMinimum => facts.markers_by.map(|policy| Blame {
            who: Who::Policy,
            what: "cache markers it placed below the model's minimum".into(),
            transformer: Some(policy.to_owned()),
            op: Some("breakpoints".into()),
        }),
        _ => None,
    }
}

/// One sentence on what the user could do about a break that is theirs (the client's, or
/// a policy's they run); `None` for the provider's and unknown ones.
pub fn advice(d: &Diagnosis) -> Option<String> {
    let blame = d.blame();
    match blame.who {
        Who::Policy => Some(policy_advice(&blame)),
        Who::Client => Some(client_advice(d, &blame)),
        Who::Provider | Who::Unknown => None,
    }
}

fn policy_advice(blame: &Blame) -> String {
    let name = blame.transformer.as_deref().unwrap_or("a policy");
    match blame.op.as_deref() {
        Some("messages_insert" | "messages_cached_replace") => format!(
            "`{name}` changed the history the provider had cached: insert such content where it stays (the `pinned` injection mode) or in the uncached tail."
        ),
        Some("system_part_set" | "system_part_remove" | "system_parts_replace") => format!(
            "`{name}` changed the system prompt: keep its text fixed within a session, or put content that changes in the uncached tail (the `tail` or `pinned` injection modes)."
        ),
        Some("tools_replace" | "tools_remove") => format!(
            "`{name}` changed the tool definitions: apply the same tool patch to every request of the session."
        ),
        Some("breakpoints") => format!(
            "`{name}` placed the markers: the prompt there is below the model's minimum, so mark a later block."
        ),
        _ => format!("`{name}` changed the cached prefix: check what its patch does between requests."),
    }
}

fn client_advice(d: &Diagnosis, blame: &Blame) -> String {
    match d.reason {
        BreakReason::SystemChanged => format!(
            "The client changed its {}: if that is a date, time or git status line, the `stabilize-volatile` policy moves such lines out of the cached prefix.",
            blame.what
        ),
        BreakReason::ToolsChanged => format!(
            "The client changed {}: keep the tool list and its order fixed within a session (connect tool servers before the first request).",
            blame.what
        ),
        BreakReason::ModelChanged => "The client switched models, and each model caches apart: switch at the start of a task rather than in the middle of one.".into(),
        BreakReason::SpeedChanged => "The request ran at another speed than the previous one, and each speed caches apart: keep one speed within a session.".into(),
        BreakReason::MessageEdited => format!(
            "The client rewrote {} of its history: the cache is read only up to the first changed message, so send earlier messages back unchanged.",
            blame.what
        ),
        BreakReason::HistoryTruncated => "The client shortened its history (a rewind or a compaction): expected after one, and the requests after it read the new prefix again.".into(),
        BreakReason::ThinkingDropped => "The client left out thinking blocks of an earlier message: send earlier turns back as they were answered.".into(),
        BreakReason::BelowMinimum => "The client's cache markers sit where the prompt is below the model's minimum: mark a later block (the `anthropic-auto-breakpoints` policy places markers where they count).".into(),
        _ => format!("The client changed {}.", blame.what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::breaks::SectionName;

    fn break_of(section: SectionName, reason: BreakReason) -> Diagnosis {
        Diagnosis {
            section,
            reason,
            part: None,
            tool: None,
            message_index: None,
            expected_read: None,
            read: 0,
            detail: String::new(),
            blame: None,
        }
    }

    fn system(part: &str) -> Diagnosis {
        let mut d = break_of(SectionName::System, BreakReason::SystemChanged);
        d.part = Some(part.into());
        d
    }

    fn patch<'a>(
        name: &'a str,
        ops: &'a [String],
        parts: &'a [String],
        previous: bool,
    ) -> Patched<'a> {
        Patched {
            transformer: name,
            ops,
            parts,
            previous,
        }
    }

    #[test]
    fn each_reason_has_the_blame_it_implies() {
        let who = |reason| Blame::of_reason(&break_of(SectionName::Messages, reason)).who;
        assert_eq!(who(BreakReason::ModelChanged), Who::Client);
        assert_eq!(who(BreakReason::ToolsChanged), Who::Client);
        assert_eq!(who(BreakReason::MessageEdited), Who::Client);
        assert_eq!(who(BreakReason::TtlExpired), Who::Provider);
        assert_eq!(who(BreakReason::OutsideLookback), Who::Provider);
        assert_eq!(who(BreakReason::RateOverflow), Who::Provider);
        assert_eq!(who(BreakReason::Unexplained), Who::Unknown);
        // A log written before blames were: dropped thinking may be the client's or the
        // provider's, and the reason alone cannot tell.
        let old = break_of(SectionName::Messages, BreakReason::ThinkingDropped);
        assert_eq!(old.blame().who, Who::Unknown);
        assert_eq!(system("base").blame().what, "system part `base`");
    }

    #[test]
    fn a_system_part_a_patch_added_is_the_policys() {
        let ops = ["system_part_set".to_string()];
        let parts = ["memory".to_string()];
        let patches = [
            patch("memory", &ops, &parts, true),
            patch("memory", &ops, &parts, false),
        ];
        let facts = Facts {
            patches: &patches,
            ..Default::default()
        };
        let mut d = system("memory");
        attribute(&mut d, &facts);
        let blame = d.blame();
        assert_eq!(blame.who, Who::Policy);
        assert_eq!(blame.transformer.as_deref(), Some("memory"));
        assert_eq!(blame.op.as_deref(), Some("system_part_set"));
        assert!(advice(&d)
            .unwrap()
            .contains("`memory` changed the system prompt"));
        // The client's own part, patched alike in both requests: the client changed it.
        let mut d = system("base");
        attribute(&mut d, &facts);
        assert_eq!(d.blame().who, Who::Client);
        assert!(advice(&d).unwrap().contains("stabilize-volatile"));
    }

    #[test]
    fn a_client_part_patched_in_one_request_only_is_the_policys() {
        let ops = ["system_part_set".to_string()];
        let parts = ["base".to_string()];
        let patches = [patch("clock", &ops, &parts, false)];
        let mut d = system("base");
        let facts = Facts {
            patches: &patches,
            ..Default::default()
        };
        attribute(&mut d, &facts);
        assert_eq!(d.blame().who, Who::Policy);
        assert_eq!(d.blame().transformer.as_deref(), Some("clock"));
    }

    #[test]
    fn history_that_stopped_extending_while_the_clients_does_is_not_the_clients() {
        let ops = ["messages_insert".to_string()];
        let patches = [patch("recall", &ops, &[], true)];
        let mut d = break_of(SectionName::Messages, BreakReason::MessageEdited);
        d.message_index = Some(3);
        let mut facts = Facts {
            patches: &patches,
            client_extends: Some(true),
            markers_by: None,
        };
        let mut by_policy = d.clone();
        attribute(&mut by_policy, &facts);
        assert_eq!(by_policy.blame().who, Who::Policy);
        assert_eq!(by_policy.blame().op.as_deref(), Some("messages_insert"));
        // No patch could have done it: nobody is blamed on a guess.
        facts.patches = &[];
        let mut unknown = d.clone();
        attribute(&mut unknown, &facts);
        assert_eq!(unknown.blame().who, Who::Unknown);
        assert_eq!(advice(&unknown), None);
        // The client's own history changed: the client's.
        facts.client_extends = Some(false);
        attribute(&mut d, &facts);
        assert_eq!(d.blame().who, Who::Client);
    }

    #[test]
    fn the_providers_documented_behaviours_are_never_handed_to_a_policy() {
        let ops = ["system_part_set".to_string()];
        let patches = [patch("memory", &ops, &[], false)];
        let facts = Facts {
            patches: &patches,
            client_extends: Some(true),
            markers_by: Some("auto"),
        };
        let mut d = break_of(SectionName::Messages, BreakReason::TtlExpired);
        attribute(&mut d, &facts);
        assert_eq!(d.blame().who, Who::Provider);
        assert_eq!(advice(&d), None);
        let mut low = break_of(SectionName::Messages, BreakReason::BelowMinimum);
        attribute(&mut low, &facts);
        assert_eq!(low.blame().transformer.as_deref(), Some("auto"));
    }
}
