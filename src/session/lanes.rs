//! Lanes: the conversations inside one session. Claude Code sends its title, summary and
//! subagent requests under the main loop's session id, each with other tools, another
//! system prompt and a history of its own; comparing them with the main loop would report
//! a break at every switch. Lanes follow the client's own history (before any patch), so
//! that what a policy inserts or drops never moves a request to another lane. A request
//! joins:
//!
//! 1. the most recently active lane of the same tools-and-system shape whose history
//!    starts with the same message;
//! 2. failing that, the lane whose latest request's whole history it starts with (the
//!    longest such history, when several are): the same conversation with changed tools
//!    or system prompt, which the diagnosis then reports as a break. A request that only
//!    repeats the lane's history is a side request on those messages (a title, a
//!    classifier) when it comes on another model without the lane's tools, or with other
//!    tools and another system prompt;
//! 3. failing that, the most recently active lane with the same tools whose history this
//!    one repeats from its second message on: the conversation with its first message
//!    rewritten (Claude Code names the model in it, so a model switch rewrites it), which
//!    the diagnosis reports;
//! 4. failing that, a new lane: a new subagent, or a compacted history that shares no
//!    message with the conversation it replaces.

use super::anchor::PrefixHashes;
use super::entry::decode_key;
use super::entry::{Conversation, RequestRecord};
use super::log::Entries;
use crate::envelope::{turns, MsgKind};
use crate::measure::PromptShape;
use crate::providers::cache_key::MessageKey;

/// The latest request of a lane, as lane assignment sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneHead {
    pub lane: u32,
    pub model: String,
    pub tools_key: Option<MessageKey>,
    pub system_key: Option<MessageKey>,
    pub conversation: Conversation,
}

impl LaneHead {
    pub fn of(lane: u32, shape: &PromptShape, conversation: Conversation) -> Self {
        LaneHead {
            lane,
            model: shape.model.clone(),
            tools_key: shape.tools_key,
            system_key: shape.system_key,
            conversation,
        }
    }
}

/// The lane of a request with `shape` and client history `client`, given the latest
/// request of every lane so far, most recently active first.
pub fn assign(heads: &[LaneHead], shape: &PromptShape, client: &PrefixHashes) -> u32 {
    let first = client.anchor_at(1).map(|a| a.hash);
    let same_shape = heads.iter().find(|h| {
        h.tools_key == shape.tools_key
            && h.system_key == shape.system_key
            && h.conversation.first == first
    });
    // The lane whose history it repeats most of: a shorter one it also starts with (a
    // side request on the first prompt) is not where it goes on. Ties go to the most
    // recently active.
    let continued = || {
        heads
            .iter()
            .filter(|h| {
                let count = h.conversation.history.count;
                count >= 1
                    && client.len() >= count
                    && (client.len() > count || !is_side_request(h, shape))
                    && client.matches(&h.conversation.history)
            })
            .rev()
            .max_by_key(|h| h.conversation.history.count)
    };
    let rewritten_first = || {
        heads.iter().find(|h| {
            h.tools_key.is_some()
                && h.tools_key == shape.tools_key
                && h.conversation.rewritten_first(client)
        })
    };
    match same_shape.or_else(continued).or_else(rewritten_first) {
        Some(h) => h.lane,
        None => heads.iter().map(|h| h.lane + 1).max().unwrap_or(0),
    }
}

/// Whether a request that repeats `head`'s history, adding nothing (the conversation going
/// on would have added the answer), is a side request on the same messages: a title or
/// classifier request, on another model without the lane's tools, or with other tools
/// and another system prompt. A retry on a fallback model (same tools), or the same
/// messages sent again with a changed system prompt or changed tools, is the conversation.
fn is_side_request(head: &LaneHead, shape: &PromptShape) -> bool {
    let same_tools = shape.tools_key.is_some() && shape.tools_key == head.tools_key;
    (head.model != shape.model && !same_tools)
        || (head.tools_key != shape.tools_key && head.system_key != shape.system_key)
}

/// The latest request of every lane in a session's log, most recently active first.
pub fn heads_of(log: &(impl Entries + ?Sized)) -> Vec<LaneHead> {
    log.lane_heads()
        .into_iter()
        .map(|r| LaneHead {
            lane: r.lane,
            model: r.model.clone(),
            tools_key: r.tools_key.as_deref().and_then(decode_key),
            system_key: r.system_key.as_deref().and_then(decode_key),
            conversation: r.conversation.clone(),
        })
        .collect()
}

/// `meta.turn_index` of a request on its session: the turns its client history carries
/// (see [`crate::envelope::turns`]), counted on from the session's log, so that a
/// conversation whose history was compacted goes on from the turn it had reached instead
/// of starting again at 0.
///
/// - A history that continues an earlier request's goes on from that request's turn.
/// - One that continues none and is shorter than a lane's history (a compacted history,
///   whose summary stands for the turns it replaced; a subagent's, inside the current
///   turn) goes on from the session's latest turn, a turn more for each prompt after its
///   first that the session has not sent before: a compaction keeps its latest turns as
///   they were, and their prompts were counted when they were sent.
/// - Otherwise (the session's first request, a history edited in place) its own count.
pub fn turn_index(log: &(impl Entries + ?Sized), client: &PrefixHashes, kinds: &[MsgKind]) -> u64 {
    let own = turns::turn_index(kinds);
    if let Some(continued) = log.latest_continued(client) {
        if let Some(turn) = continued.turn_index {
            let before = turns::turn_index(&kinds[..continued.history_count.min(kinds.len())]);
            return turn + own.saturating_sub(before);
        }
    }
    let heads = log.lane_heads();
    let longest = heads.iter().map(|r| r.conversation.history.count).max();
    let latest = heads.iter().filter_map(|r| r.turn_index).max();
    match (latest, longest) {
        (Some(latest), Some(longest)) if client.len() < longest => {
            latest + new_prompts(log, client, kinds)
        }
        _ => own,
    }
}

/// The prompts of a history after its first that no request of the session sent.
fn new_prompts(log: &(impl Entries + ?Sized), client: &PrefixHashes, kinds: &[MsgKind]) -> u64 {
    let keys = client.keys();
    let later: Vec<&MessageKey> = turns::prompt_starts(kinds)
        .into_iter()
        .skip(1)
        .filter_map(|i| keys.get(i))
        .collect();
    if later.is_empty() {
        return 0;
    }
    let sent: std::collections::HashSet<&MessageKey> = log
        .entries()
        .filter_map(|e| match e {
            super::entry::Entry::Request(r) => Some(r.sent.keys.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    later.into_iter().filter(|k| !sent.contains(k)).count() as u64
}

/// The key of the second message of the most recently active lane whose history starts
/// with the message `first` (its one-message anchor hash) and holds two messages or more:
/// which conversation a fingerprint session holds.
pub fn second_of(log: &(impl Entries + ?Sized), first: Option<&str>) -> Option<MessageKey> {
    log.lane_heads()
        .into_iter()
        .filter(|r| r.conversation.history.count >= 2 && r.conversation.first.as_deref() == first)
        .find_map(|r| r.conversation.second.as_deref().and_then(decode_key))
}

/// The lane a stateful Responses request goes on (`previous_response_id`): the lane whose
/// latest answer it names. Its history is only its new input (the provider holds the rest),
/// so no comparison of histories would find it.
pub fn continued_by_answer(log: &(impl Entries + ?Sized), answer: &str) -> Option<u32> {
    continued_request(log, answer).map(|r| r.lane)
}

/// The request whose answer `answer` is, when it heads its lane: what a stateful Responses
/// request naming it goes on.
pub fn continued_request<'a>(
    log: &'a (impl Entries + ?Sized),
    answer: &str,
) -> Option<&'a RequestRecord> {
    log.lane_heads()
        .into_iter()
        .find(|r| r.response_id.as_deref() == Some(answer))
}

/// The lane a request on a conversation of the Conversations API goes on: the lane of the
/// conversation's latest request (`conversation_id`), when the session has one. Its history
/// is only its new input (the provider holds the conversation), so no comparison of
/// histories would find it.
pub fn continued_in_conversation(log: &(impl Entries + ?Sized), conversation: &str) -> Option<u32> {
    latest_in_conversation(log, conversation, |_| true).map(|r| r.lane)
}

/// The latest answered request of a Conversations API conversation: its turn is where a
/// new request's turns are counted from.
pub fn conversation_answered<'a>(
    log: &'a (impl Entries + ?Sized),
    conversation: &str,
) -> Option<&'a RequestRecord> {
    latest_in_conversation(log, conversation, |r| r.usage.is_some())
}

fn latest_in_conversation<'a>(
    log: &'a (impl Entries + ?Sized),
    conversation: &str,
    wanted: impl Fn(&RequestRecord) -> bool,
) -> Option<&'a RequestRecord> {
    log.entries().rev().find_map(|e| match e {
        crate::session::Entry::Request(r)
            if r.conversation_id.as_deref() == Some(conversation) && wanted(r) =>
        {
            Some(r)
        }
        _ => None,
    })
}

/// The lane most recently active (0 in a session without one): where a warmup, which
/// prepares the next turn, is shown.
pub fn latest_lane(log: &(impl Entries + ?Sized)) -> u32 {
    log.lane_heads().first().map_or(0, |r| r.lane)
}

/// The turn a warmup prepares: the one after the session's latest (0 before any).
pub fn next_turn(log: &(impl Entries + ?Sized)) -> u64 {
    let latest = log.lane_heads().iter().filter_map(|r| r.turn_index).max();
    latest.map_or(0, |turn| turn + 1)
}

/// Whether the latest request of `lane` is a warmup on `model` that reported the switch
/// to it: the request it prepared is not diagnosed for that switch again.
pub fn warmed_on(log: &(impl Entries + ?Sized), lane: u32, model: &str) -> bool {
    let latest = log.entries().rev().find_map(|e| match e {
        super::entry::Entry::Request(r) if r.lane == lane => Some(r),
        _ => None,
    });
    latest.is_some_and(|r| {
        r.warmup
            && r.model == model
            && r.diagnosis
                .as_ref()
                .is_some_and(|d| d.reason == crate::measure::BreakReason::ModelChanged)
    })
}

/// The latest request of `lane` that got an answer: what a diagnosis compares with.
pub fn previous_answered(log: &(impl Entries + ?Sized), lane: u32) -> Option<&RequestRecord> {
    log.previous_answered(lane)
}

/// The latest answered request of `lane` sent before a request that went upstream at
/// `sent_ms`: what a diagnosis compares it with. The log is in the order answers ended, so
/// a request of the lane sent after it but answered first comes before it (two sessions
/// started alike send the same first request at once); what that one wrote was not there
/// for it to read.
pub fn previous_answered_before(
    log: &(impl Entries + ?Sized),
    lane: u32,
    sent_ms: Option<u64>,
) -> Option<&RequestRecord> {
    let latest = log.previous_answered(lane)?;
    let sent_before = |r: &RequestRecord| match (r.sent_ms, sent_ms) {
        (Some(theirs), Some(mine)) => theirs <= mine,
        _ => true,
    };
    if sent_before(latest) {
        return Some(latest);
    }
    log.entries().rev().find_map(|e| match e {
        super::entry::Entry::Request(r)
            if r.lane == lane && r.usage.is_some() && r.in_conversation() && sent_before(r) =>
        {
            Some(r)
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn history(texts: &[&str]) -> PrefixHashes {
        let messages: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": t})
            })
            .collect();
        PrefixHashes::new(&messages)
    }

    fn shape(tools: u8, system: u8) -> PromptShape {
        PromptShape {
            endpoint: crate::route::Endpoint::Messages,
            model: "m".into(),
            tools: Vec::new(),
            tools_key: Some([tools; 32]),
            system: Vec::new(),
            system_key: Some([system; 32]),
            messages: Vec::new(),
            tail: Vec::new(),
            marks: Vec::new(),
            compacted_at: None,
        }
    }

    fn head(lane: u32, tools: u8, system: u8, texts: &[&str]) -> LaneHead {
        LaneHead::of(
            lane,
            &shape(tools, system),
            Conversation::of(&history(texts)),
        )
    }

    #[test]
    fn side_requests_and_subagents_get_their_own_lanes() {
        let main = head(0, 1, 1, &["fix it", "reading", "ok"]);
        // The main loop goes on.
        let next = history(&["fix it", "reading", "ok", "done"]);
        assert_eq!(assign(std::slice::from_ref(&main), &shape(1, 1), &next), 0);
        // A title request: other tools, other system prompt, its own message.
        assert_eq!(
            assign(
                std::slice::from_ref(&main),
                &shape(2, 2),
                &history(&["title?"])
            ),
            1
        );
        let title = head(1, 2, 2, &["title?"]);
        // A subagent, then a second one of the same kind with another task.
        let heads = [head(2, 3, 3, &["search a"]), main.clone(), title];
        assert_eq!(
            assign(&heads, &shape(3, 3), &history(&["search a", "x"])),
            2
        );
        assert_eq!(assign(&heads, &shape(3, 3), &history(&["search b"])), 3);
        // The main loop with a tool added (an MCP server connected): same lane, so the
        // change is diagnosed.
        assert_eq!(assign(&heads, &shape(9, 1), &next), 0);
        // An edit inside the main loop stays in it.
        assert_eq!(assign(&heads, &shape(1, 1), &history(&["fix it", "no"])), 0);
    }

    /// A title or classifier request sent on the user's first prompt, as it stands, with
    /// no tools and its own system prompt: its history equals the main loop's at that
    /// moment. Whichever of the two arrives first, the other gets a lane of its own, and
    /// the main loop's next request joins the main lane.
    #[test]
    fn a_side_request_on_the_same_first_prompt_gets_its_own_lane() {
        let untooled = |system: u8| PromptShape {
            tools_key: None,
            ..shape(0, system)
        };
        let prompt = history(&["fix it"]);
        let title = LaneHead::of(0, &untooled(2), Conversation::of(&prompt));
        assert_eq!(
            assign(std::slice::from_ref(&title), &shape(1, 1), &prompt),
            1,
            "the main loop after the title request"
        );
        let main = head(0, 1, 1, &["fix it"]);
        assert_eq!(
            assign(std::slice::from_ref(&main), &untooled(2), &prompt),
            1,
            "the title request after the main loop"
        );
        let heads = [
            LaneHead::of(1, &untooled(2), Conversation::of(&prompt)),
            main,
        ];
        assert_eq!(
            assign(&heads, &shape(1, 1), &history(&["fix it", "reading", "ok"])),
            0
        );
        // The same history sent again with the same tools on another system prompt (a
        // fallback model names itself there) is the conversation going on: diagnosed.
        let fallback = PromptShape {
            model: "fallback".into(),
            ..shape(1, 7)
        };
        assert_eq!(assign(&heads, &fallback, &prompt), 0);
        // A client without tools: a title request on another model is a side request; the
        // same messages sent again on the same model with another system prompt are not.
        let chat = [LaneHead::of(0, &untooled(1), Conversation::of(&prompt))];
        let small = PromptShape {
            model: "small".into(),
            ..untooled(2)
        };
        assert_eq!(assign(&chat, &small, &prompt), 1);
        assert_eq!(assign(&chat, &untooled(2), &prompt), 0);
    }

    /// When the histories of several lanes start a request with other tools, it goes on the
    /// one it repeats most of, however recently the others were active: the title lane's
    /// one message is a prefix of the main loop's history too.
    #[test]
    fn a_changed_request_joins_the_lane_whose_history_it_repeats_most_of() {
        let untooled = PromptShape {
            tools_key: None,
            ..shape(0, 2)
        };
        let heads = [
            LaneHead::of(1, &untooled, Conversation::of(&history(&["fix it"]))),
            head(0, 1, 1, &["fix it", "reading", "ok"]),
        ];
        let more = history(&["fix it", "reading", "ok", "done", "and now?"]);
        assert_eq!(assign(&heads, &shape(9, 1), &more), 0, "a tool added");
    }
}
