//! A fast JSON validity check for request bodies, with the top-level fields it passed.
//!
//! Every generation request is checked before it is forwarded, so that malformed JSON is
//! answered with a 400 instead of reaching the provider. A serde_json pass over the body
//! costs as much as the whole forwarding hop on large agent histories, which are almost all
//! string content. This check validates UTF-8 once (std's ASCII fast path), then walks the
//! grammar with string contents skipped 16 bytes at a time. It accepts exactly what
//! serde_json accepts when it skips a value (escapes are checked for form, `\u` code points
//! are not), plus valid UTF-8 throughout. Callers fall back to serde_json for the wording of
//! an error.

use std::ops::Range;

pub use super::lex::Invalid;
use super::lex::{literal, number, skip_string, skip_ws};

/// One top-level field of an object body: the key's raw bytes between the quotes (escapes
/// not decoded) and the byte range of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub key: Range<usize>,
    pub value: Range<usize>,
}

#[derive(Clone, Copy, PartialEq)]
enum Container {
    Object,
    Array,
}

/// Check that `body` is one JSON value surrounded by optional whitespace, and call
/// `on_field` for each field of it when it is an object.
pub fn check(body: &[u8], on_field: impl FnMut(Field)) -> Result<(), Invalid> {
    check_gathering(body, None, on_field)
}

/// [`check`], gathering the element spans of one top-level array field into `elements`.
pub fn check_gathering(
    body: &[u8],
    elements: Option<&mut Elements<'_>>,
    on_field: impl FnMut(Field),
) -> Result<(), Invalid> {
    let start = State {
        pos: skip_ws(body, 0),
        stack: Vec::with_capacity(16),
        top_key: None,
        value_read: false,
        stop_at_top: false,
    };
    run(body, start, elements, on_field)
}

/// The element spans of one top-level array field of an object body, gathered by the check
/// as it passes them (so that a body's history is not scanned a second time): the first
/// field whose key is one of `keys` and whose value is an array.
#[derive(Debug)]
pub struct Elements<'k> {
    keys: &'k [&'k [u8]],
    /// The field's key (between the quotes) and where its array starts, once found.
    pub array: Option<(Range<usize>, usize)>,
    /// Each element's span, in order.
    pub spans: Vec<Range<usize>>,
    /// Inside the array.
    reading: bool,
    /// Where the element being read starts.
    start: Option<usize>,
    /// The most containers open where a value started, anywhere the check read (the
    /// envelope's scanner refuses nesting past 128).
    pub deepest: usize,
    /// The elements of another top-level array, gathered beside these (see [`Self::and_first`]).
    also: Option<Box<Elements<'k>>>,
}

impl<'k> Elements<'k> {
    /// Gather the elements of the first array-valued field named one of `keys`.
    pub fn of_first(keys: &'k [&'k [u8]]) -> Self {
        Elements {
            keys,
            array: None,
            spans: Vec::new(),
            reading: false,
            start: None,
            deepest: 0,
            also: None,
        }
    }

    /// Gather, besides, the elements of the first array-valued field named one of `keys`
    /// (another field than this one's).
    pub fn and_first(mut self, keys: &'k [&'k [u8]]) -> Self {
        self.also = Some(Box::new(Elements::of_first(keys)));
        self
    }

    /// The element spans gathered of the array that starts at `start`, if it is one of
    /// the arrays gathered.
    pub fn spans_at(&self, start: usize) -> Option<&[Range<usize>]> {
        match &self.array {
            Some((_, at)) if *at == start => Some(&self.spans),
            _ => self.also.as_deref()?.spans_at(start),
        }
    }

    /// A value starts at `pos` with `depth` containers open.
    #[inline]
    fn value_starts(&mut self, depth: usize, pos: usize) {
        self.deepest = self.deepest.max(depth);
        if depth == 2 {
            if self.reading {
                self.start = Some(pos);
            } else if let Some(also) = self.also.as_deref_mut() {
                also.value_starts(depth, pos);
            }
        }
    }

    /// An array opens at `pos` with `depth` containers open, as the value of `top_key`.
    #[inline]
    fn array_opens(&mut self, b: &[u8], depth: usize, top_key: &Option<(Range<usize>, usize)>) {
        if depth != 1 {
            return;
        }
        if let (None, Some((key, start))) = (&self.array, top_key) {
            if self.keys.contains(&&b[key.clone()]) {
                self.array = Some((key.clone(), *start));
                self.reading = true;
                return;
            }
        }
        if let Some(also) = self.also.as_deref_mut() {
            also.array_opens(b, depth, top_key);
        }
    }

    /// A top-level array taken as read at `start`, the value of `key`, with its elements at
    /// `spans` shifted by `shift`: gathered as [`Self::array_opens`] and the elements' ends
    /// would have gathered it.
    fn known_array(
        &mut self,
        b: &[u8],
        key: Range<usize>,
        start: usize,
        spans: &[Range<usize>],
        shift: usize,
    ) {
        if self.array.is_none() && self.keys.contains(&&b[key.clone()]) {
            self.array = Some((key, start));
            self.spans = spans
                .iter()
                .map(|s| s.start + shift..s.end + shift)
                .collect();
            return;
        }
        if let Some(also) = self.also.as_deref_mut() {
            also.known_array(b, key, start, spans, shift);
        }
    }

    /// A value ended at `pos` with `depth` containers open.
    #[inline]
    fn value_ends(&mut self, depth: usize, pos: usize) {
        if !self.reading {
            if let Some(also) = self.also.as_deref_mut() {
                also.value_ends(depth, pos);
            }
            return;
        }
        match depth {
            2 => {
                if let Some(start) = self.start.take() {
                    self.spans.push(start..pos);
                }
            }
            1 => self.reading = false,
            _ => {}
        }
    }
}

/// Where a known prefix of an object body ends: just after an element of the array that is
/// the value of a top-level field.
pub struct Resume<'a> {
    /// The end of the element (the last byte read).
    pub pos: usize,
    /// The array's elements known up to `pos`, which the gathered ones start with.
    pub elems: &'a [Range<usize>],
    /// The top-level fields before the array's, in order.
    pub fields_before: &'a [Field],
    /// The element spans of gathered arrays among `fields_before`, by where each starts.
    pub arrays_before: &'a [(usize, Vec<Range<usize>>)],
    /// The array's field: its key (between the quotes) and where its value starts.
    pub array_key: Range<usize>,
    pub array_start: usize,
    /// What followed the array in the checked body, taken as read when the array ends just
    /// before the same bytes.
    pub tail: Option<KnownTail<'a>>,
}

/// The bytes that followed the array in a body the check passed, from just after its `]` to
/// the end of the body, and what the check found in them. Agents send their tools and
/// system prompt after the history, the same bytes on every request.
pub struct KnownTail<'a> {
    pub bytes: &'a [u8],
    /// The top-level fields in them, offsets from the start of `bytes`.
    pub fields: &'a [Field],
    /// The element spans of the gathered arrays among those fields, by where the array
    /// starts (offsets from the start of `bytes`).
    pub arrays: &'a [(usize, Vec<Range<usize>>)],
    /// The most containers open where a value started in them.
    pub deepest: usize,
}

/// [`check`] of a body whose bytes up to `resume.pos` are known to be a prefix the check
/// accepts (they repeat a checked body's): the check goes on from the state it would have
/// reached there, and reports the same fields.
/// `elements`, when given, gathers the array's elements after `resume.pos` (when it names
/// the array's key).
pub fn check_resumed(
    body: &[u8],
    resume: &Resume<'_>,
    mut elements: Option<&mut Elements<'_>>,
    mut on_field: impl FnMut(Field),
) -> Result<(), Invalid> {
    replay_fields(
        body,
        resume.fields_before,
        resume.arrays_before,
        0,
        elements.as_deref_mut(),
        &mut on_field,
    );
    if let Some(e) = elements.as_deref_mut() {
        let top_key = Some((resume.array_key.clone(), resume.array_start));
        e.array_opens(body, 1, &top_key);
    }
    let state = State {
        pos: resume.pos,
        stack: vec![Container::Object, Container::Array],
        top_key: Some((resume.array_key.clone(), resume.array_start)),
        value_read: true,
        stop_at_top: false,
    };
    run_resumed(body, state, resume.tail.as_ref(), elements, on_field)
}

/// [`run`] from inside the array, up to its end; then the known tail when the body ends with
/// its bytes, else the rest of the body.
fn run_resumed(
    body: &[u8],
    state: State,
    tail: Option<&KnownTail<'_>>,
    mut elements: Option<&mut Elements<'_>>,
    mut on_field: impl FnMut(Field),
) -> Result<(), Invalid> {
    let Some(tail) = tail else {
        return run(body, state, elements, on_field);
    };
    // The check stops where the array ends, back in the top-level object.
    let state = State {
        stop_at_top: true,
        ..state
    };
    let at = match run_until(body, state, elements.as_deref_mut(), &mut on_field)? {
        Ended::Stopped(state) if body.get(state.pos..) == Some(tail.bytes) => state.pos,
        Ended::Stopped(state) => return run(body, state, elements, on_field),
        Ended::Whole => return Ok(()),
    };
    // The same bytes in the same state: the check would pass them again, and find the same
    // fields. (An array it would gather that the tail has no spans for is left to whoever
    // reads the gathered arrays: they scan an array they were not given.)
    if let Some(e) = elements.as_deref_mut() {
        e.deepest = e.deepest.max(tail.deepest);
    }
    replay_fields(body, tail.fields, tail.arrays, at, elements, &mut on_field);
    Ok(())
}

/// Report fields taken as read, at `shift` from their offsets, and gather the arrays among
/// them whose element spans are known, as the check passing them would have.
fn replay_fields(
    body: &[u8],
    fields: &[Field],
    arrays: &[(usize, Vec<Range<usize>>)],
    shift: usize,
    mut elements: Option<&mut Elements<'_>>,
    on_field: &mut impl FnMut(Field),
) {
    let at = |r: &Range<usize>| r.start + shift..r.end + shift;
    for field in fields {
        let (key, value) = (at(&field.key), at(&field.value));
        if let Some(e) = elements.as_deref_mut() {
            let spans = arrays.iter().find(|(s, _)| *s == field.value.start);
            if let Some((_, spans)) = spans {
                e.known_array(body, key.clone(), value.start, spans, shift);
            }
        }
        on_field(Field { key, value });
    }
}

/// The check's state between two bytes.
struct State {
    pos: usize,
    stack: Vec<Container>,
    /// The key of the top-level field whose value is being read, and where the value starts.
    top_key: Option<(Range<usize>, usize)>,
    /// A value has just ended at `pos`.
    value_read: bool,
    /// Stop when a value of the top-level object has ended (see [`run_until`]).
    stop_at_top: bool,
}

/// How [`run_until`] ended.
enum Ended {
    /// The body was read to its end and passed.
    Whole,
    /// A value of the top-level object ended (its field reported): the state to go on from.
    Stopped(State),
}

fn run(
    body: &[u8],
    state: State,
    elements: Option<&mut Elements<'_>>,
    mut on_field: impl FnMut(Field),
) -> Result<(), Invalid> {
    let state = State {
        stop_at_top: false,
        ..state
    };
    run_until(body, state, elements, &mut on_field).map(|_| ())
}

fn run_until(
    body: &[u8],
    state: State,
    mut elements: Option<&mut Elements<'_>>,
    on_field: &mut impl FnMut(Field),
) -> Result<Ended, Invalid> {
    let b = body;
    let err = |offset: usize| Err(Invalid { offset });
    let State {
        mut pos,
        mut stack,
        mut top_key,
        mut value_read,
        stop_at_top,
    } = state;

    'value: loop {
        // A value starts at `pos`, unless the check resumes just after one.
        if !std::mem::take(&mut value_read) {
            if let Some(e) = elements.as_deref_mut() {
                e.value_starts(stack.len(), pos);
            }
            match b.get(pos) {
                Some(b'{') => {
                    pos = skip_ws(b, pos + 1);
                    if b.get(pos) == Some(&b'}') {
                        pos += 1;
                    } else {
                        stack.push(Container::Object);
                        pos = key(b, pos, stack.len() == 1, &mut top_key)?;
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    if let Some(e) = elements.as_deref_mut() {
                        e.array_opens(b, stack.len(), &top_key);
                    }
                    pos = skip_ws(b, pos + 1);
                    if b.get(pos) == Some(&b']') {
                        pos += 1;
                    } else {
                        stack.push(Container::Array);
                        continue 'value;
                    }
                }
                Some(b'"') => pos = skip_string(b, pos + 1)?,
                Some(b't') => pos = literal(b, pos, b"true")?,
                Some(b'f') => pos = literal(b, pos, b"false")?,
                Some(b'n') => pos = literal(b, pos, b"null")?,
                Some(b'-' | b'0'..=b'9') => pos = number(b, pos)?,
                _ => return err(pos),
            }
        }

        // A value ended at `pos`: what may follow depends on the enclosing container.
        loop {
            if let Some(e) = elements.as_deref_mut() {
                e.value_ends(stack.len(), pos);
            }
            if stack.len() == 1 {
                if let Some((key, value_start)) = top_key.take() {
                    on_field(Field {
                        key,
                        value: value_start..pos,
                    });
                }
                if stop_at_top {
                    return Ok(Ended::Stopped(State {
                        pos,
                        stack,
                        top_key: None,
                        value_read: true,
                        stop_at_top: false,
                    }));
                }
            }
            pos = skip_ws(b, pos);
            match (stack.last(), b.get(pos)) {
                (None, None) => return Ok(Ended::Whole),
                (None, Some(_)) => return err(pos),
                (Some(Container::Object), Some(b',')) => {
                    pos = key(b, skip_ws(b, pos + 1), stack.len() == 1, &mut top_key)?;
                    continue 'value;
                }
                (Some(Container::Array), Some(b',')) => {
                    pos = skip_ws(b, pos + 1);
                    continue 'value;
                }
                (Some(Container::Object), Some(b'}')) | (Some(Container::Array), Some(b']')) => {
                    stack.pop();
                    pos += 1;
                }
                _ => return err(pos),
            }
        }
    }
}

/// An object key, the colon and the whitespace after it; returns where the value starts.
fn key(
    b: &[u8],
    pos: usize,
    top_level: bool,
    top_key: &mut Option<(Range<usize>, usize)>,
) -> Result<usize, Invalid> {
    if b.get(pos) != Some(&b'"') {
        return Err(Invalid { offset: pos });
    }
    let end = skip_string(b, pos + 1)?;
    let colon = skip_ws(b, end);
    if b.get(colon) != Some(&b':') {
        return Err(Invalid { offset: colon });
    }
    let value = skip_ws(b, colon + 1);
    if top_level {
        *top_key = Some((pos + 1..end - 1, value));
    }
    Ok(value)
}

/// What the body check gathers of a body as it passes it: every top-level field, and the
/// element spans of the history array and of the tools. The envelope is split from them
/// without a second scan (by a policy before forwarding, or by monitoring after the
/// response), and a body no envelope reads (no policy, monitoring off) is kept from them.
pub struct Gathered {
    pub fields: Vec<Field>,
    pub elements: Elements<'static>,
    /// The check's fast path ran to its end (serde_json's fallback gathers nothing).
    pub complete: bool,
}

impl Gathered {
    /// Ready to gather a body whose history array is named one of `history_keys`, and
    /// its tools one of `tools_keys`.
    pub fn new(
        history_keys: &'static [&'static [u8]],
        tools_keys: &'static [&'static [u8]],
    ) -> Self {
        Gathered {
            fields: Vec::new(),
            elements: Elements::of_first(history_keys).and_first(tools_keys),
            complete: false,
        }
    }

    /// What the check gathered, when it stands for the envelope scanner's reading of the
    /// same body: the check's fast path ran to its end, and nothing nests as deep as the
    /// scanner refuses (past 128 levels, which the check accepts), so that such a body is
    /// still read, and refused, by the scanner.
    pub fn as_scanned(&self) -> Option<(&[Field], &Elements<'static>)> {
        const SCANNER_DEPTH: usize = 128;
        (self.complete && self.elements.deepest <= SCANNER_DEPTH)
            .then_some((&self.fields, &self.elements))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check gathers the spans the envelope's scanner finds, of the first array-valued
    /// field named, from the start and resumed after any element.
    #[test]
    fn gathered_elements_are_the_scanners() {
        let keys: &[&[u8]] = &[b"messages", b"input"];
        let bodies: &[&str] = &[
            r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b"}]}]}"#,
            r#" { "input" : "text", "messages" : [ 1 , "two" , [3, [4]] , {"a":{"b":[]}} , null ] , "x": [5] } "#,
            r#"{"tools":[{"n":1}],"messages":[],"input":[{"type":"message"},true]}"#,
            r#"{"messages":{"not":"an array"},"input":[[],{}]}"#,
            r#"{"messages":[{"role":"user"}],"tools":[{"name":"a","s":{"t":[1,[2]]}}, {"name":"b"}],"tools":[3],"x":[4]}"#,
            r#"{"tools":"none","messages":[1,2],"tools":[{"n":[]}]}"#,
        ];
        for body in bodies {
            let b = body.as_bytes();
            let mut e = Elements::of_first(keys).and_first(&[b"tools"]);
            let mut fields = Vec::new();
            check_gathering(b, Some(&mut e), |f| fields.push(f)).unwrap();
            let (key, start) = e.array.clone().expect(body);
            assert!(keys.contains(&&b[key.clone()]), "{body}");
            assert_eq!(b[start], b'[');
            let scanned = crate::json::scan::elements(b, start).unwrap();
            assert_eq!(e.spans, scanned, "{body}");
            assert_eq!(e.spans_at(start), Some(&scanned[..]));
            // The other array gathered beside the history: the first named `tools`.
            let tools = fields
                .iter()
                .find(|f| &b[f.key.clone()] == b"tools" && b[f.value.start] == b'[');
            for f in fields.iter().filter(|f| b[f.value.start] == b'[') {
                let gathered = e.spans_at(f.value.start);
                match tools {
                    Some(t) if t == f => {
                        let scanned = crate::json::scan::elements(b, f.value.start).unwrap();
                        assert_eq!(gathered, Some(&scanned[..]), "{body}: tools");
                    }
                    _ if f.value.start == start => {}
                    _ => assert_eq!(gathered, None, "{body}: not gathered"),
                }
            }
            let at = fields.iter().position(|f| f.key == key).unwrap();
            // What the check found after the array, as a kept body's tail.
            let array_end = fields[at].value.end;
            let rel = |r: &Range<usize>| r.start - array_end..r.end - array_end;
            let tail_fields: Vec<Field> = fields[at + 1..]
                .iter()
                .map(|f| Field {
                    key: rel(&f.key),
                    value: rel(&f.value),
                })
                .collect();
            let tail_arrays: Vec<(usize, Vec<Range<usize>>)> = fields[at + 1..]
                .iter()
                .filter_map(|f| Some((f.value.start - array_end, e.spans_at(f.value.start)?)))
                .map(|(s, spans)| (s, spans.iter().map(rel).collect()))
                .collect();
            let tail = || KnownTail {
                bytes: &b[array_end..],
                fields: &tail_fields,
                arrays: &tail_arrays,
                deepest: e.deepest,
            };
            for known in 1..=scanned.len() {
                for with_tail in [false, true] {
                    let resume = Resume {
                        pos: scanned[known - 1].end,
                        elems: &scanned[..known],
                        fields_before: &fields[..at],
                        arrays_before: &[],
                        array_key: key.clone(),
                        array_start: start,
                        tail: with_tail.then(tail),
                    };
                    let mut resumed = Elements::of_first(keys).and_first(&[b"tools"]);
                    let mut again = Vec::new();
                    check_resumed(b, &resume, Some(&mut resumed), |f| again.push(f)).unwrap();
                    assert_eq!(resumed.spans, scanned[known..], "{body} after {known}");
                    assert_eq!(again, fields, "{body} after {known}");
                    // The tools after the array are gathered, read or taken as read.
                    for f in fields[at + 1..].iter().filter(|f| b[f.value.start] == b'[') {
                        assert_eq!(
                            resumed.spans_at(f.value.start),
                            e.spans_at(f.value.start),
                            "{body} after {known}, tail {with_tail}"
                        );
                    }
                    assert!(resumed.deepest <= e.deepest);
                }
            }
        }
    }

    /// A resumed check takes the bytes after the array as read when they are the kept
    /// body's, and reads them when they are not: a tail passed off as checked (here it is
    /// not JSON) is not looked at, and the same bytes one byte longer are.
    #[test]
    fn a_known_tail_is_taken_as_read_only_when_the_body_ends_with_it() {
        let body = br#"{"messages":[{"a":1},{"b":2}],"tools":[{"n":1},{"n":2}],"x":tru}"#;
        let array_end = 29;
        assert_eq!(&body[array_end - 1..array_end + 1], b"],");
        // Offsets from the array's end.
        let fields = [
            Field {
                key: 2..7,
                value: 9..26,
            },
            Field {
                key: 28..29,
                value: 31..34,
            },
        ];
        let arrays = [(9usize, vec![10..17, 18..25])];
        let tail = KnownTail {
            bytes: &body[array_end..],
            fields: &fields,
            arrays: &arrays,
            deepest: 2,
        };
        let resume = |tail| Resume {
            pos: 20,
            elems: &[],
            fields_before: &[],
            arrays_before: &[],
            array_key: 2..10,
            array_start: 12,
            tail,
        };
        let mut e = Elements::of_first(&[b"messages"]).and_first(&[b"tools"]);
        let mut seen = Vec::new();
        check_resumed(body, &resume(Some(tail)), Some(&mut e), |f| seen.push(f)).unwrap();
        assert_eq!(e.spans, vec![21..28]);
        assert_eq!(e.spans_at(38), Some(&[39..46, 47..54][..]));
        let at = |r: &Range<usize>| r.start + array_end..r.end + array_end;
        assert_eq!(
            seen[1..],
            [
                Field {
                    key: at(&fields[0].key),
                    value: at(&fields[0].value)
                },
                Field {
                    key: at(&fields[1].key),
                    value: at(&fields[1].value)
                }
            ]
        );
        // Without the tail, or with a body that does not end with it, the bytes are read.
        assert!(check_resumed(body, &resume(None), None, |_| {}).is_err());
        let mut longer = body.to_vec();
        longer.push(b' ');
        let tail = KnownTail {
            bytes: &body[array_end..],
            fields: &fields,
            arrays: &arrays,
            deepest: 2,
        };
        assert!(check_resumed(&longer, &resume(Some(tail)), None, |_| {}).is_err());
    }

    fn valid(s: &str) -> bool {
        check(s.as_bytes(), |_| {}).is_ok()
    }

    #[test]
    fn accepts_and_refuses_what_serde_json_does() {
        let cases = [
            "{}",
            " [] ",
            "0",
            "-0.5e+10",
            "1E5",
            "\"a\\u00e9\\n\"",
            "{\"a\":[1,true,false,null,{\"b\":\"\\\"\"}]}",
            "{\"a\" : 1 , \"b\" :\t[ ] }\n",
            "\"é漢\"",
            "",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "[1,]",
            "[1 2]",
            "01",
            "1.",
            "1e",
            "-",
            "tru",
            "truex",
            "nul",
            "\"a",
            "\"\\x\"",
            "\"\\u12G4\"",
            "\"\\u12\"",
            "\"tab\there\"",
            "{} {}",
            "{\"a\":1}x",
            "[\"\\ud800\"]",
        ];
        for case in cases {
            let serde = serde_json::from_str::<serde::de::IgnoredAny>(case).is_ok();
            assert_eq!(valid(case), serde, "{case:?}");
        }
    }

    #[test]
    fn reports_top_level_fields_with_their_value_spans() {
        let body = br#"{"model": "m", "messages":[{"x":{"model":1}}], "n" :-1.5 }"#;
        let mut fields = Vec::new();
        check(body, |f| fields.push(f)).unwrap();
        let text: Vec<(&str, &str)> = fields
            .iter()
            .map(|f| {
                (
                    std::str::from_utf8(&body[f.key.clone()]).unwrap(),
                    std::str::from_utf8(&body[f.value.clone()]).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            text,
            [
                ("model", "\"m\""),
                ("messages", "[{\"x\":{\"model\":1}}]"),
                ("n", "-1.5")
            ]
        );
    }

    #[test]
    fn invalid_utf8_and_control_characters_are_refused_where_they_are() {
        let mut body = b"{\"a\":\"xxxxxxxxxxxx".to_vec();
        body.push(0xff);
        body.extend_from_slice(b"\"}");
        assert_eq!(check(&body, |_| {}), Err(Invalid { offset: 18 }));
        assert_eq!(
            check(b"[\"0123456789\x01\"]", |_| {}),
            Err(Invalid { offset: 12 })
        );
    }
}
