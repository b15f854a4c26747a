//! A document being edited: its bytes, every edit one byte range replaced, and what each
//! edit replaced, so that a JSON Patch that fails half way is undone without a copy of the
//! document taken before it.

use crate::envelope::scan::{self, Entry, Span};

pub struct Doc {
    pub bytes: Vec<u8>,
    /// Each edit since the last commit: where its new bytes start, how many there are, and
    /// the bytes they replaced.
    undo: Vec<(usize, usize, Vec<u8>)>,
}

impl Doc {
    pub fn new(bytes: Vec<u8>) -> Doc {
        Doc {
            bytes,
            undo: Vec::new(),
        }
    }

    /// The span of the document's one value: its bytes without the white space around it.
    pub fn root(&self) -> Span {
        let b = &self.bytes;
        let start = scan::skip_ws(b, 0);
        let mut end = b.len();
        while end > start && matches!(b[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
            end -= 1;
        }
        start..end
    }

    /// Replace the bytes of `range` with `with`.
    pub fn replace(&mut self, range: Span, with: &[u8]) {
        let old = self
            .bytes
            .splice(range.clone(), with.iter().copied())
            .collect();
        self.undo.push((range.start, with.len(), old));
    }

    /// Keep every edit made so far.
    pub fn commit(&mut self) {
        self.undo.clear();
    }

    /// Undo every edit since the last commit, latest first.
    pub fn rollback(&mut self) {
        while let Some((at, len, old)) = self.undo.pop() {
            self.bytes.splice(at..at + len, old);
        }
    }

    pub fn entries(&self, object: usize) -> Option<Vec<Entry>> {
        scan::entries(&self.bytes, object).ok()
    }

    pub fn elements(&self, array: usize) -> Option<Vec<Span>> {
        scan::elements(&self.bytes, array).ok()
    }

    /// The index among `entries` of the last one named `key`.
    pub fn last_named(&self, entries: &[Entry], key: &str) -> Option<usize> {
        entries
            .iter()
            .rposition(|e| scan::key_is(&self.bytes, &e.key, key))
    }

    /// Give `key` of the object at `object` the value `value`: the value of its last
    /// entry replaced (earlier entries of the same name removed), or a new entry at the end.
    pub fn set_member(&mut self, object: usize, key: &str, value: &[u8]) -> Option<()> {
        let entries = self.entries(object)?;
        match self.last_named(&entries, key) {
            Some(i) => {
                let twice = self.named(&entries, key) > 1;
                self.replace(entries[i].value.clone(), value);
                match twice {
                    true => self.dedupe(object, key),
                    false => Some(()),
                }
            }
            None => {
                let mut member = serde_json::to_vec(key).ok()?;
                member.push(b':');
                member.extend_from_slice(value);
                self.append_member(object, &entries, &member);
                Some(())
            }
        }
    }

    /// Add the member bytes `"key":value` at the end of the object at `object`.
    pub fn append_member(&mut self, object: usize, entries: &[Entry], member: &[u8]) {
        match entries.last() {
            Some(last) => {
                let mut with = Vec::with_capacity(member.len() + 1);
                with.push(b',');
                with.extend_from_slice(member);
                self.replace(last.value.end..last.value.end, &with);
            }
            None => self.replace(object + 1..object + 1, member),
        }
    }

    /// How many of `entries` are named `key`.
    pub fn named(&self, entries: &[Entry], key: &str) -> usize {
        entries
            .iter()
            .filter(|e| scan::key_is(&self.bytes, &e.key, key))
            .count()
    }

    /// Remove every entry named `key` from the object at `object`; whether there was one.
    pub fn remove_member(&mut self, object: usize, key: &str) -> Option<bool> {
        let mut removed = false;
        loop {
            let entries = self.entries(object)?;
            let Some(i) = self.last_named(&entries, key) else {
                return Some(removed);
            };
            let more = self.named(&entries, key) > 1;
            let spans: Vec<Span> = entries.iter().map(|e| e.key.start..e.value.end).collect();
            self.replace(removal(&spans, i), b"");
            removed = true;
            if !more {
                return Some(true);
            }
        }
    }

    /// Leave only the last entry named `key` in the object at `object`.
    pub fn dedupe(&mut self, object: usize, key: &str) -> Option<()> {
        loop {
            let entries = self.entries(object)?;
            let named: Vec<usize> = (0..entries.len())
                .filter(|&i| scan::key_is(&self.bytes, &entries[i].key, key))
                .collect();
            if named.len() < 2 {
                return Some(());
            }
            let spans: Vec<Span> = entries.iter().map(|e| e.key.start..e.value.end).collect();
            // The first is never the object's last entry, so its removal keeps the comma
            // before the entry that follows it.
            self.replace(removal(&spans, named[0]), b"");
        }
    }

    /// Insert `value` as element `i` of the array at `array` (`i` = its length: at the end).
    pub fn insert_element(&mut self, array: usize, elements: &[Span], i: usize, value: &[u8]) {
        let mut with = Vec::with_capacity(value.len() + 1);
        match (elements.get(i), elements.last()) {
            (Some(at), _) => {
                with.extend_from_slice(value);
                with.push(b',');
                self.replace(at.start..at.start, &with);
            }
            (None, Some(last)) => {
                with.push(b',');
                with.extend_from_slice(value);
                self.replace(last.end..last.end, &with);
            }
            (None, None) => self.replace(array + 1..array + 1, value),
        }
    }

    /// Remove element `i` of `elements`.
    pub fn remove_element(&mut self, elements: &[Span], i: usize) {
        self.replace(removal(elements, i), b"");
    }
}

/// The bytes to take out to remove item `i` of a container's items (`spans`, each from the
/// start of an entry's key or an element to the end of its value): the item and the comma
/// after it, or, for the last of several, the comma before it.
fn removal(spans: &[Span], i: usize) -> Span {
    match (i.checked_sub(1), spans.get(i + 1)) {
        (_, Some(next)) => spans[i].start..next.start,
        (Some(before), None) => spans[before].end..spans[i].end,
        (None, None) => spans[i].clone(),
    }
}

/// A value's JSON text, as serde_json writes it (no white space).
pub fn json(value: &serde_json::Value) -> Vec<u8> {
    // Writing a `Value` into a Vec cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}
