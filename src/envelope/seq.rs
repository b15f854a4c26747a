//! Render a JSON array or object from a list of elements, copying the client's own
//! separators (whitespace, commas) wherever two untouched neighbours stay side by side.

use super::scan::Span;

/// One element to write: its original index (if it is one of the client's) and its bytes.
pub(crate) struct Item<'a> {
    pub origin: Option<usize>,
    pub bytes: std::borrow::Cow<'a, [u8]>,
}

/// The original container: its span in `src` and its element spans (for objects, from the
/// key's opening quote to the value's end).
pub(crate) struct Container<'a> {
    pub src: &'a [u8],
    pub span: Option<Span>,
    pub elems: &'a [Span],
}

impl Container<'_> {
    fn gap(&self, i: usize) -> &[u8] {
        &self.src[self.elems[i].end..self.elems[i + 1].start]
    }
}

/// Write `open`, the items joined by the original separators where possible (`,`
/// otherwise), and `close`.
pub(crate) fn render(
    c: &Container<'_>,
    open: u8,
    close: u8,
    items: &[Item<'_>],
    out: &mut Vec<u8>,
) {
    out.push(open);
    let n = c.elems.len();
    if let (Some(span), Some(first)) = (&c.span, items.first()) {
        if first.origin == Some(0) && n > 0 {
            out.extend_from_slice(&c.src[span.start + 1..c.elems[0].start]);
        }
    }
    for (k, item) in items.iter().enumerate() {
        if k > 0 {
            match (items[k - 1].origin, item.origin) {
                (Some(a), Some(b)) if b == a + 1 && b < n => out.extend_from_slice(c.gap(a)),
                _ => out.push(b','),
            }
        }
        out.extend_from_slice(&item.bytes);
    }
    if let (Some(span), Some(last)) = (&c.span, items.last()) {
        if n > 0 && last.origin == Some(n - 1) {
            out.extend_from_slice(&c.src[c.elems[n - 1].end..span.end - 1]);
        }
    }
    out.push(close);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn untouched_neighbours_keep_their_separators() {
        let src = b"[ 1 ,\n 2 ,3 ]";
        let elems = [2..3, 7..8, 10..11];
        let c = Container {
            src,
            span: Some(0..src.len()),
            elems: &elems,
        };
        let item = |o: Option<usize>, b: &'static [u8]| Item {
            origin: o,
            bytes: Cow::Borrowed(b),
        };
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
