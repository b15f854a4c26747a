//! Anthropic cache-marker placement (DESIGN §7): `preserve`, `auto` or `strip`.
//!
//! `auto` chooses at most 4 blocks, in this priority:
//! 1. the last markable block of the last cached message (writes this request's prefix);
//! 2. the last history message before an injection point (`before_last_user_prompt`), so
//!    the history before an ephemeral injection stays readable next turn;
//! 3. the end of the system prompt (or of the tools when there is no system prompt);
//! 4. the client's own markers, latest first (they match what earlier requests wrote);
//! 5. where this request added more blocks than the provider's 20-block lookback reaches
//!    (many tool calls in one step, a prompt with many attachments), a marker at the end of
//!    the previous request's last message, so its entry is read again (or, when the
//!    provider drops thinking that request kept, at the end of what it still sees as that
//!    request sent it, `CompileOptions::kept_history`). Only there: a marker that reads
//!    nothing more is not placed.
//!
//! A block is skipped when its prefix is below the model's minimum cacheable length, and
//! when the provider ignores it (a message block before the last compaction block); the
//! ignored blocks count nothing toward the minimum.
//! Markers with a 1h TTL must precede 5m ones: after the first 5m marker every later one
//! is written as 5m. A 1h request lifts the client's own 5m markers to 1h (editing only
//! their `ttl`), so that an early 5m marker does not pin the rest to 5m. The uncached tail
//! never carries a marker, in every mode.

use super::blocks;
use crate::envelope::{Block, BreakpointMode, Envelope, Plan, Ttl};

/// Where a block sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Loc {
    Tool(usize),
    System(usize),
    Msg(usize, usize),
}

/// The provider's limit on markers per request.
pub const MAX_MARKERS: usize = 4;
/// Blocks between intermediate markers; below the provider's 20-block lookback.
const STEP: usize = 18;
/// Bytes per token above which a prefix is taken to be long enough without counting.
const SAFE_BYTES_PER_TOKEN: u64 = 6;
/// Minimum used when the model is not in the table.
const DEFAULT_MIN_TOKENS: u64 = 1024;

struct Slot<'a> {
    loc: Loc,
    block: Block,
    bytes: usize,
    /// What the tokenizer counts for this block (when the minimum must be checked).
    text: &'a [u8],
}

/// The blocks of the cacheable prefix in prompt order: tools, system, cached messages.
fn slots(env: &Envelope) -> Vec<Slot<'_>> {
    // At its size: a slot is 72 bytes, and a history of 100,000 small steps has a slot a
    // message or more; grown by doubling, the list held up to twice that at once.
    let blocks: usize = env
        .cached
        .iter()
        .map(|m| env.with_blocks(m, <[_]>::len))
        .sum();
    let mut out = Vec::with_capacity(env.tools.len() + env.system.len() + blocks);
    for (i, tool) in env.tools.iter().enumerate() {
        let b = env.bytes_of(&tool.raw);
        let block = blocks::whole_object_block(b);
        out.push(Slot {
            loc: Loc::Tool(i),
            bytes: b.len(),
            block,
            text: b,
        });
    }
    for (i, part) in env.system.iter().enumerate() {
        let b = env.system_block_bytes(i);
        let mut block = blocks::whole_object_block(&b);
        block.markable &= !part.text.is_empty();
        out.push(Slot {
            loc: Loc::System(i),
            bytes: b.len(),
            block,
            text: part.text.as_bytes(),
        });
    }
    for (i, m) in env.cached.iter().enumerate() {
        let b = env.bytes_of(&m.raw);
        env.with_blocks(m, |blocks| {
            for (j, block) in blocks.iter().cloned().enumerate() {
                let text = &b[block.span.clone()];
                out.push(Slot {
                    loc: Loc::Msg(i, j),
                    bytes: text.len(),
                    block,
                    text,
                });
            }
        });
    }
    out
}

/// The marked content blocks of the tools, the system prompt and the first `history`
/// messages: each one's number in prompt order (from 0, over every block, marked or not),
/// its marker, and the history message it sits in. A prompt carries a few markers among
/// thousands of blocks, so only those are listed.
pub(crate) fn prefix_marks(env: &Envelope, history: usize) -> Vec<(u32, Ttl, Option<u32>)> {
    let mut out = Vec::new();
    let mut block = 0u32;
    let mut note = |marker: Option<Ttl>, message: Option<u32>| {
        if let Some(ttl) = marker {
            out.push((block, ttl, message));
        }
        block += 1;
    };
    for tool in &env.tools {
        note(
            blocks::whole_object_block(env.bytes_of(&tool.raw)).marker,
            None,
        );
    }
    for i in 0..env.system.len() {
        note(
            blocks::whole_object_block(&env.system_block_bytes(i)).marker,
            None,
        );
    }
    for (i, m) in env.cached.iter().take(history).enumerate() {
        env.with_blocks(m, |blocks| {
            for b in blocks {
                note(b.marker, Some(i as u32));
            }
        });
    }
    out
}

/// Answers "is the prompt up to slot k at least the model's minimum?". Tokens never
/// outnumber bytes, so a prefix shorter in bytes than the minimum is too short; a prefix of
/// `SAFE_BYTES_PER_TOKEN` bytes per required token is taken as long enough; only between
/// the two are tokens counted, once per slot and only as far as asked.
struct MinPrefix<'s, 'a> {
    slots: &'s [Slot<'a>],
    min_tokens: u64,
    /// Slots the provider ignores ([`ignored_history`]): they add nothing to the prefix.
    ignored: std::ops::Range<usize>,
    cum_bytes: Vec<u64>,
    cum_tokens: std::cell::RefCell<Vec<u64>>,
}

impl<'s, 'a> MinPrefix<'s, 'a> {
    fn new(slots: &'s [Slot<'a>], min_tokens: u64, ignored: std::ops::Range<usize>) -> Self {
        let cum_bytes = slots
            .iter()
            .enumerate()
            .scan(0u64, |acc, (k, s)| {
                if !ignored.contains(&k) {
                    *acc += s.bytes as u64;
                }
                Some(*acc)
            })
            .collect();
        MinPrefix {
            slots,
            min_tokens,
            ignored,
            cum_bytes,
            cum_tokens: Default::default(),
        }
    }

    fn reached(&self, k: usize) -> bool {
        let bytes = self.cum_bytes[k];
        if bytes >= self.min_tokens.saturating_mul(SAFE_BYTES_PER_TOKEN) {
            return true;
        }
        if bytes < self.min_tokens {
            return false;
        }
        let mut cum = self.cum_tokens.borrow_mut();
        while cum.len() <= k {
            let at = cum.len();
            let n = if self.ignored.contains(&at) {
                0
            } else {
                count_cached(self.slots[at].text)
            };
            let total = cum.last().copied().unwrap_or(0) + n;
            cum.push(total);
        }
        cum[k] >= self.min_tokens
    }
}

/// Token count of a block, remembered across requests: the blocks counted are the head of
/// the prompt (tools, system, first messages), which agents resend unchanged, and BPE
/// counting is far slower than hashing.
fn count_cached(text: &[u8]) -> u64 {
    static SEEN: crate::memo::Memo<u64> = crate::memo::Memo::new(8192);
    SEEN.get_or_insert_with(crate::memo::key(b"tokens", text), || {
        crate::tokens::count(&String::from_utf8_lossy(text))
    })
}

/// The mode to apply. A request whose own markers the provider would reject (more than
/// [`MAX_MARKERS`], or one on a block that cannot carry it) is not silently repaired by
/// `auto`: it goes as the client sent it and gets the provider's own error. `strip`, which
/// a policy asks for explicitly, still removes them.
fn effective_mode(env: &Envelope, slots: &[Slot<'_>], mode: BreakpointMode) -> BreakpointMode {
    if !matches!(mode, BreakpointMode::Auto { .. }) {
        return mode;
    }
    let marked = slots.iter().filter(|s| s.block.marker.is_some()).count()
        + usize::from(env.option_raw("cache_control").is_some());
    let misplaced = slots
        .iter()
        .any(|s| s.block.marker.is_some() && !s.block.markable);
    if marked > MAX_MARKERS || misplaced {
        tracing::debug!(marked, misplaced, "client markers invalid; left as sent");
        return BreakpointMode::Preserve;
    }
    mode
}

/// The mode that applies (see [`effective_mode`]) and the markers it changes, from one
/// reading of the blocks.
pub(crate) fn plan(
    env: &Envelope,
    requested: BreakpointMode,
    kept_history: Option<usize>,
) -> (BreakpointMode, Plan) {
    if requested == BreakpointMode::Preserve {
        return (requested, Plan::default());
    }
    let slots = slots(env);
    let mode = effective_mode(env, &slots, requested);
    let wanted: Vec<Option<Ttl>> = match mode {
        BreakpointMode::Preserve => return (mode, Plan::default()),
        BreakpointMode::Strip => vec![None; slots.len()],
        BreakpointMode::Auto { ttl } => auto(env, &slots, ttl, kept_history),
    };
    let mut plan = Plan::default();
    for (slot, want) in slots.iter().zip(wanted) {
        if slot.block.marker == want {
            continue;
        }
        match slot.loc {
            Loc::Tool(i) => {
                plan.tools.insert(i, want);
            }
            Loc::System(i) => {
                plan.system.insert(i, want);
            }
            Loc::Msg(i, j) => plan.messages.entry(i).or_default().push((j, want)),
        }
    }
    (mode, plan)
}

/// The slots (first, last) of the history message the previous request of this
/// conversation ended with: the one before the latest model message (a tool loop's
/// previous tool result, or the last tool result before the previous turn's answer). In
/// `auto` mode that request's last marker sat on its last markable block. With
/// `kept_history`, the last message before it whose slots the provider still matches.
fn previous_request_end(
    env: &Envelope,
    slots: &[Slot<'_>],
    kept_history: Option<usize>,
) -> Option<(usize, usize)> {
    let kinds = env.history_kinds();
    let model = kinds.iter().rposition(|k| k.from_model)?;
    let ended = kinds[..model].iter().rposition(|k| !k.from_model)?;
    let message = match kept_history {
        Some(kept) if kept <= ended => kept.checked_sub(1)?,
        _ => ended,
    };
    let first = slots
        .iter()
        .position(|s| matches!(s.loc, Loc::Msg(i, _) if i == message))?;
    let last = slots
        .iter()
        .rposition(|s| matches!(s.loc, Loc::Msg(i, _) if i == message))?;
    Some((first, last))
}

/// The message slots the provider ignores: those before the last compaction block (see
/// [`crate::providers::anthropic::compaction_start`]). A marker there reads and writes
/// nothing, and their tokens are not part of the prompt.
fn ignored_history(slots: &[Slot<'_>]) -> std::ops::Range<usize> {
    let Some(start) = slots
        .iter()
        .rposition(|s| s.block.compaction && matches!(s.loc, Loc::Msg(..)))
    else {
        return 0..0;
    };
    let first_message = slots
        .iter()
        .position(|s| matches!(s.loc, Loc::Msg(..)))
        .unwrap_or(start);
    first_message..start
}

fn auto(
    env: &Envelope,
    slots: &[Slot<'_>],
    ttl: Ttl,
    kept_history: Option<usize>,
) -> Vec<Option<Ttl>> {
    let min_tokens = crate::models::lookup(&env.meta.model)
        .map(|m| m.min_cacheable_tokens)
        .unwrap_or(DEFAULT_MIN_TOKENS);
    let ignored = ignored_history(slots);
    let min = MinPrefix::new(slots, min_tokens, ignored.clone());
    // The last markable slot at or before `idx` that the provider reads, not below the
    // minimum prefix.
    let markable_at_or_before = |idx: usize| {
        (0..=idx.min(slots.len().saturating_sub(1)))
            .rev()
            .take_while(|&k| min.reached(k))
            .find(|&k| slots[k].block.markable && !ignored.contains(&k))
    };
    let last_of = |pred: &dyn Fn(&Loc) -> bool| slots.iter().rposition(|s| pred(&s.loc));
    let mut chosen: Vec<(usize, Ttl)> = Vec::new();
    let take = |idx: Option<usize>, t: Ttl, chosen: &mut Vec<(usize, Ttl)>| {
        if let Some(k) = idx {
            if chosen.len() < MAX_MARKERS && !chosen.iter().any(|(c, _)| *c == k) {
                chosen.push((k, t));
            }
        }
    };
    let last_msg = env.cached.len().checked_sub(1);
    let last = last_msg
        .and_then(|m| last_of(&|l| matches!(l, Loc::Msg(i, _) if *i == m)))
        .and_then(&markable_at_or_before);
    take(last, ttl, &mut chosen);
    if let Some(first_injected) = env.cached.iter().position(|m| m.injected) {
        let before = first_injected
            .checked_sub(1)
            .and_then(|m| last_of(&|l| matches!(l, Loc::Msg(i, _) if *i == m)))
            .and_then(&markable_at_or_before);
        take(before, ttl, &mut chosen);
    }
    let head = last_of(&|l| matches!(l, Loc::System(_) | Loc::Tool(_)));
    let head = head.and_then(|h| markable_at_or_before(h).filter(|&k| k == h || k + STEP > h));
    take(head, ttl, &mut chosen);
    let client: Vec<usize> = (0..slots.len())
        .rev()
        .filter(|&k| slots[k].block.marker.is_some() && slots[k].block.markable)
        .filter(|&k| min.reached(k))
        .collect();
    if let (Some(at), Some((first, end))) = (last, previous_request_end(env, slots, kept_history)) {
        // The previous request of this conversation wrote its entry at the end of its
        // last message. When this request added more blocks than the lookback reaches (a
        // step with many tool calls, a prompt with many attachments), a marker there reads
        // that entry again; where another marker already reaches it, one more would read
        // nothing more and is not placed.
        let reaches = |c: usize| c >= end && c - end <= STEP;
        let free = MAX_MARKERS.saturating_sub(chosen.len());
        let kept = client
            .iter()
            .copied()
            .filter(|k| !chosen.iter().any(|(c, _)| c == k))
            .take(free);
        let mut covered = chosen.iter().map(|&(c, _)| c).chain(kept);
        if at > end && !covered.any(reaches) {
            let bridge = markable_at_or_before(end).filter(|&k| k >= first);
            take(bridge, ttl, &mut chosen);
        }
    }
    for k in client {
        // A 1h request lifts the client's own 5m markers too: a 5m marker early in the
        // prompt (Claude Code's on `system[1]`) would otherwise pin every later one to 5m.
        let own = slots[k].block.marker.unwrap_or(ttl);
        take(Some(k), own.max(ttl), &mut chosen);
    }
    chosen.sort_by_key(|(k, _)| *k);
    let mut wanted = vec![None; slots.len()];
    let mut seen_short = false;
    for (k, t) in chosen {
        let t = if seen_short { Ttl::FiveMinutes } else { t };
        seen_short |= t == Ttl::FiveMinutes;
        wanted[k] = Some(t);
    }
    wanted
}
