//! What cachet reads from each element of a client's messages array (its kind, its content
//! blocks), read once per body when first asked, and shared with the conversation's kept
//! body ([`crate::known_prefix`]) so that the next request takes the facts of the messages
//! it repeats instead of reading them again. A cache of what the bytes say: it takes no
//! part in an envelope's identity (its `Debug` shows nothing).

use std::sync::{Arc, OnceLock};

use super::blocks::Block;
use super::MsgKind;

type Shared<T> = Arc<OnceLock<Vec<T>>>;

/// One fact per element: this body's, once read, and the kept body's it repeats the first
/// elements of.
pub(crate) struct PerElement<T> {
    own: Shared<T>,
    inherited: Option<(Shared<T>, usize)>,
}

impl<T> Clone for PerElement<T> {
    fn clone(&self) -> Self {
        PerElement {
            own: self.own.clone(),
            inherited: self.inherited.clone(),
        }
    }
}

impl<T> Default for PerElement<T> {
    fn default() -> Self {
        PerElement {
            own: Arc::default(),
            inherited: None,
        }
    }
}

impl<T: Clone> PerElement<T> {
    fn after(kept: &Self, repeated: usize) -> Self {
        PerElement {
            own: Arc::default(),
            inherited: Some((kept.own.clone(), repeated)),
        }
    }

    fn share(&self) -> Self {
        PerElement {
            own: self.own.clone(),
            inherited: None,
        }
    }

    /// The fact of each of `elements` elements: the repeated ones' from the kept body when
    /// it has read them, the others by `read(i)`.
    pub(crate) fn get(&self, elements: usize, read: impl Fn(usize) -> T) -> &[T] {
        self.own.get_or_init(|| {
            let mut out: Vec<T> = self
                .inherited
                .as_ref()
                .and_then(|(kept, n)| {
                    kept.get()
                        .map(|k| k[..(*n).min(k.len()).min(elements)].to_vec())
                })
                .unwrap_or_default();
            out.reserve(elements - out.len());
            for i in out.len()..elements {
                out.push(read(i));
            }
            out
        })
    }
}

/// The facts of a body's messages-array elements.
#[derive(Clone, Default)]
pub struct OrigFacts {
    pub(crate) kinds: PerElement<MsgKind>,
    /// Content blocks (Anthropic), shared: a clone is a count.
    pub(crate) blocks: PerElement<Arc<[Block]>>,
}

impl OrigFacts {
    /// Facts that take the first `repeated` elements' from `kept`.
    pub(crate) fn after(kept: &OrigFacts, repeated: usize) -> OrigFacts {
        OrigFacts {
            kinds: PerElement::after(&kept.kinds, repeated),
            blocks: PerElement::after(&kept.blocks, repeated),
        }
    }

    /// The same facts, for keeping with the body.
    pub(crate) fn share(&self) -> OrigFacts {
        OrigFacts {
            kinds: self.kinds.share(),
            blocks: self.blocks.share(),
        }
    }
}

impl std::fmt::Debug for OrigFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OrigFacts")
    }
}
