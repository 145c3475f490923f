//! The bodies of [`Confirm`](crate::Confirm) over HTTP: the request body the inner service receives
//! and the response body the layer returns.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::completion::CompletionGuard;
use crate::listing::{Marked, Marker};

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
    pub struct RequestBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn streaming(body: B) -> Self {
        Self {
            kind: Kind::Passed { body },
        }
    }

    pub(crate) fn buffered(bytes: Bytes) -> Self {
        Self {
            kind: Kind::own(Some(bytes)),
        }
    }
}

pin_project! {
    /// The body of a response from a [`Confirm`](crate::Confirm) service: the inner service's body,
    /// streamed through unchanged (a `tools/list` answer with the confirmed tools marked), or a
    /// JSON body the layer wrote itself.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<Guarded<Marked<B>>>,
    }
}

impl<B> ResponseBody<B> {
    /// The inner body; `guard` completes the claimed nonce when the stream ends or is dropped.
    pub(crate) fn inner(body: B, guard: Option<CompletionGuard>) -> Self {
        Self {
            kind: Kind::Passed {
                body: Guarded {
                    body: Marked::new(body, None),
                    guard,
                },
            },
        }
    }

    /// The inner body of a `tools/list` answer, with the confirmed tools marked on the way.
    pub(crate) fn listing(body: B, marker: Marker) -> Self {
        Self {
            kind: Kind::Passed {
                body: Guarded {
                    body: Marked::new(body, Some(marker)),
                    guard: None,
                },
            },
        }
    }

    pub(crate) fn own(bytes: Option<Bytes>) -> Self {
        Self {
            kind: Kind::own(bytes),
        }
    }
}

/// `Debug` (the type's name) and `Body` (its kind's) for the public body types.
macro_rules! body_of_kind {
    ($($name:ident),+) => {$(
        impl<B> std::fmt::Debug for $name<B> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($name))
            }
        }

        impl<B: Body<Data = Bytes>> Body for $name<B> {
            type Data = Bytes;
            type Error = B::Error;

            fn poll_frame(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                self.project().kind.poll_frame(cx)
            }

            fn is_end_stream(&self) -> bool {
                self.kind.is_end_stream()
            }

            fn size_hint(&self) -> SizeHint {
                self.kind.size_hint()
            }
        }
    )+};
}

body_of_kind!(RequestBody, ResponseBody);

pin_project! {
    // Either body: another body passed through unchanged (a request's original body, the inner
    // service's response), or bytes the layer holds itself (a request it buffered and checked, a
    // response it wrote).
    #[project = KindProj]
    enum Kind<P> {
        Passed { #[pin] body: P },
        Own { bytes: Once },
    }
}

impl<P> Kind<P> {
    fn own(bytes: Option<Bytes>) -> Self {
        Self::Own {
            bytes: Once::new(bytes),
        }
    }
}

impl<P: Body<Data = Bytes>> Body for Kind<P> {
    type Data = Bytes;
    type Error = P::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project() {
            KindProj::Passed { body } => body.poll_frame(cx),
            KindProj::Own { bytes } => bytes.poll_frame(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Passed { body } => body.is_end_stream(),
            Self::Own { bytes } => bytes.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Passed { body } => body.size_hint(),
            Self::Own { bytes } => bytes.size_hint(),
        }
    }
}

pin_project! {
    // The inner service's response body, with the guard that completes the claimed nonce once the
    // body has ended or failed (or, by dropping the guard, once the body is dropped).
    struct Guarded<B> {
        #[pin]
        body: B,
        guard: Option<CompletionGuard>,
    }
}

impl<B: Body<Data = Bytes>> Body for Guarded<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.body.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            // End of stream or an error: the call is over.
            drop(this.guard.take());
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
