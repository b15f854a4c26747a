//! Compressed request bodies (`content-encoding`, RFC 9110 §8.4).
//!
//! cachet reads a generation body to check it, name its model and session, and shape it.
//! A `gzip`, `deflate` or `zstd` body is decoded for that reading; without a policy the
//! upstream still gets the bytes the client sent, with their header. Codex signed in with
//! ChatGPT sends every Responses request as `zstd` (its `enable_request_compression`
//! feature, on by default). Other codings (`br`, ...) are refused with an error in the
//! provider's format that names the coding, rather than a misleading "not valid JSON".

use std::io::Read;

use bytes::Bytes;
use http::HeaderMap;

use crate::error::ApiError;

/// The body as sent and, when it was compressed, the decoded body to read.
pub struct Decoded {
    pub sent: Bytes,
    /// `Some` when the body carried a content coding; the decoded bytes.
    pub plain: Option<Bytes>,
}

impl Decoded {
    /// The bytes to read: decoded when the body was compressed.
    pub fn readable(&self) -> &Bytes {
        self.plain.as_ref().unwrap_or(&self.sent)
    }

    /// What goes upstream once the readable body went through the pipeline as `shaped`:
    /// the bytes as sent when nothing changed, else `shaped`, which is plain, so the
    /// `content-encoding` header must go (the second value says so).
    pub fn forward(self, shaped: Bytes) -> (Bytes, bool) {
        match self.plain {
            Some(plain) if plain != shaped => (shaped, true),
            Some(_) => (self.sent, false),
            None => (shaped, false),
        }
    }
}

/// Decode `body` by the request's `content-encoding` (codings applied in order, so they
/// are undone last first). `limit` bounds the decoded size like the body size itself.
pub fn decode(headers: &HeaderMap, body: Bytes, limit: usize) -> Result<Decoded, ApiError> {
    let codings: Vec<String> = headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    if codings.is_empty() {
        return Ok(Decoded {
            sent: body,
            plain: None,
        });
    }
    let mut plain = body.to_vec();
    for coding in codings.iter().rev() {
        plain = match coding.as_str() {
            "gzip" | "x-gzip" => read_all(flate2::read::MultiGzDecoder::new(&plain[..]), limit),
            "deflate" => read_all(flate2::read::ZlibDecoder::new(&plain[..]), limit),
            "zstd" => read_zstd(&plain, limit),
            other => {
                return Err(ApiError::invalid(format!(
                    "content-encoding `{other}` is not supported; send the body uncompressed, or with gzip, deflate or zstd"
                )))
            }
        }
        .map_err(|e| {
            ApiError::invalid(format!(
                "the request body could not be decoded as {coding}: {e}"
            ))
        })?;
    }
    Ok(Decoded {
        sent: body,
        plain: Some(Bytes::from(plain)),
    })
}

fn read_all(reader: impl Read, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    read_within(reader, limit, &mut out)?;
    Ok(out)
}

/// Append what `reader` yields to `out`, failing once `out` would pass `limit` bytes.
fn read_within(reader: impl Read, limit: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
    let room = limit.saturating_sub(out.len());
    reader.take(room as u64 + 1).read_to_end(out)?;
    if out.len() > limit {
        return Err(std::io::Error::other(format!(
            "decoded body is larger than the limit of {limit} bytes"
        )));
    }
    Ok(())
}

/// The largest zstd window (as a power of two) a body may ask for: the body limit's (nothing
/// decoded past it is kept), at least the 8 MiB (2^23) that zstd's own streaming levels use
/// for input of unknown size, at most libzstd's default limit (2^27). The decoder allocates
/// the window before it decodes.
fn zstd_window_log_limit(limit: usize) -> u32 {
    (limit as u64)
        .next_power_of_two()
        .trailing_zeros()
        .clamp(23, 27)
}

/// A zstd body (RFC 8878): one frame or several one after the other, skippable frames
/// passed over, as libzstd decodes a stream.
fn read_zstd(input: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(input)?;
    decoder.window_log_max(zstd_window_log_limit(limit))?;
    read_all(decoder, limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn headers(coding: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::CONTENT_ENCODING, coding.parse().unwrap());
        h
    }

    #[test]
    fn plain_bodies_pass_untouched_and_gzip_is_decoded() {
        let body = Bytes::from_static(b"{\"model\":\"m\"}");
        let d = decode(&HeaderMap::new(), body.clone(), 1024).unwrap();
        assert!(d.plain.is_none());
        assert_eq!(d.readable(), &body);
        let gz = Bytes::from(gzip(&body));
        let d = decode(&headers("gzip"), gz.clone(), 1024).unwrap();
        assert_eq!(d.sent, gz);
        assert_eq!(d.readable(), &body);
        assert!(
            decode(&headers("gzip"), gz, 4).is_err(),
            "decoded size is bounded"
        );
    }

    /// A frame as the `zstd` tool writes it (`zstd -19 --check`: a content checksum after
    /// the last block) of `{"model":"m1"}`.
    const ZSTD_WITH_CHECKSUM: [u8; 27] = [
        0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x68, 0x71, 0x00, 0x00, 0x7b, 0x22, 0x6d, 0x6f, 0x64, 0x65,
        0x6c, 0x22, 0x3a, 0x22, 0x6d, 0x31, 0x22, 0x7d, 0xf0, 0x56, 0x89, 0x5e,
    ];

    fn zstd(bytes: &[u8]) -> Vec<u8> {
        zstd::encode_all(bytes, 3).unwrap()
    }

    #[test]
    fn zstd_bodies_are_decoded_frame_after_frame_within_the_limit() {
        let body = br#"{"model":"gpt-5.1-codex","input":[]}"#.repeat(50);
        let sent = Bytes::from(zstd(&body));
        let d = decode(&headers("zstd"), sent.clone(), 1 << 20).unwrap();
        assert_eq!(d.sent, sent, "the bytes as sent are kept to forward");
        assert_eq!(d.readable().as_ref(), body.as_slice());
        assert!(
            decode(&headers("zstd"), sent, body.len() - 1).is_err(),
            "decoded size is bounded"
        );
        // Frames one after the other, one with a checksum, and a skippable frame between
        // them (magic 0x184D2A50, 4 bytes of length, then that many bytes).
        let mut frames = ZSTD_WITH_CHECKSUM.to_vec();
        frames.extend([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        frames.extend(zstd(b"tail"));
        let d = decode(&headers("zstd"), Bytes::from(frames), 1024).unwrap();
        assert_eq!(d.readable().as_ref(), br#"{"model":"m1"}tail"#);
        // A frame that asks for a window past the limit is refused before it is reserved:
        // window descriptor 0x80 is 2^(10+16) bytes, 64 MiB, which a larger limit allows
        // (then one empty raw block, the last).
        const WIDE: [u8; 9] = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x80, 0x01, 0x00, 0x00];
        let err = decode(&headers("zstd"), Bytes::from_static(&WIDE), 1024)
            .err()
            .unwrap();
        assert!(err.message.contains("zstd"), "{}", err.message);
        let wide = decode(&headers("zstd"), Bytes::from_static(&WIDE), 64 << 20).unwrap();
        assert!(wide.readable().is_empty());
    }

    proptest::proptest! {
        /// Bytes from the network, or a compressed body damaged anywhere, decode within the
        /// limit or fail with an error: never a panic, never more than the limit.
        #[test]
        fn damaged_bodies_decode_within_the_limit_or_fail(
            coding in proptest::sample::select(vec!["zstd", "gzip", "deflate"]),
            damage in proptest::collection::vec((0usize..4096, proptest::num::u8::ANY), 0..6),
            cut in 0usize..4096,
            limit in 0usize..3000,
        ) {
            let body = br#"{"model":"gpt-5.1-codex","input":[{"role":"user","content":"hi"}]}"#
                .repeat(40);
            let mut sent = match coding {
                "zstd" => zstd(&body),
                "gzip" => gzip(&body),
                _ => {
                    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
                    enc.write_all(&body).unwrap();
                    enc.finish().unwrap()
                }
            };
            for (at, byte) in damage {
                let at = at % sent.len();
                sent[at] ^= byte;
            }
            sent.truncate(cut.max(1));
            if let Ok(d) = decode(&headers(coding), Bytes::from(sent), limit) {
                proptest::prop_assert!(d.readable().len() <= limit);
            }
        }
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn other_codings_and_broken_bodies_are_errors() {
        let err = decode(&headers("br"), Bytes::from_static(b"x"), 1024)
            .err()
            .unwrap();
        assert!(err.message.contains("`br` is not supported"));
        for coding in ["deflate", "zstd"] {
            let err = decode(&headers(coding), Bytes::from_static(b"{}"), 1024)
                .err()
                .unwrap();
            assert!(err.message.contains(coding), "{}", err.message);
        }
    }
}
