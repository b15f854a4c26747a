//! Whether two JSON texts are the same value, as serde_json's `Value` equality has it
//! (objects whatever their key order, a key named twice as its last value, numbers as
//! serde_json reads them, strings after their escapes), read from the bytes.

use std::borrow::Cow;

use crate::json::scan::{self, Entry, Span};

/// Whether the JSON texts `a` and `b` (one value each, white space around it allowed) are
/// equal values. A text that does not scan is equal only to the same bytes.
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    let (sa, sb) = (value_span(a), value_span(b));
    match (sa, sb) {
        (Some(sa), Some(sb)) => eq(a, sa, b, sb),
        _ => a == b,
    }
}

/// The span of a text's one value, `None` unless the text is that value and white space.
pub(super) fn value_span(b: &[u8]) -> Option<Span> {
    let start = scan::skip_ws(b, 0);
    let end = scan::value_end(b, start).ok()?;
    (scan::skip_ws(b, end) == b.len()).then_some(start..end)
}

/// Whether the value at `sa` of `a` equals the value at `sb` of `b`.
pub(super) fn eq(a: &[u8], sa: Span, b: &[u8], sb: Span) -> bool {
    let (x, y) = (&a[sa.clone()], &b[sb.clone()]);
    if x == y || same_tokens(x, y) {
        return true;
    }
    match (x.first(), y.first()) {
        (Some(b'{'), Some(b'{')) => objects_eq(a, sa, b, sb),
        (Some(b'['), Some(b'[')) => {
            let (Ok(ea), Ok(eb)) = (scan::elements(a, sa.start), scan::elements(b, sb.start))
            else {
                return false;
            };
            ea.len() == eb.len() && ea.into_iter().zip(eb).all(|(i, j)| eq(a, i, b, j))
        }
        (Some(b'"'), Some(b'"')) => match (scan::decode_str(a, &sa), scan::decode_str(b, &sb)) {
            (Some(s), Some(t)) => s == t,
            _ => false,
        },
        (Some(c), Some(d)) if number(*c) && number(*d) => {
            match (
                serde_json::from_slice::<serde_json::Number>(x),
                serde_json::from_slice::<serde_json::Number>(y),
            ) {
                (Ok(m), Ok(n)) => m == n,
                _ => false,
            }
        }
        // `true`, `false` and `null` are equal only as the same bytes.
        _ => false,
    }
}

/// Whether two JSON texts are the same tokens, white space between them aside: the same
/// value written with other spacing (a hook's `json.dumps`, a pretty printer), told without
/// taking either apart.
fn same_tokens(x: &[u8], y: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    loop {
        i = scan::skip_ws(x, i);
        j = scan::skip_ws(y, j);
        match (x.get(i), y.get(j)) {
            (None, None) => return true,
            (Some(b'"'), Some(b'"')) => {
                let (Ok(m), Ok(n)) = (scan::string_end(x, i), scan::string_end(y, j)) else {
                    return false;
                };
                if x[i..m] != y[j..n] {
                    return false;
                }
                (i, j) = (m, n);
            }
            (Some(c), Some(d)) if c == d => (i, j) = (i + 1, j + 1),
            _ => return false,
        }
    }
}

fn number(c: u8) -> bool {
    c == b'-' || c.is_ascii_digit()
}

fn objects_eq(a: &[u8], sa: Span, b: &[u8], sb: Span) -> bool {
    let (Some(ka), Some(kb)) = (keyed(a, sa.start), keyed(b, sb.start)) else {
        // A key named twice: the values a parse keeps decide.
        return as_values(&a[sa], &b[sb]);
    };
    ka.len() == kb.len()
        && ka
            .iter()
            .zip(&kb)
            .all(|((k, i), (l, j))| k == l && eq(a, i.clone(), b, j.clone()))
}

/// The object's entries by decoded key, sorted; `None` when a key is named twice or the
/// object does not scan.
fn keyed(b: &[u8], start: usize) -> Option<Vec<(Cow<'_, [u8]>, Span)>> {
    let entries: Vec<Entry> = scan::entries(b, start).ok()?;
    let mut keyed: Vec<(Cow<'_, [u8]>, Span)> = entries
        .into_iter()
        .map(|e| (key_bytes(b, &e.key), e.value))
        .collect();
    keyed.sort_by(|x, y| x.0.cmp(&y.0));
    match keyed.windows(2).any(|w| w[0].0 == w[1].0) {
        true => None,
        false => Some(keyed),
    }
}

/// A key literal's text: its bytes between the quotes, decoded when it has an escape.
fn key_bytes<'a>(b: &'a [u8], key: &Span) -> Cow<'a, [u8]> {
    let inner = &b[key.start + 1..key.end - 1];
    match inner.contains(&b'\\') {
        false => Cow::Borrowed(inner),
        true => Cow::Owned(scan::decode_str(b, key).unwrap_or_default().into_bytes()),
    }
}

fn as_values(x: &[u8], y: &[u8]) -> bool {
    match (
        serde_json::from_slice::<serde_json::Value>(x),
        serde_json::from_slice::<serde_json::Value>(y),
    ) {
        (Ok(v), Ok(w)) => v == w,
        _ => false,
    }
}
