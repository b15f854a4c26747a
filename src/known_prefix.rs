//! Incremental reading of agents' bodies: what cachet already knows of a recent body's
//! history, up to a message boundary, so that the next request of the same conversation is
//! checked and scanned only from where it stops matching.
//!
//! Agents resend their whole history on every request, and each request is the previous
//! one plus a small tail. Once a body has been scanned, [`KnownPrefixes`] remembers, for
//! its history array (`messages`, or Responses `input`): the top-level entries before it,
//! the span of each message, and a hash of the body up to the end of each message. A new
//! body is matched against the bodies with the same bytes up to the end of its first
//! message (found by a light scan of the body's start): the longest run of
//! messages whose prefix hashes agree is taken as read. The body check resumes there in the
//! state the full check would have reached (`json_check::check_resumed`) and the envelope
//! scan continues after the known elements (`scan::elements_end_after`); only what follows
//! is read. A body that extends nothing remembered takes the full path, and is counted.
//!
//! Prefixes are compared by a 128-bit xxh3 hash seeded per process ([`crate::memo`]): two
//! different prefixes sharing one is taken as impossible, as for every memo. Memory is
//! bounded: past [`BUDGET_BYTES`] of remembered spans and hashes the store starts over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::envelope::scan::{self, Entry, Span};
use crate::envelope::Envelope;
use crate::session::PrefixHashes;

/// Bodies remembered under one first message: a conversation's forks share it.
const PER_LEAD: usize = 8;

/// Memory the store may hold (spans, hashes and entries) before it starts over.
pub const BUDGET_BYTES: usize = 16 << 20;

/// What is known of one body, up to the end of its last history message.
#[derive(Debug)]
pub struct Known {
    /// The history array's key (quotes included) and where its value (`[`) starts.
    pub key: Span,
    pub array_start: usize,
    /// Top-level entries before the history array.
    pub before: Vec<Entry>,
    /// The history's element spans, and the hash of the body up to each one's end (a
    /// chain: each link hashes the previous link and the bytes since).
    pub elems: Vec<Span>,
    hashes: Vec<u128>,
    /// The body passed the full body check (`json_check`), so its prefixes are valid JSON.
    pub checked: bool,
    /// The prefix hashes of its history (the session layer's anchors), once computed, and
    /// the element the history starts at (after leading system messages).
    history: OnceLock<(usize, PrefixHashes)>,
}

impl Known {
    fn weight(&self) -> usize {
        std::mem::size_of::<Known>()
            + self.before.len() * std::mem::size_of::<Entry>()
            // A span, a hash link, and the anchors' message key and rolling hash.
            + self.elems.len() * (std::mem::size_of::<Span>() + std::mem::size_of::<u128>() + 64)
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

/// What a parsed body's history looks like, for [`KnownPrefixes::remember`].
pub struct Scanned<'a> {
    pub body: &'a [u8],
    pub key: Span,
    pub array_start: usize,
    pub before: &'a [Entry],
    pub elems: &'a [Span],
}

/// Recently read bodies, by their first bytes.
#[derive(Default)]
pub struct KnownPrefixes {
    enabled: bool,
    inner: Mutex<Store>,
}

#[derive(Default)]
struct Store {
    by_lead: HashMap<u128, Vec<Arc<Known>>>,
    weight: usize,
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

/// The end of a body's first history message and the first link of its hash chain: the
/// key of the bodies it may extend (those with the same bytes up to there). Found by a
/// light scan of the top-level keys up to the history array and of its first element.
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
        if HISTORY_KEYS.contains(&name) && body.get(value) == Some(&b'[') {
            let first = scan::skip_ws(body, value + 1);
            if body.get(first) == Some(&b']') {
                return None;
            }
            let end = scan::value_end(body, first).ok()?;
            return Some((end, link(None, &body[..end])));
        }
        let next = scan::skip_ws(body, scan::value_end(body, value).ok()?);
        (body.get(next) == Some(&b',')).then_some(())?;
        at = scan::skip_ws(body, next + 1);
    }
}

/// Top-level keys whose array is a history (`messages`; Responses `input`).
const HISTORY_KEYS: [&[u8]; 2] = [b"messages", b"input"];

impl KnownPrefixes {
    /// A store; a disabled one remembers nothing and every body takes the full path.
    pub fn new(enabled: bool) -> Self {
        KnownPrefixes {
            enabled,
            inner: Mutex::default(),
        }
    }

    /// The remembered body `body` extends furthest, if any.
    pub fn find(&self, body: &[u8]) -> Option<PrefixMatch> {
        if !self.enabled {
            return None;
        }
        let first = first_link(body)?;
        let candidates = self.inner.lock().ok()?.by_lead.get(&first.1).cloned()?;
        candidates
            .into_iter()
            .filter_map(|known| matched(known, body, first))
            .max_by_key(|m| m.messages)
    }

    /// Remember a body whose history array was scanned (with the match it was read
    /// with, whose hashes it reuses); `checked` says the whole body passed the body check.
    pub fn remember(
        &self,
        scanned: Scanned<'_>,
        found: Option<&PrefixMatch>,
        checked: bool,
    ) -> Option<Arc<Known>> {
        if !self.enabled || scanned.elems.is_empty() {
            return None;
        }
        let reused = found.filter(|m| {
            m.known.key == scanned.key
                && m.known.array_start == scanned.array_start
                && scanned.elems.starts_with(m.elems())
        });
        let mut hashes = match reused {
            Some(m) => m.known.hashes[..m.messages].to_vec(),
            None => Vec::with_capacity(scanned.elems.len()),
        };
        let mut at = hashes
            .len()
            .checked_sub(1)
            .map_or(0, |i| scanned.elems[i].end);
        for span in &scanned.elems[hashes.len()..] {
            let bytes = scanned.body.get(at..span.end)?;
            hashes.push(link(hashes.last().copied(), bytes));
            at = span.end;
        }
        let known = Arc::new(Known {
            key: scanned.key,
            array_start: scanned.array_start,
            before: scanned.before.to_vec(),
            elems: scanned.elems.to_vec(),
            hashes,
            checked,
            history: OnceLock::new(),
        });
        let mut store = self.inner.lock().ok()?;
        let weight = known.weight();
        if store.weight + weight > BUDGET_BYTES {
            *store = Store::default();
        }
        let lead = known.hashes[0];
        let list = store.by_lead.entry(lead).or_default();
        // The body this one extends is superseded by it.
        let mut freed = 0;
        list.retain(|k| {
            let superseded = k.key == known.key
                && k.array_start == known.array_start
                && known.hashes.starts_with(&k.hashes);
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

/// How far `body` repeats `known`: the longest run of its messages whose prefix hashes
/// agree, or `None` when not even the first (`first`: the body's own) does.
fn matched(known: Arc<Known>, body: &[u8], first: (usize, u128)) -> Option<PrefixMatch> {
    // The first message is the lead both were found by.
    if known.elems.first()?.end != first.0 || known.hashes.first() != Some(&first.1) {
        return None;
    }
    let mut at = first.0;
    let mut messages = 1;
    let mut previous = Some(first.1);
    for (span, hash) in known.elems.iter().zip(&known.hashes).skip(1) {
        let Some(bytes) = body.get(at..span.end) else {
            break;
        };
        if link(previous, bytes) != *hash {
            break;
        }
        previous = Some(*hash);
        at = span.end;
        messages += 1;
    }
    Some(PrefixMatch { known, messages })
}

/// The next link of a body's prefix-hash chain: the previous link and the bytes since.
fn link(previous: Option<u128>, bytes: &[u8]) -> u128 {
    let mut hasher = crate::memo::hasher();
    if let Some(previous) = previous {
        hasher.update(&previous.to_le_bytes());
    }
    hasher.update(bytes);
    hasher.digest128()
}
