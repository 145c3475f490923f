//! The bodies of [`Confirm`](crate::Confirm) over HTTP: the request body the inner service receives
//! and the response body the layer returns.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::completion::CompletionGuard;

/// Bytes sent as one data frame, then the end of the body.
#[derive(Debug)]
struct Once(Option<Bytes>);

impl Once {
    fn new(bytes: Option<Bytes>) -> Self {
        Self(bytes.filter(|b| !b.is_empty()))
    }

    fn poll_frame<E>(&mut self) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}

pin_project! {
    /// The body of a request forwarded to the inner service: the original body when the layer did
    /// not need to read it (anything but POST), or the buffered bytes it read and checked.
    #[project = RequestBodyProj]
    pub struct RequestBody<B> {
        #[pin]
        kind: RequestKind<B>,
    }
}

pin_project! {
    #[project = RequestKindProj]
    enum RequestKind<B> {
        Streaming { #[pin] body: B },
        Buffered { bytes: Once },
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn streaming(body: B) -> Self {
        Self {
            kind: RequestKind::Streaming { body },
        }
    }

    pub(crate) fn buffered(bytes: Bytes) -> Self {
        Self {
            kind: RequestKind::Buffered {
                bytes: Once::new(Some(bytes)),
            },
        }
    }
}

impl<B> std::fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestBody")
    }
}

impl<B: Body<Data = Bytes>> Body for RequestBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            RequestKindProj::Streaming { body } => body.poll_frame(cx),
            RequestKindProj::Buffered { bytes } => bytes.poll_frame(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Streaming { body } => body.is_end_stream(),
            RequestKind::Buffered { bytes } => bytes.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Streaming { body } => body.size_hint(),
            RequestKind::Buffered { bytes } => bytes.size_hint(),
        }
    }
}

pin_project! {
    /// The body of a response from a [`Confirm`](crate::Confirm) service: the inner service's body,
    /// streamed through unchanged, or a JSON body the layer wrote itself.
    pub struct ResponseBody<B> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseKindProj]
    enum ResponseKind<B> {
        Inner { #[pin] body: B, guard: Option<CompletionGuard> },
        Own { bytes: Once },
    }
}

impl<B> ResponseBody<B> {
    /// The inner body; `guard` completes the claimed nonce when the stream ends or is dropped.
    pub(crate) fn inner(body: B, guard: Option<CompletionGuard>) -> Self {
        Self {
            kind: ResponseKind::Inner { body, guard },
        }
    }

    pub(crate) fn own(bytes: Option<Bytes>) -> Self {
        Self {
            kind: ResponseKind::Own {
                bytes: Once::new(bytes),
            },
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseBody")
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            ResponseKindProj::Inner { body, guard } => {
                let frame = std::task::ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // End of stream or an error: the call is over.
                    drop(guard.take());
                }
                Poll::Ready(frame)
            }
            ResponseKindProj::Own { bytes } => bytes.poll_frame(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Inner { body, .. } => body.is_end_stream(),
            ResponseKind::Own { bytes } => bytes.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Inner { body, .. } => body.size_hint(),
            ResponseKind::Own { bytes } => bytes.size_hint(),
        }
    }
}
