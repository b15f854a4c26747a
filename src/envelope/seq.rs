//! Render a JSON array or object from a list of elements, copying the client's own
//! separators (whitespace, commas) wherever two untouched neighbours stay side by side.

use crate::json::scan::Span;

/// Where rendered bytes go: one buffer, or a splice of the client's body
/// ([`super::payload::Splicer`], which keeps what it is given until it is finished, hence
/// the lifetime).
pub(crate) trait Sink<'s> {
    fn put(&mut self, bytes: &'s [u8]);

    fn push(&mut self, byte: u8) {
        self.put(byte_slice(byte));
    }
}

impl<'s> Sink<'s> for Vec<u8> {
    fn put(&mut self, bytes: &'s [u8]) {
        self.extend_from_slice(bytes);
    }

    fn push(&mut self, byte: u8) {
        Vec::push(self, byte);
    }
}

/// A byte as a slice that lives as long as the program.
fn byte_slice(byte: u8) -> &'static [u8] {
    static BYTES: [u8; 256] = {
        let mut all = [0u8; 256];
        let mut i = 0;
        while i < 256 {
            all[i] = i as u8;
            i += 1;
        }
        all
    };
    let at = usize::from(byte);
    &BYTES[at..at + 1]
}

/// One element to write: its original index (if it is one of the client's) and its bytes.
pub(crate) struct Item<'a> {
    pub origin: Option<usize>,
    pub bytes: std::borrow::Cow<'a, [u8]>,
    /// Ranges of `bytes` replaced as they are written, in order and apart: the rest goes
    /// out as the runs of `bytes` it is (shared by a splice of the client's body, where
    /// they are the client's), not as a copy of the whole element with its few edits.
    pub edits: Vec<(Span, Vec<u8>)>,
    /// A container written right after `bytes`: a large section (the messages) rendered
    /// straight into the output rather than into a buffer of its own and then copied.
    pub then: Option<Box<Seq<'a>>>,
}

impl<'a> Item<'a> {
    pub fn new(origin: Option<usize>, bytes: std::borrow::Cow<'a, [u8]>) -> Item<'a> {
        Item::edited_cow(origin, bytes, Vec::new())
    }

    /// The element `bytes` with `edits` made as it is written.
    pub fn edited(origin: Option<usize>, bytes: &'a [u8], edits: Vec<(Span, Vec<u8>)>) -> Item<'a> {
        Item::edited_cow(origin, bytes.into(), edits)
    }

    fn edited_cow(
        origin: Option<usize>,
        bytes: std::borrow::Cow<'a, [u8]>,
        edits: Vec<(Span, Vec<u8>)>,
    ) -> Item<'a> {
        Item {
            origin,
            bytes,
            edits,
            then: None,
        }
    }

    /// What the element takes once written, before its `then`.
    fn len(&self) -> usize {
        let removed: usize = self.edits.iter().map(|(r, _)| r.len()).sum();
        let added: usize = self.edits.iter().map(|(_, b)| b.len()).sum();
        self.bytes.len() - removed + added
    }

    fn write<'s>(&'s self, out: &mut impl Sink<'s>) {
        let mut at = 0;
        for (range, new) in &self.edits {
            out.put(&self.bytes[at..range.start]);
            out.put(new);
            at = range.end;
        }
        out.put(&self.bytes[at..]);
    }
}

/// A container to render: the original's layout, its brackets and its new items.
pub(crate) struct Seq<'a> {
    pub c: Container<'a>,
    pub open: u8,
    pub close: u8,
    pub items: Vec<Item<'a>>,
}

impl<'s> Seq<'s> {
    pub fn bound(&self) -> usize {
        render_bound(&self.c, &self.items)
    }

    pub fn write(&'s self, out: &mut impl Sink<'s>) {
        render(&self.c, self.open, self.close, &self.items, out);
    }
}

/// The original container: its span in `src` and its element spans (for objects, from the
/// key's opening quote to the value's end).
pub(crate) struct Container<'a> {
    pub src: &'a [u8],
    pub span: Option<Span>,
    pub elems: &'a [Span],
}

impl<'a> Container<'a> {
    fn gap(&self, i: usize) -> &'a [u8] {
        &self.src[self.elems[i].end..self.elems[i + 1].start]
    }
}

/// The most [`render`] can write for `items`: what they hold, a comma each, the brackets,
/// and whatever of the original container lies between its elements.
pub(crate) fn render_bound(c: &Container<'_>, items: &[Item<'_>]) -> usize {
    let between = c.span.as_ref().map_or(0, |span| {
        span.len()
            .saturating_sub(c.elems.iter().map(|e| e.len()).sum::<usize>())
    });
    let item = |i: &Item<'_>| i.len() + 1 + i.then.as_ref().map_or(0, |s| s.bound());
    between + items.iter().map(item).sum::<usize>() + 2
}

/// [`render`] into a buffer of its own, sized once: a buffer that grows doubles, and the
/// messages of a 30 MB body would take 60 MB.
pub(crate) fn rendered(c: &Container<'_>, open: u8, close: u8, items: &[Item<'_>]) -> Vec<u8> {
    let bound = render_bound(c, items);
    let mut out = Vec::with_capacity(bound);
    render(c, open, close, items, &mut out);
    debug_assert!(out.len() <= bound, "rendered past its bound");
    out
}

/// Write `open`, the items joined by the original separators where possible (`,`
/// otherwise), and `close`.
pub(crate) fn render<'s>(
    c: &Container<'s>,
    open: u8,
    close: u8,
    items: &'s [Item<'s>],
    out: &mut impl Sink<'s>,
) {
    out.push(open);
    let n = c.elems.len();
    if let (Some(span), Some(first)) = (&c.span, items.first()) {
        if first.origin == Some(0) && n > 0 {
            out.put(&c.src[span.start + 1..c.elems[0].start]);
        }
    }
    for (k, item) in items.iter().enumerate() {
        if k > 0 {
            match (items[k - 1].origin, item.origin) {
                (Some(a), Some(b)) if b == a + 1 && b < n => out.put(c.gap(a)),
                _ => out.push(b','),
            }
        }
        item.write(out);
        if let Some(seq) = &item.then {
            seq.write(out);
        }
    }
    if let (Some(span), Some(last)) = (&c.span, items.last()) {
        if n > 0 && last.origin == Some(n - 1) {
            out.put(&c.src[c.elems[n - 1].end..span.end - 1]);
        }
    }
    out.push(close);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// The buffer sized by `render_bound` never grows, a nested container included, and
    /// is not much larger than what is written.
    #[test]
    fn the_bound_holds_what_is_rendered() {
        let src = b"[ 1 ,\n 2 ,3 ]";
        let elems = [2..3, 7..8, 10..11];
        let c = || Container {
            src,
            span: Some(0..src.len()),
            elems: &elems,
        };
        let nested = Seq {
            c: c(),
            open: b'[',
            close: b']',
            items: vec![
                Item::new(Some(2), Cow::Borrowed(b"3")),
                Item::new(None, Cow::Borrowed(b"44")),
            ],
        };
        let items = vec![
            Item::new(Some(0), Cow::Borrowed(b"1")),
            Item {
                origin: None,
                bytes: Cow::Borrowed(b"\"k\":"),
                edits: Vec::new(),
                then: Some(Box::new(nested)),
            },
            Item::new(Some(1), Cow::Borrowed(b"2")),
        ];
        let out = rendered(&c(), b'[', b']', &items);
        assert_eq!(out, b"[ 1,\"k\":[3,44],2]");
        let bound = render_bound(&c(), &items);
        assert!(out.len() <= bound && bound <= out.len() + 2 * src.len());
    }

    #[test]
    fn untouched_neighbours_keep_their_separators() {
        let src = b"[ 1 ,\n 2 ,3 ]";
        let elems = [2..3, 7..8, 10..11];
        let c = Container {
            src,
            span: Some(0..src.len()),
            elems: &elems,
        };
        let item = |o: Option<usize>, b: &'static [u8]| Item::new(o, Cow::Borrowed(b));
        let mut out = Vec::new();
        render(
            &c,
            b'[',
            b']',
            &[
                item(Some(0), b"1"),
                item(Some(1), b"2"),
                item(Some(2), b"3"),
            ],
            &mut out,
        );
        assert_eq!(out, src);
        let mut out = Vec::new();
        render(
            &c,
            b'[',
            b']',
            &[
                item(Some(0), b"1"),
                item(None, b"9"),
                item(Some(1), b"2"),
                item(Some(2), b"3"),
            ],
            &mut out,
        );
        assert_eq!(out, b"[ 1,9,2 ,3 ]");
    }
}
