//! A push-based Server-Sent Events decoder for the usage tap.
//!
//! The tap sees the upstream's chunks as they pass through on their way to the client, so the
//! decoder must accept arbitrary chunk boundaries and keep only the current incomplete line.
//! (Pull-based SSE crates wrap a whole stream; using one here would mean a second task and a
//! copy of every chunk per response.)

/// One complete event: its `event:` name (empty when absent) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<'a> {
    pub event: &'a str,
    pub data: &'a [u8],
}

/// Incremental decoder; call [`Decoder::feed`] with every chunk.
#[derive(Debug, Default)]
pub struct Decoder {
    line: Vec<u8>,
    event: String,
    data: Vec<u8>,
    has_data: bool,
    /// Events seen so far.
    pub events: u64,
}

/// Lines longer than this are dropped from the tap (never from the stream itself).
const MAX_LINE: usize = 16 * 1024 * 1024;

impl Decoder {
    /// Feed a chunk; `on_event` is called for every event the chunk completes.
    pub fn feed(&mut self, mut chunk: &[u8], mut on_event: impl FnMut(Event<'_>)) {
        while !chunk.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    let (head, rest) = chunk.split_at(i);
                    chunk = &rest[1..];
                    if self.line.is_empty() {
                        self.line_done(head, &mut on_event);
                    } else {
                        self.push_partial(head);
                        let line = std::mem::take(&mut self.line);
                        self.line_done(&line, &mut on_event);
                        self.line = line;
                        self.line.clear();
                    }
                }
                None => {
                    self.push_partial(chunk);
                    break;
                }
            }
        }
    }

    fn push_partial(&mut self, bytes: &[u8]) {
        if self.line.len() + bytes.len() <= MAX_LINE {
            self.line.extend_from_slice(bytes);
        }
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut impl FnMut(Event<'_>)) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data {
                self.events += 1;
                on_event(Event {
                    event: &self.event,
                    data: &self.data,
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return; // comment
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                self.event.clear();
                self.event.push_str(&String::from_utf8_lossy(value));
            }
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, |e| {
                out.push((
                    e.event.to_string(),
                    String::from_utf8_lossy(e.data).into_owned(),
                ))
            });
        }
        out
    }

    #[test]
    fn events_across_arbitrary_chunk_boundaries() {
        let stream = b"event: message_start\ndata: {\"a\":1}\n\n: ping comment\nevent: ping\r\ndata: {}\r\n\r\ndata: [DONE]\n\n";
        let whole = collect(&[stream]);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0], ("message_start".into(), "{\"a\":1}".into()));
        assert_eq!(whole[1], ("ping".into(), "{}".into()));
        assert_eq!(whole[2], ("".into(), "[DONE]".into()));
        for split in 1..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(collect(&[a, b]), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(collect(&bytes), whole);
    }

    #[test]
    fn multi_line_data_is_joined() {
        assert_eq!(
            collect(&[b"data: a\ndata: b\n\n"]),
            vec![("".into(), "a\nb".into())]
        );
    }
}
