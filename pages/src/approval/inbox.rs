//! The approver's inbox: one page listing the approvals waiting for the signed-in principal,
//! newest first, each linking to its approval page; calls the approval page would decide as one
//! batch are listed as one row, linking to it. It only reads; every decision is made on
//! the approval page, under its rules (admission, anti-forgery, same origin, passkey).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;

use super::html::{page, unavailable};
use crate::defaults::DEFAULT_BATCH_WINDOW;
use crate::entrance::Entrance;
use crate::skeleton::http_date;
use maud::{Markup, html};
use mcp_confirm::approval::Approval;
use mcp_confirm::approval::ApprovalDesk;
use mcp_confirm::approval::batch::{self, MAX_BATCH};

/// The most approvals the inbox lists.
pub const INBOX_LIMIT: usize = 50;

/// The inbox: `GET` lists the approvals the signed-in principal may decide and has not yet
/// approved, newest first, with their expiry and each one's link. Get it from
/// [`LayerPages::inbox_page`](crate::LayerPages::inbox_page) and mount it behind the same
/// authentication as the approval page.
#[derive(Clone)]
pub struct InboxPage {
    desk: ApprovalDesk,
    sign_in: Option<String>,
    batch_window: Duration,
}

impl std::fmt::Debug for InboxPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxPage")
            .field("sign_in", &self.sign_in)
            .finish_non_exhaustive()
    }
}

impl InboxPage {
    pub(crate) fn new(desk: ApprovalDesk) -> Self {
        Self {
            desk,
            sign_in: None,
            batch_window: DEFAULT_BATCH_WINDOW,
        }
    }

    /// The window within which calls are listed as one batch: give it the
    /// [approval page's](crate::ApprovalPage::batch_window), so a listed batch is the
    /// one its page shows.
    #[must_use]
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.batch_window = window;
        self
    }

    /// Where a visitor who is not signed in is sent, as for the
    /// [approval page](crate::ApprovalPage::sign_in_url).
    #[must_use]
    pub fn sign_in_url(mut self, url: impl Into<String>) -> Self {
        self.sign_in = Some(url.into());
        self
    }

    async fn answer<B>(self, request: Request<B>) -> Response<Full<Bytes>> {
        let entrance = Entrance {
            // Only who authentication says, as on the approval page.
            desk: &self.desk,
            posts: false,
            origin: None,
            sign_in: self.sign_in.as_deref(),
            sign_in_title: "Sign in to see your approvals",
            channel: "inbox",
            name: "the inbox",
            // It takes no posts.
            lists: crate::form::no_lists,
        };
        // It only reads: `GET` alone, and nothing of a body is taken.
        let visitor = match entrance.admit(&request) {
            Ok((visitor, _)) => visitor,
            Err(answer) => return answer,
        };
        let Ok(waiting) = self.desk.inbox(&visitor.principal, INBOX_LIMIT).await else {
            return unavailable();
        };
        page(
            StatusCode::OK,
            "Approvals waiting for you",
            self.render(&waiting),
        )
    }

    fn render(&self, waiting: &[Approval]) -> Markup {
        if waiting.is_empty() {
            return html! { p id="empty" { "Nothing waits for your approval." } };
        }
        let base = self.desk.approval_url().unwrap_or_default();
        let (batches, single) = batches(waiting, self.batch_window);
        html! {
            @if !batches.is_empty() {
                ul id="batches" {
                    @for batch in &batches {
                        @let first = batch[0];
                        li {
                            a href={ (base) (first.id.to_hex()) } id={ "batch-" (first.id.to_hex()) } {
                                strong { (batch.len()) " requests" }
                            }
                            " requested together by " (first.subject) ", decided together: "
                            @for (i, a) in batch.iter().enumerate() {
                                @if i > 0 { ", " }
                                (a.tool)
                            }
                            " · expires " (http_date(batch.iter().map(|a| a.expires_at).min().unwrap_or(first.expires_at)))
                        }
                    }
                }
            }
            ul id="inbox" {
                @for a in single {
                    li {
                        a href={ (base) (a.id.to_hex()) } id={ "approval-" (a.id.to_hex()) } {
                            strong { (a.tool) }
                        }
                        " requested by " (a.subject)
                        " · " (a.endorsements.len()) " of " (a.approvers.required_approvals())
                        " approvals · expires " (http_date(a.expires_at))
                        @if a.approvers.needs_passkey() {
                            " · passkey"
                        }
                    }
                }
            }
        }
    }
}

/// The approvals that the approval page would show as one batch, grouped (each group oldest
/// first, as the page lists them), and the rest. A group is what [`batch::batchable`] admits
/// with its oldest member, so following its link shows the same list.
fn batches(waiting: &[Approval], window: Duration) -> (Vec<Vec<&Approval>>, Vec<&Approval>) {
    let mut oldest_first: Vec<&Approval> = waiting.iter().collect();
    oldest_first.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then(a.id.as_bytes().cmp(b.id.as_bytes()))
    });
    let mut groups: Vec<Vec<&Approval>> = Vec::new();
    let mut single = Vec::new();
    let mut taken = vec![false; oldest_first.len()];
    for (i, anchor) in oldest_first.iter().enumerate() {
        if taken[i] {
            continue;
        }
        let mut group = vec![*anchor];
        for (j, other) in oldest_first.iter().enumerate().skip(i + 1) {
            if !taken[j] && group.len() < MAX_BATCH && batch::batchable(anchor, other, window) {
                taken[j] = true;
                group.push(*other);
            }
        }
        if group.len() >= 2 {
            groups.push(group);
        } else {
            single.push(*anchor);
        }
    }
    // The rest newest first, as before.
    single.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then(a.id.as_bytes().cmp(b.id.as_bytes()))
    });
    (groups, single)
}

crate::service::page_service!(InboxPage);
