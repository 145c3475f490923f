//! The streaming side of marking: a `tools/list` answer held (whole for JSON, event by event
//! for SSE) up to its cap, rewritten, and let out; one too large to read is replaced by an error.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::ToolListing;
use super::rewrite::{self, Listed};
use crate::protocol::{Reply, RpcError};

/// How a `tools/list` answer is marked: which tools, in which framing, up to how many bytes held.
#[derive(Debug)]
pub(crate) struct Marker {
    listing: Arc<ToolListing>,
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
    /// learnt of the listed tools ([`ToolListing::unread`]).
    pub(crate) fn new(listing: Arc<ToolListing>, sse: bool, limit: usize, id: String) -> Self {
        Self {
            listing,
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
        let mark = |listed: &Listed<'_>| self.listing.observe(listed);
        let new = if self.sse {
            rewrite::annotate_sse(&bytes, &mark)
        } else {
            rewrite::annotate(&bytes, &mark)
        };
        new.unwrap_or_else(|| Bytes::from(bytes))
    }

    /// What goes out instead of an answer too large to read.
    fn unreadable(&self) -> Bytes {
        self.listing
            .unread("a tools/list answer larger than max_listing_bytes");
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
        let found = rewrite::last_event_end(&self.held, self.scanned);
        self.scanned = self.held.len();
        let end = found?;
        let rest = self.held.split_off(end);
        self.scanned = rest.len();
        Some(std::mem::replace(&mut self.held, rest))
    }
}

pin_project! {
    /// The inner service's response body, marked on the way when it answers `tools/list`.
    pub(crate) struct Marked<B> {
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

impl<B> Marked<B> {
    /// `body`, marked by `marker` when it answers `tools/list`, else as it is.
    pub(crate) fn new(body: B, marker: Option<Marker>) -> Self {
        Self { body, marker }
    }
}
