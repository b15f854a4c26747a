//! RFC 7396 merge patch on a document's bytes: a member the patch names `null` goes, an
//! object merges into the member's value, anything else replaces it; a member the patch
//! does not name keeps its bytes.

use serde_json::Value;

use super::doc::{json, Doc};
use crate::json::scan::Span;

/// Merge `patch` into the document `bytes`.
pub fn merge(bytes: &mut Vec<u8>, patch: &Value) {
    let mut doc = Doc::new(std::mem::take(bytes));
    let root = doc.root();
    merge_at(&mut doc, root, patch);
    doc.commit();
    *bytes = doc.bytes;
}

fn merge_at(doc: &mut Doc, at: Span, patch: &Value) {
    let Value::Object(members) = patch else {
        doc.replace(at, &json(patch));
        return;
    };
    if doc.bytes.get(at.start) != Some(&b'{') {
        doc.replace(at, &json(&fresh(patch)));
        return;
    }
    let object = at.start;
    for (key, value) in members {
        if value.is_null() {
            let _ = doc.remove_member(object, key);
            continue;
        }
        let Some(mut entries) = doc.entries(object) else {
            return;
        };
        if doc.named(&entries, key) > 1 {
            let _ = doc.dedupe(object, key);
            let Some(deduped) = doc.entries(object) else {
                return;
            };
            entries = deduped;
        }
        match doc.last_named(&entries, key) {
            Some(i) => merge_at(doc, entries[i].value.clone(), value),
            None => {
                let mut member = json(&Value::String(key.clone()));
                member.push(b':');
                member.extend_from_slice(&json(&fresh(value)));
                doc.append_member(object, &entries, &member);
            }
        }
    }
}

/// What `patch` merged into nothing is: itself, its objects without their `null` members.
fn fresh(patch: &Value) -> Value {
    let mut out = Value::Null;
    json_patch::merge(&mut out, patch);
    out
}
