//! The parse side: split a request body into the envelope in one scan, recording byte
//! ranges instead of building a document. Which keys hold what is the wire's
//! ([`Wire::split_prompt`]); the scan, and the pieces the wires build the envelope from, are
//! here.

use bytes::Bytes;

use super::{Element, Envelope, Meta, OrigArray, OrigFacts, SystemForm, SystemPart, Wire};
use crate::error::ApiError;
use crate::json::check::{self as json_check, Gathered};
use crate::json::scan::{self, Entry, Span};
use crate::memo::{self, Memo};

/// The name of the n-th part the client's own system prompt arrives as.
pub(crate) fn base_part_name(n: usize) -> String {
    if n == 0 {
        "base".into()
    } else {
        format!("base.{n}")
    }
}

/// What is known of a body this one repeats the first history messages of (the kept body
/// of its conversation, `crate::known_prefix`): the same bytes at the same offsets, so
/// their reading is taken as it was.
pub struct Resume<'a> {
    /// The history array's key (quotes included) and where its value (`[`) starts.
    pub key: &'a Span,
    pub array_start: usize,
    /// Top-level entries before the history array.
    pub before: &'a [Entry],
    /// The element spans of the split arrays (the tools) among them, by where each starts.
    pub arrays_before: &'a [(usize, Vec<Span>)],
    /// The repeated history elements (at least one).
    pub elems: &'a [Span],
    /// What follows the kept body's history array, when known whole, and its bytes.
    pub tail: Option<(&'a Tail, &'a [u8])>,
    /// What the kept body's elements are and hold, as far as read.
    pub facts: &'a OrigFacts,
}

/// What follows a body's history array: its top-level entries and the element spans of
/// the split arrays among them (the tools), at offsets from the array's end. Agents send
/// their tools and system prompt after the history, the same bytes on every request: a body
/// that ends with the same bytes after its history takes them as read.
#[derive(Debug)]
pub struct Tail {
    /// Where it starts: just after the history array's `]`.
    pub at: usize,
    pub entries: Vec<Entry>,
    /// By where each array starts.
    pub arrays: Vec<(usize, Vec<Span>)>,
    /// The most containers open where a value started in it, as the body check counts
    /// them (0 when it was not counted: the scanner, which refuses deeper nesting, read it).
    pub deepest: usize,
}

impl Tail {
    /// The entries after the history of `entries`, the history's value ending at `at`, with
    /// the spans `spans_at` gives of the arrays among them; `None` when an array the
    /// envelope splits (named one of `tools_keys`) has none.
    pub fn of(
        body: &[u8],
        at: usize,
        after: &[Entry],
        tools_keys: &[&[u8]],
        spans_at: impl Fn(usize) -> Option<Vec<Span>>,
        deepest: usize,
    ) -> Option<Tail> {
        let shift = |s: &Span| s.start - at..s.end - at;
        let mut arrays = Vec::new();
        for entry in after {
            let key = &body[entry.key.start + 1..entry.key.end - 1];
            // A key with escapes is no key the body check gathers.
            if body.get(entry.value.start) == Some(&b'[') && tools_keys.contains(&key) {
                let spans = spans_at(entry.value.start)?;
                arrays.push((entry.value.start - at, spans.iter().map(shift).collect()));
            }
        }
        Some(Tail {
            at,
            entries: after
                .iter()
                .map(|e| Entry {
                    key: shift(&e.key),
                    value: shift(&e.value),
                })
                .collect(),
            arrays,
            deepest,
        })
    }

    /// Its entries at `at` in another body.
    pub fn entries_at(&self, at: usize) -> impl Iterator<Item = Entry> + '_ {
        let shift = move |s: &Span| s.start + at..s.end + at;
        self.entries.iter().map(move |e| Entry {
            key: shift(&e.key),
            value: shift(&e.value),
        })
    }

    /// The element spans of its array starting at `start` in another body whose tail is at
    /// `at`.
    pub fn spans_at(&self, at: usize, start: usize) -> Option<Vec<Span>> {
        let (_, spans) = self.arrays.iter().find(|(s, _)| *s + at == start)?;
        Some(spans.iter().map(|s| s.start + at..s.end + at).collect())
    }
}

/// What a parsed body's history looks like, for the kept bodies of `crate::known_prefix`.
pub struct Scanned<'a> {
    pub facts: OrigFacts,
    pub body: &'a Bytes,
    pub key: Span,
    pub array_start: usize,
    /// Just after the history array's `]`.
    pub array_end: usize,
    pub before: &'a [Entry],
    pub elems: &'a [Span],
    /// The top-level entries after the history.
    pub after: &'a [Entry],
    /// The other arrays split (the tools): where each starts and its elements.
    pub arrays: Vec<(usize, &'a [Span])>,
    /// The most containers open where a value started, as the body check counts them; 0
    /// when the scanner read the body (it refuses deeper nesting).
    pub deepest: usize,
}

/// The top level of a body being parsed: its entries, and the element spans of the arrays
/// split on the way (the history and the tools), for a wire's [`Wire::split_prompt`].
pub struct Top<'a> {
    b: &'a [u8],
    entries: &'a [Entry],
    arrays: &'a [(String, Vec<Span>)],
}

impl Top<'_> {
    /// The value span of a top-level key.
    pub fn find(&self, name: &str) -> Option<Span> {
        self.entries
            .iter()
            .find(|e| scan::key_is(self.b, &e.key, name))
            .map(|e| e.value.clone())
    }

    /// A split array's span and element spans (none when absent or `null`); an error when
    /// the key holds anything but an array.
    pub fn array(&self, name: &str) -> Result<OrigArray, ApiError> {
        let Some(span) = self.find(name) else {
            return Ok(OrigArray::default());
        };
        if &self.b[span.clone()] == b"null" {
            return Ok(OrigArray::default());
        }
        let elems = self
            .arrays
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| ApiError::invalid(format!("{name} must be an array")))?;
        Ok(OrigArray {
            span: Some(span),
            elems,
        })
    }
}

/// The keys whose arrays are split into elements during the top-level scan.
fn is_split_key(wire: &dyn Wire, key: &str) -> bool {
    key == wire.history_key() || key == wire.tools_key()
}

/// Parse a body; with `known`, its history array's first elements are taken from the
/// remembered body it repeats (see [`crate::known_prefix`]) instead of being scanned again;
/// with `gathered`, the top-level entries and the elements of the history and the tools are
/// the ones the body check found, and only an array it did not read is scanned.
pub(crate) fn parse(
    wire: &'static dyn Wire,
    body: Bytes,
    known: Option<&Resume<'_>>,
    gathered: Option<&Gathered>,
) -> Result<Envelope, ApiError> {
    let b: &[u8] = &body;
    let start = scan::skip_ws(b, 0);
    if b.get(start) != Some(&b'{') {
        return Err(ApiError::invalid("the request body must be a JSON object"));
    }
    let mut arrays: Vec<(String, Vec<Span>)> = Vec::new();
    let resumed = known.filter(|m| split_key(b, wire, m.key).is_some());
    let (top, end) = match (gathered.and_then(Gathered::as_scanned), resumed) {
        (Some((fields, history)), _) => from_check(b, wire, fields, history, &mut arrays),
        (None, Some(m)) => scan_resumed(b, wire, m, &mut arrays),
        (None, None) => scan::entries_with(b, start, |key, vstart| {
            split_value(b, wire, key, vstart, &mut arrays)
        }),
    }
    .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    if scan::skip_ws(b, end) != b.len() {
        return Err(ApiError::invalid(
            "the request body has trailing data after the JSON object",
        ));
    }
    let view = Top {
        b,
        entries: &top,
        arrays: &arrays,
    };
    let model = match view.find("model") {
        Some(span) => {
            scan::decode_str(b, &span).ok_or_else(|| ApiError::invalid("model must be a string"))?
        }
        None => String::new(),
    };
    let tools_orig = view.array(wire.tools_key())?;
    let tools = elements_of(&tools_orig, 0);
    let mut env = Envelope {
        wire,
        body: body.clone(),
        top: top.clone(),
        top_span: start..end,
        system_form: SystemForm::Absent,
        system: Vec::new(),
        system_dirty: false,
        tools_orig,
        tools,
        tools_dirty: false,
        messages_orig: OrigArray::default(),
        input_text: None,
        cached: Vec::new(),
        uncached: Vec::new(),
        messages_dirty: false,
        option_edits: Vec::new(),
        meta: Meta::new(wire.provider(), wire.endpoint(), model),
        orig_facts: known
            .map(|m| OrigFacts::after(m.facts, m.elems.len()))
            .unwrap_or_default(),
    };
    wire.split_prompt(&mut env, &view)?;
    Ok(env)
}

/// The end of the top-level value at `vstart`, named `key`; an array the envelope splits is
/// split into `arrays` on the way.
fn split_value(
    b: &[u8],
    wire: &dyn Wire,
    key: &Span,
    vstart: usize,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<usize, scan::ScanError> {
    if let Some(name) = split_array(b, wire, key, vstart) {
        let (elems, end) = scan::elements_end(b, vstart)?;
        arrays.push((name, elems));
        return Ok(end);
    }
    scan::value_end(b, vstart)
}

/// What [`scan::entries_with`] gives, for a body that repeats the kept body of `m` up to
/// the end of its last repeated history message: the entries before the history are the
/// kept body's (the same bytes at the same offsets), the history is scanned from the end of
/// the repeated messages, and what follows it is the kept body's when the body ends with
/// the same bytes, else scanned.
fn scan_resumed(
    b: &[u8],
    wire: &dyn Wire,
    m: &Resume<'_>,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<(Vec<scan::Entry>, usize), scan::ScanError> {
    let known = m;
    let mut top = known.before.to_vec();
    for entry in known.before {
        let kept = || {
            let (_, elems) = known
                .arrays_before
                .iter()
                .find(|(s, _)| *s == entry.value.start)?;
            Some(elems.clone())
        };
        split_entry(b, wire, entry, kept, arrays)?;
    }
    let (elems, end) = scan::elements_end_after(b, m.elems)?;
    let history = scan::Entry {
        key: known.key.clone(),
        value: known.array_start..end,
    };
    split_entry(b, wire, &history, || Some(elems), arrays)?;
    top.push(history);
    match known.tail {
        Some((tail, bytes)) if b.get(end..) == Some(bytes) => {
            for entry in tail.entries_at(end) {
                let kept = || tail.spans_at(end, entry.value.start);
                split_entry(b, wire, &entry, kept, arrays)?;
                top.push(entry);
            }
            // The kept body ended with one object and blanks after it.
            Ok((top, object_end(b)))
        }
        _ => scan::entries_with_after(b, top, end, |key, vstart| {
            split_value(b, wire, key, vstart, arrays)
        }),
    }
}

/// The end of the one object a body that passed holds: before the blanks that end it.
fn object_end(b: &[u8]) -> usize {
    b.len()
        - b.iter()
            .rev()
            .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
            .count()
}

/// Split `entry`'s value into `arrays` when it is an array the envelope splits: into the
/// element spans `known` gives, when it knows them, else into those scanned.
fn split_entry(
    b: &[u8],
    wire: &dyn Wire,
    entry: &scan::Entry,
    known: impl FnOnce() -> Option<Vec<Span>>,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<(), scan::ScanError> {
    if let Some(name) = split_array(b, wire, &entry.key, entry.value.start) {
        let elems = match known() {
            Some(elems) => elems,
            None => scan::elements_end(b, entry.value.start)?.0,
        };
        arrays.push((name, elems));
    }
    Ok(())
}

/// The name of the top-level key `key` when its value, at `vstart`, is an array the
/// envelope splits into elements.
fn split_array(b: &[u8], wire: &dyn Wire, key: &Span, vstart: usize) -> Option<String> {
    (b.get(vstart) == Some(&b'[')).then(|| split_key(b, wire, key))?
}

/// The name of a top-level key whose array is split into elements, if it is one.
fn split_key(b: &[u8], wire: &dyn Wire, key: &Span) -> Option<String> {
    scan::decode_str(b, key).filter(|k| is_split_key(wire, k))
}

/// The top-level entries, and the elements of the arrays split, of a body the check passed
/// whole, from what it gathered: the history's and the tools' elements as the check found
/// them (when it read them: a resumed check does not read the fields before the history),
/// any other array split by a scan of its own. Gives what [`scan::entries_with`] gives for
/// that body.
fn from_check(
    b: &[u8],
    wire: &dyn Wire,
    fields: &[json_check::Field],
    history: &json_check::Elements<'_>,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<(Vec<scan::Entry>, usize), scan::ScanError> {
    let top: Vec<scan::Entry> = fields
        .iter()
        .map(|f| scan::Entry {
            key: f.key.start - 1..f.key.end + 1,
            value: f.value.clone(),
        })
        .collect();
    for entry in &top {
        let known = || history.spans_at(entry.value.start).map(<[Span]>::to_vec);
        split_entry(b, wire, entry, known, arrays)?;
    }
    // The check passed one object with only blanks around it.
    Ok((top, object_end(b)))
}

/// The elements of a client's array from `skip` on, each the client's own.
pub(crate) fn elements_of(arr: &OrigArray, skip: usize) -> Vec<Element> {
    arr.elems
        .iter()
        .enumerate()
        .skip(skip)
        .map(|(i, s)| Element::orig(i, s.clone()))
        .collect()
}

/// An array whose elements must be objects (`{name}[i] must be an object` otherwise).
pub(crate) fn check_objects(b: &[u8], arr: &OrigArray, name: &str) -> Result<(), ApiError> {
    match arr.elems.iter().position(|s| b[s.start] != b'{') {
        Some(i) => Err(ApiError::invalid(format!("{name}[{i}] must be an object"))),
        None => Ok(()),
    }
}

/// A system prompt sent as one string at `span` (`null`: none), the part `base`.
pub(crate) fn text_system(env: &mut Envelope, span: Span, field: &str) -> Result<(), ApiError> {
    if &env.body[span.clone()] == b"null" {
        return Ok(());
    }
    let text = system_text(&env.body, &span)
        .ok_or_else(|| ApiError::invalid(format!("{field} must be a string")))?;
    env.system.push(SystemPart::new(
        base_part_name(0),
        text,
        Some(Element::orig(0, span.clone())),
    ));
    env.system_form = SystemForm::Text;
    Ok(())
}

/// The decoded text of a system prompt's JSON string at `span`. Agents resend the same
/// system prompt, often tens of KB with escapes on every line, on every request: a long one
/// is remembered by its bytes (up to [`REMEMBERED_TEXT`] each, a few at a time).
pub(crate) fn system_text(b: &[u8], span: &Span) -> Option<String> {
    static TEXTS: Memo<Option<String>> = Memo::new(32);
    if !(1024..=REMEMBERED_TEXT).contains(&span.len()) {
        return scan::decode_str(b, span);
    }
    let raw = &b[span.clone()];
    TEXTS.get_or_insert_with(memo::key(b"system text", raw), || scan::decode_str(b, span))
}

/// The longest system text remembered.
const REMEMBERED_TEXT: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// A system text read from the memo is the one decoding gives, for short and long texts,
    /// with and without escapes, and for values that are not strings.
    #[test]
    fn a_remembered_system_text_is_its_decoding() {
        let long = r#"line \"quoted\" \u00e9 \\ tab\t\n"#.repeat(200);
        let plain = "x".repeat(5000);
        let huge = r"y\n".repeat(40_000);
        for raw in [
            r#""short""#.to_string(),
            format!(r#""{long}""#),
            format!(r#""{plain}""#),
            // The same length as the one before, other bytes.
            format!(r#""{}""#, "z".repeat(5000)),
            format!(r#""{huge}""#),
            format!(r#"["{plain}"]"#),
            "null".to_string(),
        ] {
            let b = raw.as_bytes();
            let span = 0..b.len();
            for _ in 0..2 {
                assert_eq!(
                    system_text(b, &span),
                    scan::decode_str(b, &span),
                    "{}",
                    &raw[..20.min(raw.len())]
                );
            }
        }
    }
}
