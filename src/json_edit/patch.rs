//! RFC 6902 JSON Patch on a document's bytes, with the `json-patch` crate's rules: the same
//! pointers resolve, the same operations fail with the same kind, and a patch that fails
//! leaves the document as it was.

use json_patch::PatchOperation;

use super::doc::{json, Doc};
use super::pointer::{find, index, split, unescape};

/// Why an operation of a patch failed (the `json-patch` crate's kinds and wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchErrorKind {
    TestFailed,
    InvalidFromPointer,
    InvalidPointer,
    CannotMoveInsideItself,
}

impl std::fmt::Display for PatchErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PatchErrorKind::TestFailed => "value did not match",
            PatchErrorKind::InvalidFromPointer => "\"from\" path is invalid",
            PatchErrorKind::InvalidPointer => "path is invalid",
            PatchErrorKind::CannotMoveInsideItself => "cannot move the value inside itself",
        })
    }
}

/// The operation of a patch that failed, its path and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError {
    pub operation: usize,
    pub path: String,
    pub kind: PatchErrorKind,
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "operation '/{}' failed at path '{}': {}",
            self.operation, self.path, self.kind
        )
    }
}

impl std::error::Error for PatchError {}

use PatchErrorKind::*;

/// Apply `ops` in order to the document `bytes`; on failure the document is left as it was.
pub fn patch(bytes: &mut Vec<u8>, ops: &[PatchOperation]) -> Result<(), PatchError> {
    let mut doc = Doc::new(std::mem::take(bytes));
    let result = apply_to(&mut doc, ops);
    *bytes = doc.bytes;
    result
}

/// [`patch`] on a document being edited.
pub(super) fn apply_to(doc: &mut Doc, ops: &[PatchOperation]) -> Result<(), PatchError> {
    let result = ops.iter().enumerate().try_for_each(|(i, op)| {
        apply(doc, op).map_err(|kind| PatchError {
            operation: i,
            path: op.path().as_str().to_string(),
            kind,
        })
    });
    match result {
        Ok(()) => doc.commit(),
        Err(_) => doc.rollback(),
    }
    result
}

fn apply(doc: &mut Doc, op: &PatchOperation) -> Result<(), PatchErrorKind> {
    match op {
        PatchOperation::Add(op) => add(doc, op.path.as_str(), &json(&op.value)),
        PatchOperation::Remove(op) => remove(doc, op.path.as_str()),
        PatchOperation::Replace(op) => replace(doc, op.path.as_str(), &json(&op.value)),
        PatchOperation::Move(op) => {
            let (from, path) = (op.from.as_str(), op.path.as_str());
            if path.starts_with(from) && path[from.len()..].starts_with('/') {
                return Err(CannotMoveInsideItself);
            }
            let value = find(doc, from)
                .map(|at| doc.bytes[at].to_vec())
                .ok_or(InvalidFromPointer)?;
            remove(doc, from).map_err(|_| InvalidFromPointer)?;
            add(doc, path, &value)
        }
        PatchOperation::Copy(op) => {
            let value = find(doc, op.from.as_str())
                .map(|at| doc.bytes[at].to_vec())
                .ok_or(InvalidFromPointer)?;
            add(doc, op.path.as_str(), &value)
        }
        PatchOperation::Test(op) => {
            let at = find(doc, op.path.as_str()).ok_or(InvalidPointer)?;
            match super::equal(&doc.bytes[at], &json(&op.value)) {
                true => Ok(()),
                false => Err(TestFailed),
            }
        }
    }
}

/// Add `value` at `path`: a member set (replacing its value if it has one), an element
/// inserted (`-`: at the end), or the whole document replaced (`""`).
fn add(doc: &mut Doc, path: &str, value: &[u8]) -> Result<(), PatchErrorKind> {
    if path.is_empty() {
        let root = doc.root();
        doc.replace(root, value);
        return Ok(());
    }
    let (parent, last) = split(path).ok_or(InvalidPointer)?;
    let at = find(doc, parent).ok_or(InvalidPointer)?;
    match doc.bytes[at.start] {
        b'{' => doc
            .set_member(at.start, &unescape(last), value)
            .ok_or(InvalidPointer),
        b'[' => {
            let elements = doc.elements(at.start).ok_or(InvalidPointer)?;
            let i = match last {
                "-" => elements.len(),
                _ => index(last)
                    .filter(|&i| i <= elements.len())
                    .ok_or(InvalidPointer)?,
            };
            doc.insert_element(at.start, &elements, i, value);
            Ok(())
        }
        _ => Err(InvalidPointer),
    }
}

/// Remove the member or element at `path`, which must be there.
fn remove(doc: &mut Doc, path: &str) -> Result<(), PatchErrorKind> {
    let (parent, last) = split(path).ok_or(InvalidPointer)?;
    let at = find(doc, parent).ok_or(InvalidPointer)?;
    match doc.bytes[at.start] {
        b'{' => match doc.remove_member(at.start, &unescape(last)) {
            Some(true) => Ok(()),
            _ => Err(InvalidPointer),
        },
        b'[' => {
            let elements = doc.elements(at.start).ok_or(InvalidPointer)?;
            let i = index(last)
                .filter(|&i| i < elements.len())
                .ok_or(InvalidPointer)?;
            doc.remove_element(&elements, i);
            Ok(())
        }
        _ => Err(InvalidPointer),
    }
}

/// Replace the value at `path`, which must be there.
fn replace(doc: &mut Doc, path: &str, value: &[u8]) -> Result<(), PatchErrorKind> {
    let at = find(doc, path).ok_or(InvalidPointer)?;
    doc.replace(at, value);
    // A member named more than once reads as its last value, which is now `value`: the
    // others go, so that the member is named once, as in a parse of the result.
    if let Some((parent, last)) = split(path) {
        if let Some(object) = find(doc, parent).filter(|p| doc.bytes[p.start] == b'{') {
            doc.dedupe(object.start, &unescape(last))
                .ok_or(InvalidPointer)?;
        }
    }
    Ok(())
}
