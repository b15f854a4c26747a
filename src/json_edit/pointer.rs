//! JSON Pointers (RFC 6901), read as serde_json's `Value::pointer` reads them, followed on
//! a document's bytes.

use std::borrow::Cow;

use super::doc::Doc;
use crate::json::scan::{self, Span};

/// A pointer token with `~1` and `~0` decoded, in that order (so `~01` is `~1`).
pub fn unescape(token: &str) -> Cow<'_, str> {
    match token.contains('~') {
        true => Cow::Owned(token.replace("~1", "/").replace("~0", "~")),
        false => Cow::Borrowed(token),
    }
}

/// `pointer` cut at its last `/`: the parent's pointer and the last token, still escaped.
pub fn split(pointer: &str) -> Option<(&str, &str)> {
    let at = pointer.rfind('/')?;
    Some((&pointer[..at], &pointer[at + 1..]))
}

/// An array index as RFC 6901 writes one: digits, no sign, no leading zero.
pub fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// The span of the value `pointer` names in `doc`, if there is one.
pub fn find(doc: &Doc, pointer: &str) -> Option<Span> {
    if pointer.is_empty() {
        return Some(doc.root());
    }
    let rest = pointer.strip_prefix('/')?;
    let mut at = doc.root();
    for token in rest.split('/') {
        at = child(&doc.bytes, at.start, &unescape(token))?;
    }
    Some(at)
}

/// The value of member `token` of the object at `start` (its last entry of that name), or
/// of element `token` of the array there.
fn child(b: &[u8], start: usize, token: &str) -> Option<Span> {
    match b.get(start)? {
        b'{' => {
            let mut found = None;
            scan::for_each_entry(b, start, |key, value, _| {
                if !key.is_empty() && scan::key_is(b, &key, token) {
                    found = Some(value);
                }
                Ok(())
            })
            .ok()?;
            found
        }
        b'[' => {
            let wanted = index(token)?;
            let mut at = scan::skip_ws(b, start + 1);
            if b.get(at) == Some(&b']') {
                return None;
            }
            let mut i = 0;
            loop {
                let end = scan::value_end(b, at).ok()?;
                if i == wanted {
                    return Some(at..end);
                }
                let next = scan::skip_ws(b, end);
                if b.get(next) != Some(&b',') {
                    return None;
                }
                at = scan::skip_ws(b, next + 1);
                i += 1;
            }
        }
        _ => None,
    }
}
