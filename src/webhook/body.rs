//! Reading an AdmissionReview body: at most [`MAX_BODY_BYTES`], into one buffer.
//!
//! axum's `Bytes` extractor collects the frames and then copies them into one contiguous buffer,
//! so a body arriving in many frames is held twice at its peak. Here the buffer is sized once
//! from the declared length (already checked against the limit before the body was read), and a
//! body that arrives in a single frame (most small ones) is used as it came, without a copy.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use futures::StreamExt as _;
use http_body::Body as _;

use super::body_deadline::BodyDeadlineExceeded;
use super::limits::MAX_BODY_BYTES;

/// Why the body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// More than [`MAX_BODY_BYTES`] (declared, or sent without a length).
    TooLarge,
    /// The whole-body deadline passed.
    TooSlow(BodyDeadlineExceeded),
    /// The client broke off or sent a malformed body.
    Broken(String),
    /// Cut off while incomplete: the receive buffer was full and this body had been incomplete
    /// the longest (see `receive`).
    Preempted,
}

/// The request body, read whole.
pub struct ReviewBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ReviewBody {
    type Rejection = BodyError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, BodyError> {
        read(request.into_body(), MAX_BODY_BYTES)
            .await
            .map(ReviewBody)
    }
}

/// Reads `body` whole, failing once it exceeds `limit`.
pub async fn read(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let declared = body.size_hint().exact();
    if declared.is_some_and(|d| d > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut frames = body.into_data_stream();
    let mut first: Option<Bytes> = None;
    let mut joined: Option<Vec<u8>> = None;
    while let Some(frame) = frames.next().await {
        let chunk = frame.map_err(|e| match BodyDeadlineExceeded::in_chain(&e) {
            Some(deadline) => BodyError::TooSlow(BodyDeadlineExceeded(deadline.0)),
            None => BodyError::Broken(e.to_string()),
        })?;
        let so_far = joined
            .as_ref()
            .map_or_else(|| first.as_ref().map_or(0, Bytes::len), Vec::len);
        if so_far + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        match (&mut joined, first.take()) {
            (Some(buffer), _) => buffer.extend_from_slice(&chunk),
            (None, None) => first = Some(chunk),
            (None, Some(head)) => {
                // A second frame: one buffer for the whole body, sized from what the client
                // declared when it did (never more than the limit).
                let capacity = declared
                    .map_or(0, |d| d as usize)
                    .max(head.len() + chunk.len());
                let mut buffer = Vec::with_capacity(capacity);
                buffer.extend_from_slice(&head);
                buffer.extend_from_slice(&chunk);
                joined = Some(buffer);
            }
        }
    }
    Ok(match joined {
        Some(buffer) => Bytes::from(buffer),
        None => first.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            chunks.iter().map(|c| Ok(Bytes::from_static(c))).collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn joins_frames_and_keeps_a_single_one_as_it_came() {
        let got = read(chunked(&[b"{\"a\"", b":1", b"}"]), 100).await.unwrap();
        assert_eq!(&got[..], b"{\"a\":1}");
        let single = Bytes::from_static(b"{}");
        let got = read(Body::from(single.clone()), 100).await.unwrap();
        assert_eq!(got.as_ptr(), single.as_ptr(), "no copy of a single frame");
        assert!(read(Body::empty(), 100).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_fails_declared_or_not() {
        assert!(matches!(
            read(Body::from(vec![b' '; 101]), 100).await,
            Err(BodyError::TooLarge)
        ));
        assert!(matches!(
            read(chunked(&[&[b' '; 60], &[b' '; 41]]), 100).await,
            Err(BodyError::TooLarge)
        ));
        assert_eq!(
            read(chunked(&[&[b' '; 60], &[b' '; 40]]), 100)
                .await
                .unwrap()
                .len(),
            100
        );
    }
}
