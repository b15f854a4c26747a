//! Incremental reading of agents' bodies: what cachet already knows of a recent body's
//! history, up to a message boundary, so that the next request of the same conversation is
//! checked and scanned only from where it stops repeating it.
//!
//! Agents resend their whole history on every request, and each request is the previous
//! one plus a small tail. Once a body has been scanned, [`KnownPrefixes`] keeps it (the
//! client's own `Bytes`, not a copy) with what the scan found of its history array
//! (`messages`, or Responses `input`): the top-level entries before it and the span of each
//! message. A new body is compared with the kept bodies whose first message ends at the same
//! offset after the same bytes (found by a light scan of the body's start, or, when the
//! body starts with the system prompt and tools of a recent kept body, by one `memcmp` of
//! them and a scan of its first message only): one `memcmp` says how far it repeats each,
//! and the longest run of whole messages is taken as read.
//! The body check resumes there in the state the full check would have reached
//! (`json_check::check_resumed`), the envelope scan continues after the known elements
//! (`scan::elements_end_after`), and the session layer's prefix hashes of those messages
//! are taken as they were ([`history_hashes`]); only what follows is read. What follows
//! the history (agents send their system prompt and tools there) is taken as read too when
//! the body ends with the same bytes after its history as the kept body (`Tail`). A body
//! that extends nothing kept takes the full path, and is counted.
//!
//! Memory is bounded: each conversation keeps only its latest body (and, when a policy
//! shaped it, the latest body as sent, read again for its record), at most four heads are
//! kept (copied, counted in the budget), a body over a quarter of the budget is not kept,
//! and past the budget of kept bodies, heads, spans and hashes (a quarter of
//! `sessions.cache_bytes`) the store starts over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;

use crate::envelope::parse::{Resume, Scanned, Tail};
use crate::envelope::{Envelope, OrigFacts};
use crate::json::check::{self as json_check, Gathered};
use crate::json::scan::{self, Entry, Span};
use crate::providers::{history_keys, tools_keys};
use crate::session::PrefixHashes;

/// Bodies kept under one lead: a conversation's forks share it.
const PER_LEAD: usize = 8;

/// Bytes before the end of a body's first message that make its lead.
const LEAD_BYTES: usize = 4096;

/// Heads kept (see [`Store::heads`]), and the shortest worth keeping: the light scan
/// walks a shorter one in well under a microsecond.
const HEADS: usize = 4;
const HEAD_WORTH: usize = 1024;

/// What is known of one body, up to the end of its last history message.
#[derive(Debug)]
pub struct Known {
    /// The body as the client sent it.
    body: Bytes,
    /// Its lead (see [`first_link`]).
    lead: u128,
    /// The history array's key (quotes included) and where its value (`[`) starts.
    pub key: Span,
    pub array_start: usize,
    /// Top-level entries before the history array.
    pub before: Vec<Entry>,
    /// The history's element spans.
    pub elems: Vec<Span>,
    /// The element spans of the split arrays (the tools) among the entries before the
    /// history, by where each array starts.
    pub(crate) arrays_before: Vec<(usize, Vec<Span>)>,
    /// What follows the history array, when known whole.
    pub(crate) tail: Option<Tail>,
    /// The body passed the full body check (`json_check`), so its prefixes are valid JSON.
    pub checked: bool,
    /// Whose body it is: the client's as received, or cachet's as sent.
    kind: Kind,
    /// What its elements are and hold, once its envelope read them.
    pub(crate) facts: OrigFacts,
    /// The prefix hashes of its history (the session layer's anchors), once computed, and
    /// the element the history starts at (after leading system messages).
    history: OnceLock<(usize, PrefixHashes)>,
}

impl Known {
    fn weight(&self) -> usize {
        let spans = |arrays: &[(usize, Vec<Span>)]| {
            arrays.iter().map(|(_, a)| a.len()).sum::<usize>() * std::mem::size_of::<Span>()
        };
        let tail = self.tail.as_ref().map_or(0, |t| {
            t.entries.len() * std::mem::size_of::<Entry>() + spans(&t.arrays)
        });
        std::mem::size_of::<Known>()
            + self.body.len()
            + self.before.len() * std::mem::size_of::<Entry>()
            + spans(&self.arrays_before)
            + tail
            // A span, a kind, blocks, and the anchors' message key and rolling hash.
            + self.elems.len() * (std::mem::size_of::<Span>() + 64 + 96 + 64)
    }

    /// What follows the history array, when known whole, and its bytes.
    pub(crate) fn tail(&self) -> Option<(&Tail, &[u8])> {
        let tail = self.tail.as_ref()?;
        Some((tail, &self.body[tail.at..]))
    }
}

/// A body's match with a remembered one: its first `messages` history elements are the
/// same bytes, at the same offsets.
#[derive(Clone)]
pub struct PrefixMatch {
    pub known: Arc<Known>,
    messages: usize,
}

impl PrefixMatch {
    /// The known element spans of the match (at least one).
    pub fn elems(&self) -> &[Span] {
        &self.known.elems[..self.messages]
    }

    /// Where reading resumes: the end of the last matched message.
    pub fn resume_at(&self) -> usize {
        self.elems().last().map_or(0, |s| s.end)
    }

    /// What the envelope's parse takes as read of the body.
    pub fn resume(&self) -> Resume<'_> {
        let known = &self.known;
        Resume {
            key: &known.key,
            array_start: known.array_start,
            before: &known.before,
            arrays_before: &known.arrays_before,
            elems: self.elems(),
            tail: known.tail(),
            facts: &known.facts,
        }
    }

    /// What the body check takes as read of the body, when the kept body passed it.
    pub fn check_resume<'a>(&'a self, fields: &'a Fields) -> Option<json_check::Resume<'a>> {
        let known = &self.known;
        if !known.checked {
            return None;
        }
        let tail = known.tail().map(|(tail, bytes)| json_check::KnownTail {
            bytes,
            fields: &fields.tail,
            arrays: &tail.arrays,
            deepest: tail.deepest,
        });
        Some(json_check::Resume {
            pos: self.resume_at(),
            elems: self.elems(),
            fields_before: &fields.before,
            arrays_before: &known.arrays_before,
            array_key: inner(&known.key),
            array_start: known.array_start,
            tail,
        })
    }

    /// The kept entries as the body check's fields, for [`Self::check_resume`].
    pub fn check_fields(&self) -> Fields {
        let known = &self.known;
        Fields {
            before: as_fields(&known.before),
            tail: known
                .tail()
                .map_or_else(Vec::new, |(t, _)| as_fields(&t.entries)),
        }
    }
}

/// The body check ([`crate::providers::check::check_known`]) of a body that repeats the
/// kept body of `found`: resumed after the repeated messages when that body passed it.
pub fn check(
    endpoint: crate::route::Endpoint,
    body: &[u8],
    found: Option<&PrefixMatch>,
    gather: Option<&mut Gathered>,
) -> Result<String, crate::error::ApiError> {
    let fields = found.map(PrefixMatch::check_fields);
    let resume = found
        .zip(fields.as_ref())
        .and_then(|(found, fields)| found.check_resume(fields));
    crate::providers::check::check_known(endpoint, body, resume.as_ref(), gather)
}

/// The kept body's top-level entries as the body check's fields (before and after the
/// history array).
pub struct Fields {
    before: Vec<json_check::Field>,
    tail: Vec<json_check::Field>,
}

/// A key's span without its quotes: the kept entries' keys include them, the check's
/// fields do not.
fn inner(key: &Span) -> Span {
    key.start + 1..key.end - 1
}

fn as_fields(entries: &[Entry]) -> Vec<json_check::Field> {
    entries
        .iter()
        .map(|e| json_check::Field {
            key: inner(&e.key),
            value: e.value.clone(),
        })
        .collect()
}

/// The prefix hashes of `env`'s history (for session identity and anchors), taking those
/// of the messages it repeats from the remembered body `found` when they were computed;
/// remembered on `this`, the entry of `env`'s own body, for the next request.
pub fn history_hashes(
    env: &Envelope,
    found: Option<&PrefixMatch>,
    this: Option<&Arc<Known>>,
) -> PrefixHashes {
    let offset = env.history_origins().next().flatten();
    let earlier = found.and_then(|m| Some((m.known.history.get()?, m.messages)));
    let hashes = match (earlier, offset) {
        (Some(((at, earlier), matched)), Some(offset)) if *at == offset => {
            // History message j is element j + offset of both bodies while both are the
            // repeated elements.
            let same = env
                .history_origins()
                .enumerate()
                .take_while(|(j, origin)| *origin == Some(j + offset) && j + offset < matched)
                .count();
            PrefixHashes::of_raw_after(earlier, same, env.history_raw())
        }
        _ => PrefixHashes::of_raw(env.history_raw()),
    };
    if let (Some(this), Some(offset)) = (this, offset) {
        let _ = this.history.set((offset, hashes.clone()));
    }
    hashes
}

/// Recently read bodies, by their leads.
#[derive(Default)]
pub struct KnownPrefixes {
    enabled: bool,
    /// Memory the store may hold (bodies, spans, entries and anchors) before it starts over.
    budget: usize,
    inner: Mutex<Store>,
}

#[derive(Default)]
struct Store {
    by_lead: HashMap<u128, Vec<Arc<Known>>>,
    /// The bytes of recent kept bodies up to their first history message's first byte,
    /// latest first, when that is at least [`HEAD_WORTH`]: a client that sends its system
    /// prompt and tools before the history (an SDK call in field order) sends the same
    /// tens of KB there on every request, which a `memcmp` passes faster than a scan.
    /// Taken from a body that repeats no kept one (a conversation's first): the bodies
    /// read after it share its head.
    heads: Vec<Bytes>,
    weight: usize,
}

impl Store {
    /// Remember `body`'s head, the bytes up to and including `first` (its first history
    /// message's first byte), unless a kept head already starts it.
    fn keep_head(&mut self, body: &[u8], first: usize) {
        if first < HEAD_WORTH || self.heads.iter().any(|h| body.starts_with(h)) {
            return;
        }
        let head = Bytes::copy_from_slice(&body[..=first]);
        self.weight += head.len();
        self.heads.insert(0, head);
        if self.heads.len() > HEADS {
            let freed: usize = self.heads.drain(HEADS..).map(|h| h.len()).sum();
            self.weight = self.weight.saturating_sub(freed);
        }
    }
}

/// Whose body a kept body is. With a policy, a conversation has two latest bodies: the
/// client's, which its next body repeats, and the one cachet sent after the policy changed
/// it, which the next body sent repeats (read again for the session log). Each is looked up
/// and replaced among its own kind, so that keeping one never pushes out the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Received,
    Sent,
}

/// How a body was read: `Incremental` when a remembered prefix was taken as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Incremental,
    Full,
}

impl Path {
    pub fn label(self) -> &'static str {
        match self {
            Path::Incremental => "incremental",
            Path::Full => "full",
        }
    }
}

impl KnownPrefixes {
    /// A store of at most `budget` bytes; a disabled one keeps nothing and every body takes
    /// the full path.
    pub fn new(enabled: bool, budget: usize) -> Self {
        KnownPrefixes {
            enabled,
            budget,
            inner: Mutex::default(),
        }
    }

    /// The client's kept body `body` repeats the most whole history messages of, if any.
    pub fn find(&self, body: &[u8]) -> Option<PrefixMatch> {
        self.find_kind(body, Kind::Received)
    }

    /// [`Self::find`] among the bodies cachet sent.
    pub fn find_sent(&self, body: &[u8]) -> Option<PrefixMatch> {
        self.find_kind(body, Kind::Sent)
    }

    fn find_kind(&self, body: &[u8], kind: Kind) -> Option<PrefixMatch> {
        if !self.enabled {
            return None;
        }
        let heads = self.inner.lock().ok()?.heads.clone();
        let first = first_link_after(&heads, body).or_else(|| first_link(body))?;
        let candidates = self.inner.lock().ok()?.by_lead.get(&first.1).cloned()?;
        // On a tie, a body that passed the check: the check resumes only after one.
        candidates
            .into_iter()
            .filter(|known| known.kind == kind)
            .filter_map(|known| matched(known, body, first))
            .max_by_key(|m| (m.messages, m.known.checked))
    }

    /// Keep a client's body whose history array was scanned, in place of the one it was read
    /// from (`found`); `checked` says the whole body passed the body check.
    pub fn remember(
        &self,
        scanned: Scanned<'_>,
        found: Option<&PrefixMatch>,
        checked: bool,
    ) -> Option<Arc<Known>> {
        self.keep(scanned, found, checked, Kind::Received)
    }

    /// Keep a body cachet sent, in place of the one it was read from (`found`).
    pub fn remember_sent(
        &self,
        scanned: Scanned<'_>,
        found: Option<&PrefixMatch>,
    ) -> Option<Arc<Known>> {
        self.keep(scanned, found, false, Kind::Sent)
    }

    fn keep(
        &self,
        scanned: Scanned<'_>,
        found: Option<&PrefixMatch>,
        checked: bool,
        kind: Kind,
    ) -> Option<Arc<Known>> {
        if !self.enabled || scanned.elems.is_empty() {
            return None;
        }
        // Only when the light scan of a later body ([`first_link`]) would find the history
        // array the envelope split: the first top-level array named as a history. Its
        // entries before are known, so this body needs no scan of its own.
        let b: &[u8] = scanned.body;
        let history_at = |key: &Span, value_start: usize| {
            history_keys().contains(&&b[key.start + 1..key.end - 1])
                && b.get(value_start) == Some(&b'[')
        };
        if !history_at(&scanned.key, scanned.array_start)
            || scanned
                .before
                .iter()
                .any(|e| history_at(&e.key, e.value.start))
        {
            return None;
        }
        let lead = lead_at(b, scanned.elems[0].end);
        let spans_at = |start: usize| {
            let (_, spans) = scanned.arrays.iter().find(|(at, _)| *at == start)?;
            Some(spans.to_vec())
        };
        let arrays_before = scanned
            .before
            .iter()
            .filter(|e| {
                b.get(e.value.start) == Some(&b'[')
                    && tools_keys().contains(&&b[e.key.start + 1..e.key.end - 1])
            })
            .filter_map(|e| Some((e.value.start, spans_at(e.value.start)?)))
            .collect();
        let tail = Tail::of(
            b,
            scanned.array_end,
            scanned.after,
            tools_keys(),
            spans_at,
            scanned.deepest,
        );
        let known = Arc::new(Known {
            body: scanned.body.clone(),
            lead,
            key: scanned.key,
            array_start: scanned.array_start,
            before: scanned.before.to_vec(),
            elems: scanned.elems.to_vec(),
            arrays_before,
            tail,
            checked,
            kind,
            facts: scanned.facts,
            history: OnceLock::new(),
        });
        // An outsized body (a one-off 30 MB paste) is not worth holding a quarter of the
        // budget: it is read whole again if it comes back.
        let weight = known.weight();
        if weight > self.budget / 4 {
            return None;
        }
        let mut store = self.inner.lock().ok()?;
        if store.weight + weight > self.budget {
            *store = Store::default();
        }
        // A body read after a kept one shares its head, kept then.
        if found.is_none() {
            store.keep_head(b, scanned.elems[0].start);
        }
        let list = store.by_lead.entry(lead).or_default();
        let mut freed = 0;
        list.retain(|k| {
            let superseded = found.is_some_and(|m| Arc::ptr_eq(k, &m.known));
            if superseded {
                freed += k.weight();
            }
            !superseded
        });
        list.insert(0, known.clone());
        if list.len() > PER_LEAD {
            freed += list.drain(PER_LEAD..).map(|k| k.weight()).sum::<usize>();
        }
        store.weight = (store.weight + weight).saturating_sub(freed);
        Some(known)
    }
}

impl KnownPrefixes {
    /// Keep a body the check passed whole, from what the check gathered of it, in place of
    /// the one it was read from (`found`).
    pub fn remember_checked(
        &self,
        body: &Bytes,
        gathered: &Gathered,
        found: Option<&PrefixMatch>,
    ) -> Option<Arc<Known>> {
        if !gathered.complete {
            return None;
        }
        let (key, array_start) = gathered.elements.array.clone()?;
        let quoted = |key: &std::ops::Range<usize>| key.start - 1..key.end + 1;
        let entries: Vec<Entry> = gathered
            .fields
            .iter()
            .map(|f| Entry {
                key: quoted(&f.key),
                value: f.value.clone(),
            })
            .collect();
        let at = gathered.fields.iter().position(|f| f.key == key)?;
        let arrays: Vec<(usize, &[Span])> = entries
            .iter()
            .filter_map(|e| Some((e.value.start, gathered.elements.spans_at(e.value.start)?)))
            .filter(|(start, _)| *start != array_start)
            .collect();
        self.remember(
            Scanned {
                facts: OrigFacts::default(),
                body,
                key: quoted(&key),
                array_start,
                array_end: entries[at].value.end,
                before: &entries[..at],
                elems: &gathered.elements.spans,
                after: &entries[at + 1..],
                arrays,
                deepest: gathered.elements.deepest,
            },
            found,
            true,
        )
    }
}

/// How far `body` repeats `known`: the longest run of whole history messages whose bytes,
/// and all before them, are the same; `None` when not even the first message is.
fn matched(known: Arc<Known>, body: &[u8], first: (usize, u128)) -> Option<PrefixMatch> {
    if known.elems.first()?.end != first.0 || known.lead != first.1 {
        return None;
    }
    let last = known.elems.last()?.end;
    let same = common_prefix(&known.body[..last], body);
    let messages = known.elems.partition_point(|s| s.end <= same);
    (messages > 0).then_some(PrefixMatch { known, messages })
}

/// The length of the longest common prefix of two byte strings: `memcmp` by pages, then
/// by ever smaller runs inside the page that differs (or the last, partial one), so that
/// at most a few bytes are compared one at a time. Comparing that page byte by byte was
/// most of a small body's lookup: a body repeated whole never leaves the last page.
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut at = 0;
    for run in [4096, 256, 16] {
        while at + run <= n && a[at..at + run] == b[at..at + run] {
            at += run;
        }
    }
    at + a[at..n]
        .iter()
        .zip(&b[at..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The length of the longest common suffix of two byte strings, compared as
/// [`common_prefix`] compares from the start.
pub(crate) fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut at = 0;
    for run in [4096, 256, 16] {
        while at + run <= n && a[n - at - run..n - at] == b[n - at - run..n - at] {
            at += run;
        }
    }
    at + a[..n - at]
        .iter()
        .rev()
        .zip(b[..n - at].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// The end of a body's first history message, and its lead: a hash of where that message
/// ends and of the bytes before it (up to [`LEAD_BYTES`]), which picks the kept bodies it
/// may repeat. Found by a light scan of the top-level keys up to the history array and of
/// its first element.
fn first_link(body: &[u8]) -> Option<(usize, u128)> {
    let mut at = scan::skip_ws(body, 0);
    if body.get(at) != Some(&b'{') {
        return None;
    }
    at = scan::skip_ws(body, at + 1);
    loop {
        let key = at..scan::string_end(body, at).ok()?;
        let colon = scan::skip_ws(body, key.end);
        (body.get(colon) == Some(&b':')).then_some(())?;
        let value = scan::skip_ws(body, colon + 1);
        let name = &body[key.start + 1..key.end - 1];
        if history_keys().contains(&name) && body.get(value) == Some(&b'[') {
            let first = scan::skip_ws(body, value + 1);
            if body.get(first) == Some(&b']') {
                return None;
            }
            let end = scan::value_end(body, first).ok()?;
            return Some((end, lead_at(body, end)));
        }
        let next = scan::skip_ws(body, scan::value_end(body, value).ok()?);
        (body.get(next) == Some(&b',')).then_some(())?;
        at = scan::skip_ws(body, next + 1);
    }
}

/// [`first_link`] of a body that starts with one of `heads`: the light scan would read the
/// same bytes up to the first message's first byte, and the kept body's first message
/// starts there too (the head ends with that byte, so whitespace before it cannot differ),
/// so only the first message is scanned.
fn first_link_after(heads: &[Bytes], body: &[u8]) -> Option<(usize, u128)> {
    let head = heads.iter().find(|h| body.starts_with(h))?;
    let first = head.len() - 1;
    let end = scan::value_end(body, first).ok()?;
    Some((end, lead_at(body, end)))
}

/// The lead of a body whose first history message ends at `end`: that offset and the bytes
/// before it.
fn lead_at(body: &[u8], end: usize) -> u128 {
    let from = end.saturating_sub(LEAD_BYTES);
    crate::memo::key(&(end as u64).to_le_bytes(), &body[from..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Endpoint;

    /// Against the plain definition, with the first difference on each side of every run's
    /// boundary and bodies that end inside a run.
    #[test]
    fn common_prefix_is_where_the_bytes_first_differ() {
        let plain = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let a: Vec<u8> = (0..9000u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [
            0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 4352, 8999, 9000,
        ] {
            let same = &a[..len];
            assert_eq!(common_prefix(&a, same), len);
            assert_eq!(common_prefix(same, &a), len);
            for at in [
                0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 4351, 4352, 8191, 8999,
            ] {
                if at >= len {
                    continue;
                }
                let mut b = same.to_vec();
                b[at] ^= 0x80;
                assert_eq!(
                    common_prefix(&a, &b),
                    plain(&a, &b),
                    "len {len}, differs at {at}"
                );
                assert_eq!(common_prefix(&a, &b), at);
                assert_eq!(
                    common_suffix(&rev_of(&a), &rev_of(&b)),
                    at,
                    "suffix: len {len}, differs {at} from the end"
                );
            }
            assert_eq!(common_suffix(&a, same), plain(&rev_of(&a), &rev_of(same)));
        }
    }

    fn rev_of(v: &[u8]) -> Vec<u8> {
        v.iter().rev().copied().collect()
    }

    fn body(conversation: usize, messages: usize, size: usize) -> Bytes {
        let history: Vec<String> = (0..messages)
            .map(|i| {
                let text = format!("{conversation}:{i} ").repeat(size / 8 + 1);
                serde_json::json!({"role": "user", "content": text}).to_string()
            })
            .collect();
        Bytes::from(format!(
            r#"{{"model":"m","messages":[{}]}}"#,
            history.join(",")
        ))
    }

    fn read(known: &KnownPrefixes, body: Bytes) -> Option<PrefixMatch> {
        let found = known.find(&body);
        let env = Envelope::parse_checked(
            crate::providers::wire(Endpoint::Messages).unwrap(),
            body,
            found.as_ref().map(|m| m.resume()).as_ref(),
            None,
        )
        .unwrap();
        known.remember(env.scanned().unwrap(), found.as_ref(), true);
        found
    }

    /// A body is kept exactly when the light scan of a later body would look for it: under
    /// the lead [`first_link`] gives it, and only when that scan finds the history array
    /// the envelope split (not an earlier array named as a history, nor a key with escapes).
    #[test]
    fn a_body_is_kept_under_the_lead_the_light_scan_finds() {
        let bodies: &[(Endpoint, &str)] = &[
            (
                Endpoint::Messages,
                r#"{"model":"m","system":"s","tools":[{"name":"t"}],"messages":[{"role":"user","content":"hi"}]}"#,
            ),
            (
                Endpoint::Messages,
                r#" { "messages" : [ {"role":"user","content":"a"} , {"role":"assistant","content":"b"} ] , "model":"m" }"#,
            ),
            (
                Endpoint::Responses,
                r#"{"model":"m","input":[{"role":"user","content":"hi"}]}"#,
            ),
            (
                Endpoint::Chat,
                r#"{"model":"m","input":[{"x":1}],"messages":[{"role":"user","content":"hi"}]}"#,
            ),
            (
                Endpoint::Chat,
                r#"{"model":"m","m\u0065ssages":[{"role":"user","content":"hi"}]}"#,
            ),
        ];
        for (endpoint, text) in bodies {
            let body = Bytes::from(*text);
            let env = Envelope::parse_checked(
                crate::providers::wire(*endpoint).unwrap(),
                body.clone(),
                None,
                None,
            )
            .unwrap();
            let known = KnownPrefixes::new(true, 1 << 20);
            let kept = env
                .scanned()
                .and_then(|scanned| known.remember(scanned, None, true));
            let light = first_link(&body);
            match (&kept, light) {
                (Some(k), Some((end, lead))) => {
                    assert_eq!((k.elems[0].end, k.lead), (end, lead), "{text}");
                }
                (None, Some((end, _))) => {
                    let split = env.scanned().map(|s| s.elems[0].end);
                    assert_ne!(
                        split,
                        Some(end),
                        "{text}: not kept though the scan finds it"
                    );
                }
                (Some(_), None) => panic!("{text}: kept where no later body is looked up"),
                (None, None) => {}
            }
        }
    }

    /// A kept head (a client's system prompt and tools before its history) finds the first
    /// message exactly where the light scan does, on a body that repeats it, extends it or
    /// changes its first message; a body that differs anywhere in it, even by whitespace
    /// before the first message, is scanned.
    #[test]
    fn a_kept_head_finds_the_first_message_where_the_scan_does() {
        let sdk: serde_json::Value = serde_json::from_str(include_str!(
            "../tests/data/clients/anthropic_sdk_tools_first.json"
        ))
        .unwrap();
        let with = |edit: &dyn Fn(&mut Vec<serde_json::Value>)| {
            let mut body = sdk.clone();
            edit(body["messages"].as_array_mut().unwrap());
            Bytes::from(body.to_string())
        };
        let kept = with(&|_| {});
        let known = KnownPrefixes::new(true, 1 << 20);
        let env = Envelope::parse_checked(
            crate::providers::wire(Endpoint::Messages).unwrap(),
            kept.clone(),
            None,
            None,
        )
        .unwrap();
        known.remember(env.scanned().unwrap(), None, true).unwrap();
        let heads = known.inner.lock().unwrap().heads.clone();
        assert_eq!(heads.len(), 1, "a tools-first head is kept");

        let extended = with(&|m| m.push(serde_json::json!({"role": "user", "content": "more"})));
        let first_changed = with(&|m| m[0] = serde_json::json!({"role": "user", "content": "x"}));
        let spaced = Bytes::from(String::from_utf8(kept.to_vec()).unwrap().replacen(
            r#""messages":["#,
            r#""messages":[ "#,
            1,
        ));
        let emptied = with(&|m| m.clear());
        let cut = kept.slice(..heads[0].len() + 3);
        for (name, body, shortcut) in [
            ("repeated", &kept, true),
            ("extended", &extended, true),
            ("first message changed", &first_changed, true),
            ("whitespace before the first message", &spaced, false),
            ("no history", &emptied, false),
            ("cut inside the first message", &cut, false),
        ] {
            let after = first_link_after(&heads, body);
            assert_eq!(after.is_some(), shortcut, "{name}");
            if after.is_some() {
                assert_eq!(after, first_link(body), "{name}");
            }
        }
        assert_eq!(
            known.find(&extended).unwrap().messages,
            sdk["messages"].as_array().unwrap().len()
        );

        // A client that sends its history first has no head worth keeping.
        let claude_code =
            Bytes::from_static(include_bytes!("../tests/data/clients/claude_code.json"));
        let env = Envelope::parse_checked(
            crate::providers::wire(Endpoint::Messages).unwrap(),
            claude_code,
            None,
            None,
        )
        .unwrap();
        let known = KnownPrefixes::new(true, 1 << 20);
        known.remember(env.scanned().unwrap(), None, true).unwrap();
        assert!(known.inner.lock().unwrap().heads.is_empty());
    }

    /// What the check gathered splits the envelope only where the scanner would have read
    /// the same: nesting the scanner refuses (past 128 levels, which the check accepts) is
    /// still read, and refused, by the scanner, in a message and in a top-level field.
    #[test]
    fn nesting_the_scanner_refuses_is_left_to_the_scanner() {
        let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
        for levels in [100, 126, 127, 128, 129, 200] {
            let bodies = [
                format!(
                    r#"{{"model":"m","messages":[{{"role":"user","content":"a","x":{}}}]}}"#,
                    nested(levels)
                ),
                format!(
                    r#"{{"model":"m","metadata":{},"messages":[{{"role":"user","content":"a"}}]}}"#,
                    nested(levels)
                ),
            ];
            for text in bodies {
                let body = Bytes::from(text);
                let mut gathered = crate::providers::gathered();
                crate::providers::check::check_known(
                    Endpoint::Messages,
                    &body,
                    None,
                    Some(&mut gathered),
                )
                .unwrap();
                assert!(gathered.complete);
                let read = |g: Option<&Gathered>| {
                    let env = Envelope::parse_checked(
                        crate::providers::wire(Endpoint::Messages).unwrap(),
                        body.clone(),
                        None,
                        g,
                    );
                    format!("{:?}", env.map_err(|e| e.message))
                };
                assert_eq!(read(Some(&gathered)), read(None), "{levels} levels");
            }
        }
        // Past what the scanner reads, the scanner answers.
        let deep = Bytes::from(format!(r#"{{"messages":[{}]}}"#, nested(200)));
        let mut gathered = crate::providers::gathered();
        crate::providers::check::check_known(Endpoint::Messages, &deep, None, Some(&mut gathered))
            .ok();
        assert!(gathered.as_scanned().is_none());
    }

    /// With a policy, a conversation has two latest bodies: the client's, and the one cachet
    /// sent (read again for its record). Keeping the sent one does not push out the
    /// client's: the client's next body finds the client's, which passed the body check, so
    /// the check resumes after the repeated messages instead of reading the whole body.
    #[test]
    fn a_sent_body_does_not_push_out_the_clients_body() {
        let known = KnownPrefixes::new(true, 16 << 20);
        let parse = |body: &Bytes, found: Option<&PrefixMatch>| {
            Envelope::parse_checked(
                crate::providers::wire(Endpoint::Messages).unwrap(),
                body.clone(),
                found.map(|m| m.resume()).as_ref(),
                None,
            )
            .unwrap()
        };
        // What a policy changed: the same messages, another field after them.
        let sent = |body: &Bytes| {
            let text = std::str::from_utf8(body).unwrap();
            Bytes::from(format!("{},\"x\":1}}", &text[..text.len() - 1]))
        };
        for n in 1..6 {
            let client = body(0, n, 300);
            let found = known.find(&client);
            if n > 1 {
                let found = found.as_ref().expect("the client's previous body");
                assert!(found.known.checked, "request {n}: the check resumes");
                assert_eq!(found.messages, n - 1);
            }
            let env = parse(&client, found.as_ref());
            known.remember(env.scanned().unwrap(), found.as_ref(), true);
            let sent = sent(&client);
            let found = known.find_sent(&sent);
            let env = parse(&sent, found.as_ref());
            known.remember_sent(env.scanned().unwrap(), found.as_ref());
        }
        // One body of each kind.
        assert_eq!(held(&known).0, 2);
    }

    fn held(known: &KnownPrefixes) -> (usize, usize) {
        let store = known.inner.lock().unwrap();
        (store.by_lead.values().map(Vec::len).sum(), store.weight)
    }

    /// A conversation keeps only its latest body, and the store never holds more than its
    /// budget, however many conversations pass.
    #[test]
    fn memory_is_one_body_per_conversation_within_the_budget() {
        const BUDGET: usize = 16 << 20;
        let known = KnownPrefixes::new(true, BUDGET);
        for n in 1..=20 {
            let found = read(&known, body(0, n, 1000));
            assert_eq!(found.map(|m| m.messages), (n > 1).then_some(n - 1));
        }
        assert_eq!(held(&known).0, 1);
        let mut most = 0;
        for conversation in 1..200 {
            read(&known, body(conversation, 2, 1 << 20));
            let (bodies, weight) = held(&known);
            assert!(weight <= BUDGET);
            most = most.max(bodies);
        }
        assert!(
            most >= 4,
            "conversations are kept until the budget is spent"
        );
        // A body over a quarter of the budget is not kept: its next request is read whole.
        let before = held(&known);
        read(&known, body(999, 2, BUDGET / 4));
        assert_eq!(held(&known), before);
        assert!(read(&known, body(999, 3, BUDGET / 4)).is_none());
    }
}
