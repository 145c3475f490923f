//! The bodies of [`Confirm`](crate::Confirm) over HTTP: the request body the inner service receives
//! and the response body the layer returns.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use std::sync::Arc;

use crate::completion::CompletionGuard;
use crate::config::Config;
use crate::message;
use crate::protocol::{Reply, RpcError};

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
                    body: Marked { body, marker: None },
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
                    body: Marked {
                        body,
                        marker: Some(marker),
                    },
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

/// How a `tools/list` answer is marked: which tools, in which framing, up to how many bytes held.
#[derive(Debug)]
pub(crate) struct Marker {
    config: Arc<Config>,
    sse: bool,
    limit: usize,
    /// The raw id of the `tools/list` request, for the error that replaces an unreadable answer.
    id: String,
    held: Vec<u8>,
    /// How much of `held` was already searched for the end of an event (SSE).
    scanned: usize,
    /// A frame that came after held bytes that had to go out first.
    pending: Option<Frame<Bytes>>,
    state: Marking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marking {
    /// Holding bytes until they can be rewritten: the whole answer (JSON), or whole events (SSE).
    Holding,
    /// Past a trailer: the rest goes through untouched.
    Passing,
    /// The inner body ended and everything held went out.
    Done,
}

impl Marker {
    /// `sse`: the answer is `text/event-stream` (marked event by event), else JSON (marked whole).
    /// Never holds more than `limit` bytes: an answer (SSE: an event) larger than that is
    /// replaced by a JSON-RPC error for the request `id`, and the layer stops trusting what it
    /// learnt of the listed tools ([`Config::listing_unread`]).
    pub(crate) fn new(config: Arc<Config>, sse: bool, limit: usize, id: String) -> Self {
        Self {
            config,
            sse,
            limit,
            id,
            held: Vec::new(),
            scanned: 0,
            pending: None,
            state: Marking::Holding,
        }
    }

    /// Marks `bytes` (whole events, or the whole answer), or gives them back as they were.
    fn marked(&self, bytes: Vec<u8>) -> Bytes {
        let mark = |listed: &message::Listed<'_>| self.config.observe_listed(listed);
        let new = if self.sse {
            message::annotate_listing_sse(&bytes, &mark)
        } else {
            message::annotate_listing(&bytes, &mark)
        };
        new.unwrap_or_else(|| Bytes::from(bytes))
    }

    /// What goes out instead of an answer too large to read.
    fn unreadable(&self) -> Bytes {
        self.config
            .listing_unread("a tools/list answer larger than max_listing_bytes");
        let error = Reply::error(Some(&self.id), &RpcError::listing_unreadable())
            .body
            .unwrap_or_default();
        if !self.sse {
            return error;
        }
        let mut event = Vec::with_capacity(error.len() + 24);
        event.extend_from_slice(b"event: message\ndata: ");
        event.extend_from_slice(&error);
        event.extend_from_slice(b"\n\n");
        Bytes::from(event)
    }

    /// For SSE, the held bytes up to the end of the last complete event. Only bytes not looked
    /// at before are searched, so a large event arriving in small reads costs linear time.
    fn complete_events(&mut self) -> Option<Vec<u8>> {
        let found = message::last_event_end(&self.held, self.scanned);
        self.scanned = self.held.len();
        let end = found?;
        let rest = self.held.split_off(end);
        self.scanned = rest.len();
        Some(std::mem::replace(&mut self.held, rest))
    }
}

pin_project! {
    // The inner service's response body, marked on the way when it answers `tools/list`.
    struct Marked<B> {
        #[pin]
        body: B,
        marker: Option<Marker>,
    }
}

impl<B: Body<Data = Bytes>> Body for Marked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let Some(marker) = this.marker else {
            return this.body.poll_frame(cx);
        };
        let mut body = this.body;
        loop {
            match marker.state {
                Marking::Done => return Poll::Ready(None),
                Marking::Passing => {
                    if let Some(frame) = marker.pending.take() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    return body.as_mut().poll_frame(cx);
                }
                Marking::Holding => {}
            }
            let frame = match std::task::ready!(body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    marker.state = Marking::Done;
                    let held = std::mem::take(&mut marker.held);
                    if held.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(marker.marked(held)))));
                }
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(trailers) => {
                    // Trailers end the data: what is held goes out first, then they do.
                    marker.state = Marking::Passing;
                    let held = std::mem::take(&mut marker.held);
                    if held.is_empty() {
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                    marker.pending = Some(trailers);
                    return Poll::Ready(Some(Ok(Frame::data(marker.marked(held)))));
                }
            };
            if marker.held.len() + data.len() > marker.limit {
                // Too large to read: it would go out unmarked, with the declaration marks in and
                // its tools unseen. It does not go out; the error does, and nothing more.
                marker.state = Marking::Done;
                marker.held = Vec::new();
                return Poll::Ready(Some(Ok(Frame::data(marker.unreadable()))));
            }
            marker.held.extend_from_slice(&data);
            if marker.sse
                && let Some(events) = marker.complete_events()
            {
                return Poll::Ready(Some(Ok(Frame::data(marker.marked(events)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.marker {
            None => self.body.is_end_stream(),
            Some(marker) => marker.state == Marking::Done,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.marker {
            None => self.body.size_hint(),
            // The marks change the length.
            Some(_) => SizeHint::default(),
        }
    }
}
