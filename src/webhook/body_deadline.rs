//! A deadline on reading a request body.
//!
//! hyper's `header_read_timeout` and axum-server's `first_request_timeout` both stop once the
//! request head has arrived, so a client that declares a `Content-Length` and then trickles the
//! body (or stalls) would hold a connection and a handler task forever. tower-http's body
//! timeout resets on every frame, which a one-byte-per-second client defeats, so the deadline
//! here is for the whole body.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// The error a body reports once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyDeadlineExceeded(pub Duration);

impl BodyDeadlineExceeded {
    /// Finds the deadline error in the source chain of whatever wrapped it (axum's rejection
    /// types wrap body errors two or three times).
    pub fn in_chain<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Self> {
        std::iter::successors(Some(error), |e| e.source()).find_map(|e| e.downcast_ref())
    }
}

/// Replaces the request body with one that fails once `limit` has passed since now (the
/// moment the request head was dispatched).
pub async fn with_body_deadline(limit: Duration, request: Request) -> Request {
    request.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep(limit)),
            limit,
        })
    })
}

struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // Data that is already here wins over the deadline.
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyDeadlineExceeded(self.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_stalled_body_fails_with_the_deadline_error() {
        let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let request = Request::new(Body::from_stream(rx));
        let request = with_body_deadline(Duration::from_millis(50), request).await;
        futures::SinkExt::send(&mut tx, Ok(Bytes::from_static(b"{")))
            .await
            .unwrap();
        let err = axum::body::to_bytes(request.into_body(), usize::MAX)
            .await
            .unwrap_err();
        let found = BodyDeadlineExceeded::in_chain(&err).expect("deadline error in chain");
        assert_eq!(found.0, Duration::from_millis(50));
        // The sender lives until here: a dropped sender would end the body instead of stalling it.
        drop(tx);
    }

    #[tokio::test]
    async fn a_complete_body_passes_unchanged() {
        let request = Request::new(Body::from("{\"a\":1}"));
        let request = with_body_deadline(Duration::from_millis(50), request).await;
        let mut stream = request.into_body().into_data_stream();
        let mut got = Vec::new();
        while let Some(chunk) = stream.next().await {
            got.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(got, b"{\"a\":1}");
    }
}
