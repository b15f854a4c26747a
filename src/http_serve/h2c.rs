//! Which HTTP a connection speaks: HTTP/1.1, or cleartext HTTP/2 with prior knowledge (h2c,
//! RFC 9113 §3.3), told apart by the connection preface a HTTP/2 client sends first. The AWS
//! SDK for JavaScript speaks HTTP/2 to Bedrock Runtime, and to an `http://` endpoint it
//! speaks it in the clear, without an upgrade.
//!
//! The bytes read to tell are handed back to the connection's reader ([`Prefixed`]), so the
//! HTTP/1.1 side reads the request as it came. Reading them is bounded by the header
//! time-out: a client that sends nothing, or half a preface, holds no connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// What an HTTP/2 client sends before anything else (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection's first bytes, read to tell its HTTP, then the rest of the stream.
pub struct Prefixed {
    head: Vec<u8>,
    read: usize,
    stream: TcpStream,
}

/// The HTTP a connection speaks, and the connection with the bytes read to tell it.
pub enum Speaks {
    Http1(Prefixed),
    Http2(Prefixed),
}

/// Reads as much of `stream`'s start as tells HTTP/2's preface from anything else, within
/// `timeout`. `None`: the client sent too little in time, or closed.
pub async fn detect(mut stream: TcpStream, timeout: Duration) -> Option<Speaks> {
    let mut head = Vec::with_capacity(PREFACE.len());
    let told = tokio::time::timeout(timeout, async {
        let mut buf = [0u8; PREFACE.len()];
        while head.len() < PREFACE.len() {
            let n = stream
                .read(&mut buf[..PREFACE.len() - head.len()])
                .await
                .ok()?;
            if n == 0 {
                // Closed: whatever came (if anything) is for HTTP/1.1 to answer.
                return (!head.is_empty()).then_some(false);
            }
            head.extend_from_slice(&buf[..n]);
            if !PREFACE.starts_with(&head) {
                return Some(false);
            }
        }
        Some(true)
    })
    .await
    .ok()
    .flatten()?;
    let prefixed = Prefixed {
        head,
        read: 0,
        stream,
    };
    Some(if told {
        Speaks::Http2(prefixed)
    } else {
        Speaks::Http1(prefixed)
    })
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rest = &this.head[this.read..];
        if rest.is_empty() {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        }
        let n = rest.len().min(buf.remaining());
        buf.put_slice(&rest[..n]);
        this.read += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    async fn told(sent: &'static [u8], close: bool) -> Option<(bool, Vec<u8>)> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(sent).await.unwrap();
            if close {
                c.shutdown().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        });
        let (stream, _) = listener.accept().await.unwrap();
        let speaks = detect(stream, Duration::from_millis(100)).await;
        let out = match speaks? {
            Speaks::Http1(mut p) => {
                let mut all = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_millis(50), p.read_to_end(&mut all)).await;
                (false, all)
            }
            Speaks::Http2(mut p) => {
                let mut all = vec![0; PREFACE.len()];
                p.read_exact(&mut all).await.unwrap();
                (true, all)
            }
        };
        client.abort();
        Some(out)
    }

    #[tokio::test]
    async fn the_preface_tells_http2_and_every_byte_is_read_again() {
        let request = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(told(request, true).await, Some((false, request.to_vec())));
        assert_eq!(told(PREFACE, false).await, Some((true, PREFACE.to_vec())));
        // `PRI` alone, then silence: no connection is held past the time-out.
        assert_eq!(told(b"PRI * HT", false).await, None);
        assert_eq!(told(b"", false).await, None);
    }
}
