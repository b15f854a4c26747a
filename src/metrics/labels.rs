//! Bounded label values. A label a client or a hook can choose (a model name, a transformer
//! name, an invalidation reason, a hook name) keeps a bounded set of distinct values, then
//! reports `other`: one new series per request would exhaust Prometheus and cachet alike.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::RwLock;

use prometheus::core::{MetricVec, MetricVecBuilder};

/// Longest label value kept; longer values are cut.
const MAX_LEN: usize = 64;

/// What characters a label value may keep.
#[derive(Debug, Clone, Copy)]
pub enum Charset {
    /// Model-like names: ASCII letters, digits and `-._:/@`; anything else becomes `_`.
    Name,
    /// Free text (a reason a hook wrote): kept as written, control characters become `_`.
    Text,
}

/// The distinct values one label has taken, up to `max`.
pub struct LabelSet {
    max: usize,
    charset: Charset,
    seen: RwLock<HashSet<String>>,
}

impl LabelSet {
    pub fn new(max: usize, charset: Charset) -> Self {
        LabelSet {
            max,
            charset,
            seen: RwLock::new(HashSet::new()),
        }
    }

    fn keeps(&self, c: char) -> bool {
        match self.charset {
            Charset::Name => c.is_ascii_alphanumeric() || "-._:/@".contains(c),
            Charset::Text => !c.is_control(),
        }
    }

    /// The label value for `raw`: itself when clean and short, a cleaned copy otherwise,
    /// `unknown` when empty, and `other` once `max` distinct values have been seen.
    pub fn get<'a>(&self, raw: &'a str) -> Cow<'a, str> {
        // Fast path: a clean value already seen (the common case on the request path).
        let clean_already =
            !raw.is_empty() && raw.len() <= MAX_LEN && raw.chars().all(|c| self.keeps(c));
        if clean_already && self.seen.read().is_ok_and(|s| s.contains(raw)) {
            return Cow::Borrowed(raw);
        }
        let clean: String = raw
            .chars()
            .take(MAX_LEN)
            .map(|c| if self.keeps(c) { c } else { '_' })
            .collect();
        if clean.is_empty() {
            return Cow::Borrowed("unknown");
        }
        let Ok(mut seen) = self.seen.write() else {
            return Cow::Borrowed("other");
        };
        if seen.contains(&clean) {
            return Cow::Owned(clean);
        }
        if seen.len() >= self.max {
            return Cow::Borrowed("other");
        }
        seen.insert(clean.clone());
        Cow::Owned(clean)
    }
}

/// A metric family some of whose labels are bounded: `with_label_values` passes each such
/// label through its `LabelSet` first, so no call site can forget to.
pub struct Capped<V> {
    inner: V,
    /// One entry per label, in the family's label order; `None` for labels cachet itself
    /// chooses from a fixed vocabulary.
    caps: Vec<Option<std::sync::Arc<LabelSet>>>,
}

impl<V> Capped<V> {
    pub fn new(inner: V, caps: Vec<Option<std::sync::Arc<LabelSet>>>) -> Self {
        Capped { inner, caps }
    }
}

impl<P: MetricVecBuilder> Capped<MetricVec<P>> {
    /// The child metric for these label values, bounded labels capped.
    pub fn with_label_values(&self, values: &[&str]) -> P::M {
        let capped: Vec<Cow<'_, str>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| match self.caps.get(i) {
                Some(Some(set)) => set.get(v),
                _ => Cow::Borrowed(*v),
            })
            .collect();
        let refs: Vec<&str> = capped.iter().map(|v| v.as_ref()).collect();
        self.inner.with_label_values(&refs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_and_bounded() {
        let set = LabelSet::new(3, Charset::Name);
        assert_eq!(set.get("claude-sonnet-4-5"), "claude-sonnet-4-5");
        assert_eq!(set.get("a b{c}"), "a_b_c_");
        assert_eq!(set.get(""), "unknown");
        assert_eq!(set.get("third"), "third");
        assert_eq!(set.get("fourth"), "other");
        // Values seen before the cap keep their own label.
        assert_eq!(set.get("claude-sonnet-4-5"), "claude-sonnet-4-5");
        assert_eq!(set.get(&"x".repeat(500)), "other");
    }

    #[test]
    fn text_keeps_spaces_but_not_control_characters() {
        let set = LabelSet::new(10, Charset::Text);
        assert_eq!(set.get("add rules"), "add rules");
        assert_eq!(set.get("two\nlines"), "two_lines");
        let long = "é".repeat(100);
        assert_eq!(set.get(&long).chars().count(), MAX_LEN);
    }
}
