//! A compiled body as it goes upstream: runs of the client's own bytes, shared rather than
//! copied, with what compiling wrote between them. A shaped body differs from the client's
//! in a few places (a marker, an injected message, a stripped tail), so it is sent as a
//! splice: the upstream connection writes the pieces one after the other, and no copy of
//! the history is made on the request path.

use std::ops::Range;

use bytes::Bytes;

use super::seq::Sink;

/// The shortest run of the client's bytes shared as a piece of its own; a shorter one that
/// does not continue the run before it is copied, so that a body stays a few pieces.
const SHARED_RUN: usize = 4096;

/// A request body in pieces. Its bytes are the pieces' in order.
#[derive(Clone, Debug, Default)]
pub struct Payload {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Payload {
    /// The pieces, in order (none empty).
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// The pieces, in order, moved out.
    pub fn into_pieces(self) -> Vec<Bytes> {
        self.pieces
    }

    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body in one buffer: its only piece as it is, else the pieces copied together.
    pub fn to_bytes(&self) -> Bytes {
        match self.pieces.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            pieces => {
                let mut out = Vec::with_capacity(self.len);
                for piece in pieces {
                    out.extend_from_slice(piece);
                }
                Bytes::from(out)
            }
        }
    }

    /// Whether the body is exactly `bytes`.
    pub fn is(&self, bytes: &[u8]) -> bool {
        if self.len != bytes.len() {
            return false;
        }
        let mut at = 0;
        self.pieces.iter().all(|piece| {
            let same = bytes[at..at + piece.len()] == piece[..];
            at += piece.len();
            same
        })
    }

    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }
}

impl From<Bytes> for Payload {
    fn from(body: Bytes) -> Payload {
        let mut payload = Payload::default();
        payload.push(body);
        payload
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        other.len == self.len && self.is(&other.to_bytes())
    }
}

/// Writes a compiled body as a [`Payload`]. What it is given is kept as written (runs of
/// the client's body, other slices) and laid out when finished: a long run is shared as a
/// slice of the client's `Bytes`, and everything else is copied into one buffer of exactly
/// its size, so that a body in flight holds nothing it does not send.
pub(crate) struct Splicer<'s> {
    src: &'s Bytes,
    parts: Vec<Part<'s>>,
}

enum Part<'s> {
    /// A range of the client's body.
    Src(Range<usize>),
    Other(&'s [u8]),
}

/// A piece of the finished payload: shared from the client's body, or copied.
enum Layout {
    Shared(Range<usize>),
    Copied(Range<usize>),
}

impl<'s> Splicer<'s> {
    pub fn new(src: &'s Bytes) -> Splicer<'s> {
        Splicer {
            src,
            parts: Vec::new(),
        }
    }

    /// Where `bytes` lies in the client's body, if it does.
    fn in_src(&self, bytes: &[u8]) -> Option<Range<usize>> {
        let base = self.src.as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        let end = start + bytes.len();
        (end <= self.src.len()).then_some(start..end)
    }

    pub fn finish(self) -> Payload {
        let shared = |part: &Part<'_>| matches!(part, Part::Src(run) if run.len() >= SHARED_RUN);
        let copied: usize = self
            .parts
            .iter()
            .filter(|part| !shared(part))
            .map(|part| match part {
                Part::Src(run) => run.len(),
                Part::Other(bytes) => bytes.len(),
            })
            .sum();
        let mut buffer = Vec::with_capacity(copied);
        let mut layout = Vec::new();
        let mut mark = 0;
        for part in &self.parts {
            match part {
                Part::Src(run) if shared(part) => {
                    if buffer.len() > mark {
                        layout.push(Layout::Copied(mark..buffer.len()));
                        mark = buffer.len();
                    }
                    layout.push(Layout::Shared(run.clone()));
                }
                Part::Src(run) => buffer.extend_from_slice(&self.src[run.clone()]),
                Part::Other(bytes) => buffer.extend_from_slice(bytes),
            }
        }
        if buffer.len() > mark {
            layout.push(Layout::Copied(mark..buffer.len()));
        }
        let buffer = Bytes::from(buffer);
        let mut out = Payload::default();
        for piece in layout {
            out.push(match piece {
                Layout::Shared(run) => self.src.slice(run),
                Layout::Copied(range) => buffer.slice(range),
            });
        }
        out
    }
}

impl<'s> Sink<'s> for Splicer<'s> {
    fn put(&mut self, bytes: &'s [u8]) {
        if bytes.is_empty() {
            return;
        }
        let range = self.in_src(bytes);
        match (range, self.parts.last_mut()) {
            (Some(range), Some(Part::Src(run))) if run.end == range.start => run.end = range.end,
            (Some(range), _) => self.parts.push(Part::Src(range)),
            (None, _) => self.parts.push(Part::Other(bytes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_the_source_are_shared_and_the_rest_copied() {
        let src = Bytes::from(vec![b'a'; 3 * SHARED_RUN]);
        let mut s = Splicer::new(&src);
        s.put(&src[..10]);
        s.put(b"XY");
        s.put(&src[10..SHARED_RUN + 10]);
        s.put(&src[SHARED_RUN + 10..2 * SHARED_RUN]);
        s.put(b",");
        s.put(&src[2 * SHARED_RUN..2 * SHARED_RUN + 3]);
        let out = s.finish();
        let mut want = src[..10].to_vec();
        want.extend_from_slice(b"XY");
        want.extend_from_slice(&src[10..2 * SHARED_RUN]);
        want.extend_from_slice(b",aaa");
        assert!(out.is(&want));
        assert_eq!(out.to_bytes(), want);
        assert_eq!(out.len(), want.len());
        let lens: Vec<usize> = out.pieces().iter().map(Bytes::len).collect();
        assert_eq!(lens, [12, 2 * SHARED_RUN - 10, 4]);
        let shared = &out.pieces()[1];
        assert_eq!(
            shared.as_ptr(),
            src[10..].as_ptr(),
            "the long run is the source's bytes, not a copy"
        );
    }

    #[test]
    fn a_whole_source_is_one_piece() {
        let src = Bytes::from_static(b"{\"a\":1}");
        let mut s = Splicer::new(&src);
        s.put(&src[..3]);
        s.put(&src[3..]);
        let out = s.finish();
        assert_eq!(out.pieces().len(), 1);
        assert!(out.is(&src) && !out.is(b"{\"a\":2}") && !out.is(b"{}"));
        assert_eq!(out, Payload::from(src.clone()));
    }
}
