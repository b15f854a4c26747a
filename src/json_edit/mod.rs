//! Edits of a JSON document made on its bytes: RFC 6902 JSON Patch, RFC 7396 merge patch,
//! and a replacement document spliced over the one it replaces.
//!
//! `before_provider_request` edits (a policy's `[[payload]]`, a hook's answer) run on every
//! request they match, over a body that carries the whole history. Parsing that body into a
//! `serde_json::Value`, cloning it and writing it back costs far more than the edit, and
//! re-serialising moves bytes the provider's cache keys on. Here a pointer is followed with
//! the envelope's span scanner, each edit replaces one byte range, and what no edit touches
//! keeps its bytes: key order, white space and number formatting included. The results are
//! those of the `json-patch` crate on a parse of the same document (`tests.rs` holds that on
//! generated documents and patches); only the bytes differ, where that crate would reorder
//! an object's keys on a removal or re-serialise the whole document.
//!
//! A key named twice in one object reads as its last value, as a parse keeps it; an edit of
//! such a key leaves it named once.

mod doc;
mod equal;
mod merge;
mod patch;
mod pointer;
mod splice;
#[cfg(test)]
mod tests;

pub use equal::equal;
pub use merge::merge;
pub use patch::{patch, PatchError, PatchErrorKind};
pub use splice::splice;

/// Append `value` to `out` as serde_json writes it (no white space).
pub fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // A string, a `Value` or a map of them always serialises into a Vec.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Give the document's root object the member `key` with the JSON text `value` (its last
/// entry's value replaced, or a new entry at the end); `false` when the root is no object.
pub fn set_member(bytes: &mut Vec<u8>, key: &str, value: &[u8]) -> bool {
    let mut doc = doc::Doc::new(std::mem::take(bytes));
    let root = doc.root();
    let set = doc.bytes.get(root.start) == Some(&b'{')
        && doc.set_member(root.start, key, value).is_some();
    *bytes = doc.bytes;
    set
}

/// Remove every member of the document's root object whose name `keep` refuses.
pub fn retain_members(bytes: &mut Vec<u8>, keep: impl Fn(&str) -> bool) {
    let mut doc = doc::Doc::new(std::mem::take(bytes));
    let root = doc.root();
    if doc.bytes.get(root.start) == Some(&b'{') {
        let entries = doc.entries(root.start).unwrap_or_default();
        let remove: Vec<bool> = entries
            .iter()
            .map(|e| crate::json::scan::decode_str(&doc.bytes, &e.key).is_some_and(|k| !keep(&k)))
            .collect();
        doc.remove_entries(&entries, &remove);
    }
    *bytes = doc.bytes;
}
