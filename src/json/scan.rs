//! A small JSON span scanner: finds the byte ranges of values, object entries and array
//! elements without building a document. The envelope keeps these ranges so that untouched
//! elements are copied byte for byte when the payload is compiled back.

use std::ops::Range;

use memchr::memchr;

/// A byte range into the scanned buffer.
pub type Span = Range<usize>;

/// One `"key": value` entry of an object.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key's string literal, quotes included.
    pub key: Span,
    pub value: Span,
}

/// What is wrong with a JSON text, with the byte offset where it was noticed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    pub offset: usize,
    pub what: &'static str,
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.what)
    }
}

fn err<T>(offset: usize, what: &'static str) -> Result<T, ScanError> {
    Err(ScanError { offset, what })
}

pub use super::lex::skip_ws;

/// Scan one value starting at `pos` (no leading whitespace); returns its end.
///
/// Scalars are checked; a nested object or array is skipped by matching brackets outside
/// strings, without checking its inner separators. Each level the envelope takes apart is
/// checked by [`for_each_entry`] / [`for_each_element`]; what lies inside an element is
/// the provider's to validate. This keeps the scan close to memory speed.
pub fn value_end(b: &[u8], pos: usize) -> Result<usize, ScanError> {
    match b.get(pos) {
        None => err(pos, "unexpected end of input"),
        Some(b'"') => string_end(b, pos),
        Some(b'{') | Some(b'[') => container_end(b, pos),
        Some(c) if c.is_ascii_digit() || *c == b'-' => {
            let mut end = pos + 1;
            while end < b.len() && matches!(b[end], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
            {
                end += 1;
            }
            Ok(end)
        }
        Some(_) => {
            for lit in [&b"true"[..], b"false", b"null"] {
                if b[pos..].starts_with(lit) {
                    return Ok(pos + lit.len());
                }
            }
            err(pos, "expected a value")
        }
    }
}

/// The end of the object or array at `pos`: brackets are matched by kind (kept as bits, so
/// nothing is allocated), strings skipped. Nesting deeper than 128 is refused, as serde_json
/// does.
fn container_end(b: &[u8], pos: usize) -> Result<usize, ScanError> {
    let mut kinds: u128 = 0; // bit set = object
    let mut depth = 0u32;
    let mut i = pos;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i = string_end(b, i)?;
                continue;
            }
            open @ (b'{' | b'[') => {
                if depth == 128 {
                    return err(i, "nesting too deep");
                }
                kinds = (kinds << 1) | u128::from(open == b'{');
                depth += 1;
            }
            close @ (b'}' | b']') => {
                let is_object = kinds & 1 == 1;
                if depth == 0 || is_object != (close == b'}') {
                    return err(i, "mismatched bracket");
                }
                kinds >>= 1;
                depth -= 1;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    err(pos, "unterminated object or array")
}

/// The end (one past the closing quote) of the string literal at `pos`. Short strings
/// (keys, types, ids) are walked byte by byte; past the first bytes the search jumps to
/// the next quote and checks it is not escaped, so ordinary escapes (`\n`) cost nothing.
pub fn string_end(b: &[u8], pos: usize) -> Result<usize, ScanError> {
    const SHORT: usize = 24;
    let mut i = pos + 1;
    let short_end = (pos + 1 + SHORT).min(b.len());
    while i < short_end {
        match b[i] {
            b'"' => return Ok(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    loop {
        match memchr(b'"', b.get(i..).unwrap_or(&[])) {
            None => return err(pos, "unterminated string"),
            Some(off) => {
                let q = i + off;
                let backslashes = b[pos + 1..q]
                    .iter()
                    .rev()
                    .take_while(|&&c| c == b'\\')
                    .count();
                if backslashes % 2 == 0 {
                    return Ok(q + 1);
                }
                i = q + 1;
            }
        }
    }
}

/// Visit each entry of the object at `pos` (`f(key, value, object_end_so_far)`); the last
/// call's third argument is meaningless, the return value is the object's end.
pub fn for_each_entry(
    b: &[u8],
    pos: usize,
    mut f: impl FnMut(Span, Span, usize) -> Result<(), ScanError>,
) -> Result<usize, ScanError> {
    if b.get(pos) != Some(&b'{') {
        return err(pos, "expected an object");
    }
    let mut i = skip_ws(b, pos + 1);
    if b.get(i) == Some(&b'}') {
        f(0..0, 0..0, i + 1).ok();
        return Ok(i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return err(i, "expected an object key");
        }
        let key_end = string_end(b, i)?;
        let colon = skip_ws(b, key_end);
        if b.get(colon) != Some(&b':') {
            return err(colon, "expected ':' after an object key");
        }
        let vstart = skip_ws(b, colon + 1);
        let vend = value_end(b, vstart)?;
        let next = skip_ws(b, vend);
        match b.get(next) {
            Some(b',') => {
                f(i..key_end, vstart..vend, next)?;
                i = skip_ws(b, next + 1);
            }
            Some(b'}') => {
                f(i..key_end, vstart..vend, next + 1)?;
                return Ok(next + 1);
            }
            _ => return err(next, "expected ',' or '}' in an object"),
        }
    }
}

/// Visit each element of the array at `pos`; returns the array's end.
pub fn for_each_element(
    b: &[u8],
    pos: usize,
    mut f: impl FnMut(Span, usize) -> Result<(), ScanError>,
) -> Result<usize, ScanError> {
    if b.get(pos) != Some(&b'[') {
        return err(pos, "expected an array");
    }
    let mut i = skip_ws(b, pos + 1);
    if b.get(i) == Some(&b']') {
        f(0..0, i + 1).ok();
        return Ok(i + 1);
    }
    loop {
        let end = value_end(b, i)?;
        let next = skip_ws(b, end);
        match b.get(next) {
            Some(b',') => {
                f(i..end, next)?;
                i = skip_ws(b, next + 1);
            }
            Some(b']') => {
                f(i..end, next + 1)?;
                return Ok(next + 1);
            }
            _ => return err(next, "expected ',' or ']' in an array"),
        }
    }
}

/// Scan the object at `pos`, letting `value(key, start)` scan each value and return its
/// end, so a caller can take apart the values it cares about in the same pass. Returns the
/// entries and the object's end.
pub fn entries_with(
    b: &[u8],
    pos: usize,
    mut value: impl FnMut(&Span, usize) -> Result<usize, ScanError>,
) -> Result<(Vec<Entry>, usize), ScanError> {
    if b.get(pos) != Some(&b'{') {
        return err(pos, "expected an object");
    }
    let i = skip_ws(b, pos + 1);
    if b.get(i) == Some(&b'}') {
        return Ok((Vec::new(), i + 1));
    }
    entries_from(b, Vec::new(), i, &mut value)
}

/// [`entries_with`] of an object whose entries up to the last of `out` are known, that
/// entry's value ending at `end`: the rest of the entries and the object's end.
pub fn entries_with_after(
    b: &[u8],
    out: Vec<Entry>,
    end: usize,
    mut value: impl FnMut(&Span, usize) -> Result<usize, ScanError>,
) -> Result<(Vec<Entry>, usize), ScanError> {
    let next = skip_ws(b, end);
    match b.get(next) {
        Some(b',') => entries_from(b, out, skip_ws(b, next + 1), &mut value),
        Some(b'}') => Ok((out, next + 1)),
        _ => err(next, "expected ',' or '}' in an object"),
    }
}

/// The entries of an object from the key at `i` on, after `out`.
fn entries_from(
    b: &[u8],
    mut out: Vec<Entry>,
    mut i: usize,
    value: &mut impl FnMut(&Span, usize) -> Result<usize, ScanError>,
) -> Result<(Vec<Entry>, usize), ScanError> {
    loop {
        if b.get(i) != Some(&b'"') {
            return err(i, "expected an object key");
        }
        let key = i..string_end(b, i)?;
        let colon = skip_ws(b, key.end);
        if b.get(colon) != Some(&b':') {
            return err(colon, "expected ':' after an object key");
        }
        let vstart = skip_ws(b, colon + 1);
        let vend = value(&key, vstart)?;
        out.push(Entry {
            key,
            value: vstart..vend,
        });
        let next = skip_ws(b, vend);
        match b.get(next) {
            Some(b',') => i = skip_ws(b, next + 1),
            Some(b'}') => return Ok((out, next + 1)),
            _ => return err(next, "expected ',' or '}' in an object"),
        }
    }
}

/// The element spans of the array at `start` and the array's end.
pub fn elements_end(b: &[u8], start: usize) -> Result<(Vec<Span>, usize), ScanError> {
    let mut out = Vec::new();
    let end = for_each_element(b, start, |span, _| {
        if !span.is_empty() {
            out.push(span);
        }
        Ok(())
    })?;
    Ok((out, end))
}

/// [`elements_end`] of an array whose first elements are known (the same bytes as a body
/// scanned before): the scan goes on after the last of them.
pub fn elements_end_after(b: &[u8], known: &[Span]) -> Result<(Vec<Span>, usize), ScanError> {
    let mut out = known.to_vec();
    let Some(mut end) = known.last().map(|s| s.end) else {
        return err(0, "no known element to resume after");
    };
    loop {
        let next = skip_ws(b, end);
        match b.get(next) {
            Some(b',') => {
                let start = skip_ws(b, next + 1);
                end = value_end(b, start)?;
                out.push(start..end);
            }
            Some(b']') => return Ok((out, next + 1)),
            _ => return err(next, "expected ',' or ']' in an array"),
        }
    }
}

/// The entries of the object at `span` (relative to `b`).
pub fn entries(b: &[u8], start: usize) -> Result<Vec<Entry>, ScanError> {
    let mut out = Vec::new();
    for_each_entry(b, start, |key, value, _| {
        if !key.is_empty() {
            out.push(Entry { key, value });
        }
        Ok(())
    })?;
    Ok(out)
}

/// The element spans of the array at `start`.
pub fn elements(b: &[u8], start: usize) -> Result<Vec<Span>, ScanError> {
    let mut out = Vec::new();
    for_each_element(b, start, |span, _| {
        if !span.is_empty() {
            out.push(span);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Whether the key literal at `key` equals `name` (keys with escapes are decoded).
pub fn key_is(b: &[u8], key: &Span, name: &str) -> bool {
    let raw = &b[key.start + 1..key.end - 1];
    if !raw.contains(&b'\\') {
        return raw == name.as_bytes();
    }
    decode_str(b, key).as_deref() == Some(name)
}

/// Decode the string literal at `span`; `None` when it is not a string.
pub fn decode_str(b: &[u8], span: &Span) -> Option<String> {
    let raw = &b[span.clone()];
    if raw.first() != Some(&b'"') {
        return None;
    }
    let inner = &raw[1..raw.len() - 1];
    if !inner.contains(&b'\\') {
        return std::str::from_utf8(inner).ok().map(str::to_owned);
    }
    serde_json::from_slice(raw).ok()
}

/// What stands for the middle of a text read only at its ends: a line `…`. Memory
/// retrieval's query of a long prompt is written the same way.
pub(crate) const ELIDED: &str = "\n…\n";

/// [`decode_str`] of a literal, or of one whose text runs past `4 * ends` bytes (a pasted
/// file) only its first and last `ends` bytes or so, joined by a line `…`: cut where no
/// escape or character is split, the rest never decoded. Where a piece does not decode,
/// the whole literal is.
pub fn decode_str_ends(b: &[u8], span: &Span, ends: usize) -> Option<String> {
    let raw = &b[span.clone()];
    if raw.len() < 2 || raw.len() - 2 <= 4 * ends {
        return decode_str(b, span);
    }
    let inner = &raw[1..raw.len() - 1];
    let head = (0..=ends)
        .rev()
        .find(|&p| token_starts(inner, p))
        .unwrap_or(0);
    let tail = (inner.len() - ends..=inner.len())
        .find(|&p| token_starts(inner, p))
        .unwrap_or(inner.len());
    let piece = |bytes: &[u8]| {
        let mut literal = Vec::with_capacity(bytes.len() + 2);
        literal.push(b'"');
        literal.extend_from_slice(bytes);
        literal.push(b'"');
        decode_str(&literal, &(0..literal.len()))
    };
    match (piece(&inner[..head]), piece(&inner[tail..])) {
        (Some(head), Some(tail)) => Some(format!("{head}{ELIDED}{tail}")),
        _ => decode_str(b, span),
    }
}

/// Whether a character (or an escape) of the string interior `s` starts at `p`: not inside
/// a UTF-8 character, an escape, or a surrogate pair written as two escapes.
fn token_starts(s: &[u8], p: usize) -> bool {
    if p == 0 || p >= s.len() {
        return true;
    }
    if s[p] & 0xC0 == 0x80 {
        return false;
    }
    // `s[k]` is a backslash that starts an escape (an even run of backslashes before it).
    let escape_at = |k: usize| {
        s[k] == b'\\' && s[..k].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 0
    };
    if escape_at(p - 1) {
        return false;
    }
    if (p.saturating_sub(5)..p.saturating_sub(1)).any(|k| escape_at(k) && s[k + 1] == b'u') {
        return false;
    }
    let high_surrogate = |hex: &[u8]| {
        std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u16::from_str_radix(h, 16).ok())
            .is_some_and(|c| (0xD800..0xDC00).contains(&c))
    };
    !(p >= 6
        && escape_at(p - 6)
        && s[p - 5] == b'u'
        && high_surrogate(&s[p - 4..p])
        && s[p..].starts_with(b"\\u"))
}

/// The value span of `name` in the object at `start`.
pub fn field(b: &[u8], start: usize, name: &str) -> Option<Span> {
    let mut found = None;
    for_each_entry(b, start, |key, value, _| {
        if found.is_none() && !key.is_empty() && key_is(b, &key, name) {
            found = Some(value);
        }
        Ok(())
    })
    .ok()?;
    found
}

/// The decoded string value of `name` in the object at `start`.
pub fn str_field(b: &[u8], start: usize, name: &str) -> Option<String> {
    field(b, start, name).and_then(|s| decode_str(b, &s))
}

/// The object at `start` of `b` with the value of `name` replaced by `value` (every other
/// byte kept); `None` when the object has no such field.
pub fn replace_field(b: &[u8], start: usize, name: &str, value: &[u8]) -> Option<Vec<u8>> {
    let span = field(b, start, name)?;
    let mut out = Vec::with_capacity(b.len() + value.len());
    out.extend_from_slice(&b[..span.start]);
    out.extend_from_slice(value);
    out.extend_from_slice(&b[span.end..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long literal read at its ends gives a prefix and a suffix of its text, wherever
    /// the cuts fall among escapes, surrogate pairs and multi-byte characters; a short one
    /// is decoded whole.
    #[test]
    fn a_long_string_is_read_at_its_ends() {
        let unit = r#"é😀 \"q\" \\ \n \u0001 \ud83d\ude00 \u00e9 x"#;
        let literal = format!("\"{}\"", unit.repeat(40));
        let whole: String = serde_json::from_str(&literal).unwrap();
        let b = literal.as_bytes();
        let span = 0..b.len();
        for ends in 1..120 {
            let read = decode_str_ends(b, &span, ends).unwrap();
            let (head, tail) = read.split_once("\n…\n").unwrap();
            assert!(
                whole.starts_with(head) && whole.ends_with(tail),
                "{ends}: {read:?}"
            );
            assert!(
                head.len() <= ends && tail.len() <= ends + 12,
                "{ends}: {read:?}"
            );
        }
        let short = format!("\"{unit}\"");
        assert_eq!(
            decode_str_ends(short.as_bytes(), &(0..short.len()), 100),
            serde_json::from_str(&short).ok()
        );
    }

    #[test]
    fn a_replaced_field_keeps_every_other_byte() {
        let b = br#"{"type":"text", "text" : "old","cache_control":{"type":"ephemeral"}}"#;
        let out = replace_field(b, 0, "text", br#""new""#).unwrap();
        assert_eq!(
            out,
            br#"{"type":"text", "text" : "new","cache_control":{"type":"ephemeral"}}"#
        );
        assert_eq!(replace_field(b, 0, "missing", b"1"), None);
    }

    #[test]
    fn spans_of_entries_and_elements() {
        let text = br#" { "a" : [1, {"b":"x\"y"} ,true] , "c\u0064":null }"#;
        let start = skip_ws(text, 0);
        let es = entries(text, start).unwrap();
        assert_eq!(es.len(), 2);
        assert_eq!(&text[es[0].value.clone()], br#"[1, {"b":"x\"y"} ,true]"#);
        assert!(key_is(text, &es[1].key, "cd"));
        let els = elements(text, es[0].value.start).unwrap();
        assert_eq!(&text[els[1].clone()], br#"{"b":"x\"y"}"#);
        assert_eq!(str_field(text, els[1].start, "b").as_deref(), Some("x\"y"));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [&b"{"[..], b"[1,", b"\"abc", b"\"\\", b"[{]", b"{\"a\":[}}"] {
            assert!(
                value_end(bad, 0).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for bad in [&b"{\"a\" 1}"[..], b"{\"a\":tru}", b"{\"a\":1,}", b"{1:2}"] {
            assert!(
                entries(bad, 0).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(elements(b"[1 2]", 0).is_err());
        // An escaped quote does not end a string; an escaped backslash before a quote does.
        assert_eq!(string_end(br#""a\"b\\" x"#, 0), Ok(8));
    }
}
