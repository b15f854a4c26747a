//! A document being edited: its bytes, every edit one byte range replaced, and what each
//! edit replaced, so that a JSON Patch that fails half way is undone without a copy of the
//! document taken before it.

use crate::json::scan::{self, Entry, Span};

pub struct Doc {
    pub bytes: Vec<u8>,
    /// Each edit since the last commit: where its new bytes start, how many there are, and
    /// the bytes they replaced.
    undo: Vec<(usize, usize, Vec<u8>)>,
    /// Bytes the edits have copied or shifted so far: the work they cost, which stays
    /// within a few times the document however many items one edit removes.
    pub moved: usize,
}

/// Ranges removed one by one up to this many; more are cut out in one copy of the rest.
const CUT_ONE_BY_ONE: usize = 4;

impl Doc {
    pub fn new(bytes: Vec<u8>) -> Doc {
        Doc {
            bytes,
            undo: Vec::new(),
            moved: 0,
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
        self.moved += with.len() + (self.bytes.len() - range.end);
        let old = self
            .bytes
            .splice(range.clone(), with.iter().copied())
            .collect();
        self.undo.push((range.start, with.len(), old));
    }

    /// Take out `ranges` (in order, apart): one by one when they are few, else by copying
    /// what lies between them once, so that cutting many items costs one pass.
    pub fn cut(&mut self, ranges: &[Span]) {
        if ranges.len() <= CUT_ONE_BY_ONE {
            for range in ranges.iter().rev() {
                self.replace(range.clone(), b"");
            }
            return;
        }
        let removed: usize = ranges.iter().map(|r| r.len()).sum();
        let mut kept = Vec::with_capacity(self.bytes.len() - removed);
        let mut at = 0;
        for range in ranges {
            kept.extend_from_slice(&self.bytes[at..range.start]);
            at = range.end;
        }
        kept.extend_from_slice(&self.bytes[at..]);
        self.moved += kept.len();
        let old = std::mem::replace(&mut self.bytes, kept);
        self.undo.push((0, self.bytes.len(), old));
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
        let entries = self.entries(object)?;
        let named: Vec<bool> = entries
            .iter()
            .map(|e| scan::key_is(&self.bytes, &e.key, key))
            .collect();
        let any = named.contains(&true);
        self.remove_entries(&entries, &named);
        Some(any)
    }

    /// Leave only the last entry named `key` in the object at `object`.
    pub fn dedupe(&mut self, object: usize, key: &str) -> Option<()> {
        let entries = self.entries(object)?;
        let last = self.last_named(&entries, key);
        let earlier: Vec<bool> = (0..entries.len())
            .map(|i| Some(i) != last && scan::key_is(&self.bytes, &entries[i].key, key))
            .collect();
        self.remove_entries(&entries, &earlier);
        Some(())
    }

    /// Remove the entries of one object that `remove` marks, however many, in one pass: a
    /// body naming a key a million times costs one scan, not one per name.
    pub fn remove_entries(&mut self, entries: &[Entry], remove: &[bool]) {
        let spans: Vec<Span> = entries.iter().map(|e| e.key.start..e.value.end).collect();
        self.cut(&removals(&spans, remove));
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
    let mut remove = vec![false; spans.len()];
    remove[i] = true;
    removals(spans, &remove).remove(0)
}

/// The byte ranges, in order and apart, that remove the items `remove` marks: each run of
/// marked items with the comma after it, or, for a run at the end, with the comma before
/// it; every item when all are marked.
fn removals(spans: &[Span], remove: &[bool]) -> Vec<Span> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < spans.len() {
        if !remove[i] {
            i += 1;
            continue;
        }
        let first = i;
        while i < spans.len() && remove[i] {
            i += 1;
        }
        let last = i - 1;
        out.push(match (spans.get(i), first.checked_sub(1)) {
            (Some(next), _) => spans[first].start..next.start,
            (None, Some(before)) => spans[before].end..spans[last].end,
            (None, None) => spans[first].start..spans[last].end,
        });
    }
    out
}

/// A value's JSON text, as serde_json writes it (no white space).
pub fn json(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    super::write_json(&mut out, value);
    out
}
