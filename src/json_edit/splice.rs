//! A replacement document (a `before_provider_request` hook's `payload`) spliced over the
//! document it replaces: every object member and array element equal in both keeps the
//! original's bytes, so a hook that parses and re-serialises the payload to change one
//! field does not re-serialise the history the provider's cache keys on.

use super::equal::{eq, value_span};
use crate::json::scan::{self, Span};

/// The bytes of `new`, with the bytes of `old` wherever the two agree. Either text that
/// does not scan gives `new` as it is.
pub fn splice(old: &[u8], new: &[u8]) -> Vec<u8> {
    let (Some(o), Some(n)) = (value_span(old), value_span(new)) else {
        return new.to_vec();
    };
    let mut out = Vec::with_capacity(old.len().max(new.len()) + 64);
    out.extend_from_slice(&old[..o.start]);
    value(old, o.clone(), new, n, &mut out);
    out.extend_from_slice(&old[o.end..]);
    out
}

/// Write the value at `ns` of `new`, reusing `old`'s bytes at `os`; whether what was
/// written is `old`'s bytes exactly, which it is whenever the two values are equal.
fn value(old: &[u8], os: Span, new: &[u8], ns: Span, out: &mut Vec<u8>) -> bool {
    if old[os.clone()] == new[ns.clone()] {
        out.extend_from_slice(&old[os]);
        return true;
    }
    let mark = out.len();
    let kept = match (old[os.start], new[ns.start]) {
        (b'{', b'{') => object(old, os.start, new, ns.start, out),
        (b'[', b'[') => array(old, os.start, new, ns.start, out),
        _ => None,
    };
    match kept {
        // Every member or element kept, in its place: the original's bytes, white space
        // between them included.
        Some(true) => {
            out.truncate(mark);
            out.extend_from_slice(&old[os]);
            true
        }
        Some(false) => false,
        None if eq(old, os.clone(), new, ns.clone()) => {
            out.truncate(mark);
            out.extend_from_slice(&old[os]);
            true
        }
        None => {
            out.truncate(mark);
            out.extend_from_slice(&new[ns]);
            false
        }
    }
}

/// The object of `new` at `n`, members matched to `old`'s by name; `None` when either does
/// not scan or names a key twice (its bytes are then taken whole).
fn object(old: &[u8], o: usize, new: &[u8], n: usize, out: &mut Vec<u8>) -> Option<bool> {
    let (before, close) = scan::entries_with(old, o, |_, at| scan::value_end(old, at)).ok()?;
    let after = scan::entries(new, n).ok()?;
    if !named_once(old, &before) || !named_once(new, &after) {
        return None;
    }
    let spans: Vec<Span> = before.iter().map(|e| e.key.start..e.value.end).collect();
    // The old members by name, so that an object of many keys is matched in one pass.
    let by_name: std::collections::HashMap<String, usize> = before
        .iter()
        .enumerate()
        .filter_map(|(j, e)| Some((scan::decode_str(old, &e.key)?, j)))
        .collect();
    let mut layout = Layout::new(old, o, &spans, close);
    let mut kept = before.len() == after.len();
    out.push(b'{');
    for entry in &after {
        let key = scan::decode_str(new, &entry.key)?;
        let from = by_name.get(&key).copied();
        layout.separator(from, out);
        match from {
            Some(j) => {
                let was = &before[j];
                out.extend_from_slice(&old[was.key.start..was.value.start]);
                // Equal members in another order still make an equal object, which then
                // keeps the client's order.
                kept &= value(old, was.value.clone(), new, entry.value.clone(), out);
            }
            None => {
                out.extend_from_slice(&new[entry.key.start..entry.value.end]);
                kept = false;
            }
        }
    }
    layout.closing(out);
    out.push(b'}');
    Some(kept)
}

fn named_once(b: &[u8], entries: &[scan::Entry]) -> bool {
    let mut keys: Vec<Option<String>> = entries
        .iter()
        .map(|e| scan::decode_str(b, &e.key))
        .collect();
    keys.sort();
    keys.windows(2).all(|w| w[0] != w[1])
}

/// The array of `new` at `n`: the elements equal at its start and at its end keep `old`'s
/// bytes; between them, an array of the same length keeps what it can of each element.
fn array(old: &[u8], o: usize, new: &[u8], n: usize, out: &mut Vec<u8>) -> Option<bool> {
    let (before, close) = scan::elements_end(old, o).ok()?;
    let after = scan::elements(new, n).ok()?;
    let same = |i: usize, j: usize| eq(old, before[i].clone(), new, after[j].clone());
    let head = (0..before.len().min(after.len()))
        .take_while(|&i| same(i, i))
        .count();
    let tail = (0..(before.len() - head).min(after.len() - head))
        .take_while(|&k| same(before.len() - 1 - k, after.len() - 1 - k))
        .count();
    let mut layout = Layout::new(old, o, &before, close);
    let mut kept = before.len() == after.len();
    out.push(b'[');
    for (i, element) in after.iter().enumerate() {
        let in_head_or_tail = i < head || i >= after.len() - tail;
        let from = if i < head {
            Some(i)
        } else if i >= after.len() - tail {
            Some(before.len() - (after.len() - i))
        } else if before.len() == after.len() {
            Some(i)
        } else {
            None
        };
        layout.separator(from, out);
        match from {
            Some(j) if in_head_or_tail => out.extend_from_slice(&old[before[j].clone()]),
            Some(j) => kept &= value(old, before[j].clone(), new, element.clone(), out),
            None => out.extend_from_slice(&new[element.clone()]),
        }
    }
    layout.closing(out);
    out.push(b']');
    Some(kept)
}

/// The white space and commas of `old`'s container, written again wherever the new one
/// keeps its items in the same order: after the opening bracket, between two items that
/// were neighbours, and before the closing one.
struct Layout<'a> {
    old: &'a [u8],
    open: usize,
    items: &'a [Span],
    close: usize,
    /// The old item written last, if the last item written was one.
    last: Option<usize>,
    written: usize,
}

impl<'a> Layout<'a> {
    fn new(old: &'a [u8], open: usize, items: &'a [Span], close: usize) -> Layout<'a> {
        Layout {
            old,
            open,
            items,
            close,
            last: None,
            written: 0,
        }
    }

    /// Before an item that is `old`'s item `from` (or a new one).
    fn separator(&mut self, from: Option<usize>, out: &mut Vec<u8>) {
        match (self.written, from, self.last) {
            (0, Some(0), _) => {
                out.extend_from_slice(&self.old[self.open + 1..self.items[0].start]);
            }
            (0, _, _) => {}
            (_, Some(j), Some(k)) if j == k + 1 => {
                out.extend_from_slice(&self.old[self.items[k].end..self.items[j].start]);
            }
            _ => out.push(b','),
        }
        self.last = from;
        self.written += 1;
    }

    /// Before the closing bracket.
    fn closing(&self, out: &mut Vec<u8>) {
        if let (Some(k), Some(last)) = (self.last, self.items.len().checked_sub(1)) {
            if k == last {
                out.extend_from_slice(&self.old[self.items[k].end..self.close - 1]);
            }
        }
    }
}
