//! A request body cachet does not read (a file upload, a message batch, any call but a
//! generation) goes upstream frame by frame as it arrives from the client. It is never
//! gathered, so `server.max_body_bytes` does not bound it and it holds no more memory than
//! a frame in flight; the provider's own limits apply, as they would without cachet.
//!
//! A client that sends nothing for `server.body_read_timeout_ms` cuts the body off, and the
//! upstream never receives the request whole; the client is answered with the 408 a body
//! cachet reads gets. The answer's time-out (`upstream.response_timeout_ms`) starts once
//! the body has been sent whole, not with its first byte: a large upload on a slow link
//! takes longer to send than an answer takes to come.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;

/// The client's body on its way upstream.
pub struct ArrivingBody {
    body: Incoming,
    /// How long the client may send nothing.
    idle: Duration,
    quiet: Pin<Box<Sleep>>,
    failure: Arc<OnceLock<ApiError>>,
    /// Told once the last frame has been handed over.
    sent: Option<oneshot::Sender<()>>,
}

/// How the body's journey went, for whoever waits on the upstream's answer.
pub struct Arrival {
    failure: Arc<OnceLock<ApiError>>,
    sent: oneshot::Receiver<()>,
}

/// A body that could not be sent whole: the client stopped sending it, or it broke off.
#[derive(Debug)]
pub struct CutOff;

impl std::fmt::Display for CutOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client's request body was cut off")
    }
}

impl std::error::Error for CutOff {}

impl ArrivingBody {
    /// The client's `body`, cut off after `idle` without a frame.
    pub fn new(body: Incoming, idle: Duration) -> (ArrivingBody, Arrival) {
        let failure = Arc::new(OnceLock::new());
        let (tx, rx) = oneshot::channel();
        let body = ArrivingBody {
            body,
            idle,
            quiet: Box::pin(tokio::time::sleep(idle)),
            failure: failure.clone(),
            sent: Some(tx),
        };
        (body, Arrival { failure, sent: rx })
    }

    fn cut_off(&mut self, why: ApiError) -> Poll<Option<Result<Frame<Bytes>, CutOff>>> {
        tracing::debug!("request body cut off on its way upstream: {}", why.message);
        let _ = self.failure.set(why);
        Poll::Ready(Some(Err(CutOff)))
    }
}

impl Body for ArrivingBody {
    type Data = Bytes;
    type Error = CutOff;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, CutOff>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = Instant::now() + this.idle;
                this.quiet.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => this.cut_off(super::http::body_unreadable(&e)),
            Poll::Ready(None) => {
                if let Some(sent) = this.sent.take() {
                    let _ = sent.send(());
                }
                Poll::Ready(None)
            }
            Poll::Pending => match this.quiet.as_mut().poll(cx) {
                Poll::Ready(()) => this.cut_off(super::http::body_late(this.idle)),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Arrival {
    /// `answer`, given `timeout` from the moment the body has been sent whole (or could not
    /// be, or was let go of unsent: an upstream may answer before reading it all).
    pub async fn answered_within<F: Future>(
        mut self,
        timeout: Duration,
        answer: F,
    ) -> (
        Result<F::Output, tokio::time::error::Elapsed>,
        Option<ApiError>,
    ) {
        tokio::pin!(answer);
        let answered = tokio::select! {
            answered = &mut answer => Ok(answered),
            _ = &mut self.sent => tokio::time::timeout(timeout, &mut answer).await,
        };
        (answered, self.failure.get().cloned())
    }
}
