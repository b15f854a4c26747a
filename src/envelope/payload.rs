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

    /// The body in one buffer, written over `whole` (the client's body its shared pieces
    /// are slices of) when nothing else holds `whole` any more: the runs of the client's
    /// bytes are moved to where they go and what compiling wrote is put between them, so a
    /// large shaped body is never in memory twice. Else, as [`Payload::to_bytes`].
    pub fn into_one(self, whole: Bytes) -> Bytes {
        let Some(plan) = self.plan_over(&whole) else {
            return self.to_bytes();
        };
        let len = self.len;
        // Only the copied pieces are kept: the shared ones must let go of `whole`.
        let written: Vec<Bytes> = self
            .pieces
            .into_iter()
            .zip(&plan)
            .filter_map(|(piece, at)| matches!(at, Place::Written(_)).then_some(piece))
            .collect();
        let mut buf = match whole.try_into_mut() {
            Ok(buf) => buf,
            Err(whole) => return gathered(&plan, &whole, &written, len),
        };
        if buf.len() < len {
            buf.resize(len, 0);
        }
        // Runs go right to left among those that move right, then left to right among those
        // that move left: both orders only ever write where no run still to move lies.
        for place in plan.iter().rev() {
            if let Place::Run { from, to } = place {
                if to.start > from.start {
                    buf.copy_within(from.clone(), to.start);
                }
            }
        }
        for place in &plan {
            if let Place::Run { from, to } = place {
                if to.start < from.start {
                    buf.copy_within(from.clone(), to.start);
                }
            }
        }
        let places = plan.iter().filter_map(|place| match place {
            Place::Written(to) => Some(to.clone()),
            Place::Run { .. } => None,
        });
        for (to, piece) in places.zip(&written) {
            buf[to].copy_from_slice(piece);
        }
        buf.truncate(len);
        buf.freeze()
    }

    /// Where each piece goes in the body and, for a run of `whole`, where it comes from;
    /// `None` when the body is one piece, or when its runs of `whole` are not in the order
    /// they come in it (the moves in place rely on it).
    fn plan_over(&self, whole: &Bytes) -> Option<Vec<Place>> {
        if self.pieces.len() < 2 {
            return None;
        }
        let mut plan = Vec::with_capacity(self.pieces.len());
        let (mut at, mut read) = (0, 0);
        for piece in &self.pieces {
            let to = at..at + piece.len();
            plan.push(match range_in(whole, piece) {
                Some(from) if from.start >= read => {
                    read = from.end;
                    Place::Run { from, to }
                }
                Some(_) => return None,
                None => Place::Written(to),
            });
            at += piece.len();
        }
        Some(plan)
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

    /// The body with the bytes of `range` replaced by `with`: the pieces around it shared
    /// (sliced, not copied), so an edit of a few fields keeps the body a splice of the
    /// client's bytes.
    pub fn replaced(&self, range: Range<usize>, with: Bytes) -> Payload {
        let mut out = Payload::default();
        let mut at = 0;
        for piece in &self.pieces {
            let (start, end) = (at, at + piece.len());
            if start < range.start {
                out.push(piece.slice(..range.start.min(end) - start));
            }
            if (start..end).contains(&range.start) || (range.start == end && end == self.len) {
                out.push(with.clone());
            }
            if end > range.end {
                out.push(piece.slice(range.end.max(start) - start..));
            }
            at = end;
        }
        if self.pieces.is_empty() {
            out.push(with);
        }
        out
    }

    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }
}

/// Where `bytes` lies in `src` (the client's body), if it is a slice of it.
fn range_in(src: &[u8], bytes: &[u8]) -> Option<Range<usize>> {
    let start = (bytes.as_ptr() as usize).checked_sub(src.as_ptr() as usize)?;
    let end = start + bytes.len();
    (end <= src.len()).then_some(start..end)
}

/// Where a piece of a body goes ([`Payload::into_one`]).
enum Place {
    /// A run of the client's body, moved.
    Run {
        from: Range<usize>,
        to: Range<usize>,
    },
    /// Bytes compiling wrote, copied in.
    Written(Range<usize>),
}

/// The body of `plan` copied into a new buffer: the runs from `whole`, the rest from
/// `written` in order.
fn gathered(plan: &[Place], whole: &[u8], written: &[Bytes], len: usize) -> Bytes {
    let mut out = Vec::with_capacity(len);
    let mut written = written.iter();
    for place in plan {
        match place {
            Place::Run { from, .. } => out.extend_from_slice(&whole[from.clone()]),
            Place::Written(_) => out.extend_from_slice(written.next().map_or(&[][..], |b| b)),
        }
    }
    Bytes::from(out)
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
        let range = range_in(self.src, bytes);
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

    use proptest::prelude::*;

    /// The client's body as the server gathers it: its own buffer, with room after it.
    fn gathered_body(len: usize, seed: u8) -> Bytes {
        let mut buf = bytes::BytesMut::with_capacity(len + 64 * 1024);
        buf.extend((0..len).map(|i| seed.wrapping_add((i % 251) as u8)));
        buf.freeze()
    }

    /// A splice of `src`: for each `(skip, take, insert)`, `skip` bytes dropped, `take`
    /// bytes kept, then `insert` written; runs in order unless `reorder`.
    fn splice_of(src: &Bytes, ops: &[(usize, usize, Vec<u8>)], reorder: bool) -> Payload {
        let mut runs = Vec::new();
        let mut at = 0;
        for (skip, take, _) in ops {
            let start = (at + skip).min(src.len());
            let end = (start + take).min(src.len());
            runs.push(start..end);
            at = end;
        }
        if reorder {
            runs.reverse();
        }
        let mut s = Splicer::new(src);
        for (run, (_, _, insert)) in runs.into_iter().zip(ops) {
            s.put(&src[run]);
            s.put(insert);
        }
        s.finish()
    }

    fn splices() -> impl Strategy<Value = Vec<(usize, usize, Vec<u8>)>> {
        let insert = prop::collection::vec(any::<u8>(), 0..200);
        prop::collection::vec((0..300usize, 0..3 * SHARED_RUN, insert), 1..12)
    }

    proptest! {
        /// In place or copied, the one buffer holds the body's bytes: runs moved left and
        /// right, bodies grown and shrunk, runs out of order, `whole` still held elsewhere.
        #[test]
        fn one_buffer_holds_the_bodys_bytes(
            ops in splices(),
            len in 1usize..40_000,
            reorder in any::<bool>(),
            held in any::<bool>(),
        ) {
            let src = gathered_body(len, 7);
            let payload = splice_of(&src, &ops, reorder);
            let want = payload.to_bytes();
            let other = held.then(|| src.clone());
            let one = payload.into_one(src);
            prop_assert_eq!(&one[..], &want[..]);
            if let Some(other) = other {
                prop_assert_eq!(other, gathered_body(len, 7), "a held body is not written over");
            }
        }
    }

    #[test]
    fn a_shaped_body_is_written_over_the_clients() {
        let len = 4 << 20;
        let src = gathered_body(len, 1);
        let marker = br#","cache_control":{"type":"ephemeral"}"#.to_vec();
        let ops = [
            (0, len / 3, marker.clone()),
            (0, len / 3, Vec::new()),
            (40, len, marker),
        ];
        let payload = splice_of(&src, &ops, false);
        let want = payload.to_bytes();
        let at = src.as_ptr();
        let (one, peak) = crate::alloc_meter::peak_during(|| payload.into_one(src));
        assert_eq!(one, want);
        assert_eq!(
            one.as_ptr(),
            at,
            "the client's buffer holds the body as sent"
        );
        assert!(
            peak < 16 * 1024,
            "{peak} bytes allocated for a {len}-byte body"
        );
    }

    proptest::proptest! {
        /// A range replaced in a body of any pieces is the body's bytes with that range
        /// replaced, and what lies around it is still shared with the pieces.
        #[test]
        fn a_replaced_range_keeps_the_pieces_around_it(
            pieces in proptest::collection::vec(proptest::collection::vec(0u8..255, 0..40), 0..6),
            cut in (0usize..300, 0usize..300),
            with in proptest::collection::vec(0u8..255, 0..20),
        ) {
            let mut payload = Payload::default();
            for piece in &pieces {
                payload.push(Bytes::from(piece.clone()));
            }
            let whole = payload.to_bytes();
            let (a, b) = (cut.0.min(whole.len()), cut.1.min(whole.len()));
            let range = a.min(b)..a.max(b);
            let out = payload.replaced(range.clone(), Bytes::from(with.clone()));
            let mut want = whole[..range.start].to_vec();
            want.extend_from_slice(&with);
            want.extend_from_slice(&whole[range.end..]);
            proptest::prop_assert_eq!(&out.to_bytes()[..], &want[..]);
            proptest::prop_assert_eq!(out.len(), want.len());
            proptest::prop_assert!(out.pieces().len() <= payload.pieces().len() + 2);
        }
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
