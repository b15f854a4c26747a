//! Compressed request bodies (`content-encoding`, RFC 9110 §8.4).
//!
//! cachet reads a generation body to check it, name its model and session, and shape it.
//! A `gzip` or `deflate` body is decoded for that reading; without a policy the upstream
//! still gets the bytes the client sent, with their header. Other codings (`br`, `zstd`,
//! ...) are refused with an error in the provider's format that names the coding, rather
//! than a misleading "not valid JSON".

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
            other => {
                return Err(ApiError::invalid(format!(
                    "content-encoding `{other}` is not supported; send the body uncompressed, or with gzip or deflate"
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
    reader.take(limit as u64 + 1).read_to_end(&mut out)?;
    if out.len() > limit {
        return Err(std::io::Error::other(format!(
            "decoded body is larger than the limit of {limit} bytes"
        )));
    }
    Ok(out)
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
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&body).unwrap();
        let gz = Bytes::from(enc.finish().unwrap());
        let d = decode(&headers("gzip"), gz.clone(), 1024).unwrap();
        assert_eq!(d.sent, gz);
        assert_eq!(d.readable(), &body);
        assert!(
            decode(&headers("gzip"), gz, 4).is_err(),
            "decoded size is bounded"
        );
    }

    #[test]
    fn other_codings_and_broken_bodies_are_errors() {
        let err = decode(&headers("zstd"), Bytes::from_static(b"x"), 1024)
            .err()
            .unwrap();
        assert!(err.message.contains("`zstd` is not supported"));
        let err = decode(&headers("deflate"), Bytes::from_static(b"{}"), 1024)
            .err()
            .unwrap();
        assert!(err.message.contains("deflate"));
    }
}
