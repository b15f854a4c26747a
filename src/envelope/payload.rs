//! A compiled body as it goes upstream: runs of the client's own bytes, shared rather than
//! copied, with what compiling wrote between them. A shaped body differs from the client's
//! in a few places (a marker, an injected message, a stripped tail), so it is sent as a
//! splice: the upstream connection writes the pieces one after the other, and no copy of
//! the history is made on the request path.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

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

/// Writes a compiled body as a [`Payload`]: bytes that lie in the client's body are kept as
/// a range of it while what is written next continues it, and shared once the run is long;
/// everything else is copied into a buffer of its own.
pub(crate) struct Splicer<'a> {
    src: &'a Bytes,
    out: Payload,
    run: Option<Range<usize>>,
    own: BytesMut,
}

impl<'a> Splicer<'a> {
    pub fn new(src: &'a Bytes) -> Splicer<'a> {
        Splicer {
            src,
            out: Payload::default(),
            run: None,
            own: BytesMut::new(),
        }
    }

    /// Where `bytes` lies in the client's body, if it does.
    fn in_src(&self, bytes: &[u8]) -> Option<Range<usize>> {
        let base = self.src.as_ptr() as usize;
        let start = (bytes.as_ptr() as usize).checked_sub(base)?;
        let end = start + bytes.len();
        (end <= self.src.len()).then_some(start..end)
    }

    /// Close the run of the client's bytes being written: shared when long enough, else
    /// copied with what surrounds it.
    fn end_run(&mut self) {
        let Some(run) = self.run.take() else { return };
        if run.len() >= SHARED_RUN {
            self.end_own();
            self.out.push(self.src.slice(run));
        } else {
            self.own.extend_from_slice(&self.src[run]);
        }
    }

    fn end_own(&mut self) {
        if !self.own.is_empty() {
            let own = self.own.split().freeze();
            self.out.push(own);
        }
    }

    pub fn finish(mut self) -> Payload {
        self.end_run();
        self.end_own();
        self.out
    }
}

impl Sink for Splicer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match (self.in_src(bytes), &mut self.run) {
            (Some(range), Some(run)) if run.end == range.start => run.end = range.end,
            (Some(range), _) => {
                self.end_run();
                self.run = Some(range);
            }
            (None, _) => {
                self.end_run();
                self.own.extend_from_slice(bytes);
            }
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
