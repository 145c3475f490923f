//! Passkeys on the pages (feature `passkeys`): the approval page's passkey step, and the
//! [`PasskeyPage`] where approvers register and remove theirs. Each ceremony page runs one
//! inline script, admitted by its hash; everything else is the pages' usual protections (the
//! signed-in principal only, an anti-forgery token bound to the page, the principal and the
//! session and expiring, same origin, no framing, no caching).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Full;

use super::html::{notice, unavailable};
use crate::anti_forgery::{FormPurpose, FormTokens, form_refused};
use crate::defaults::DEFAULT_FORM_TTL;
use crate::encoding::hex;
use crate::entrance::{Entrance, Entry};
use crate::form::form_value;
use crate::passkey::{Binding, PasskeyError, Passkeys};
use crate::skeleton::page_with_script;
use crate::visitor::Visitor;
use maud::{Markup, PreEscaped, html};
use mcp_confirm::Principal;
use mcp_confirm::approval::Approval;
use mcp_confirm::approval::ApprovalDesk;

/// The approval page's passkey step (`js/passkey-assert.js`: `navigator.credentials.get`, then
/// post the assertion), in one scope with what both ceremonies share (`js/passkey-common.js`).
/// The page admits it by its SHA-256, computed from these bytes when the page is written.
const ASSERT_SCRIPT: &str = concat!(
    "(() => {\n",
    include_str!("js/passkey-common.js"),
    include_str!("js/passkey-assert.js"),
    "})();\n"
);

/// The registration (`js/passkey-register.js`: `navigator.credentials.create`, then post the
/// credential), in one scope with what both ceremonies share.
const REGISTER_SCRIPT: &str = concat!(
    "(() => {\n",
    include_str!("js/passkey-common.js"),
    include_str!("js/passkey-register.js"),
    "})();\n"
);

/// JSON inside a `<script type="application/json">`: no `<` that could close it.
fn data_block(json: &str) -> Markup {
    html! {
        script type="application/json" id="options" { (PreEscaped(json.replace('<', "\\u003c"))) }
    }
}

/// The decision a passkey step binds: this approval, its arguments and the narrowing the
/// decision records (`narrowed`), the chosen record and the version the page showed, and the
/// approver.
pub(super) fn binding(
    approval: &Approval,
    chosen: &str,
    narrowed: Option<&str>,
    subject: &str,
) -> Binding {
    let version = approval
        .choices
        .iter()
        .find(|c| c.id == chosen)
        .and_then(|c| c.version.clone())
        .unwrap_or_default();
    Binding {
        approval: approval.id.to_hex(),
        arguments: approval.arguments.map(|a| hex(&a)).unwrap_or_default(),
        narrowed: narrowed.unwrap_or_default().to_owned(),
        chosen: chosen.to_owned(),
        version,
        subject: subject.to_owned(),
    }
}

/// The fields of the decision's form the passkey step posts back as they came: the decision
/// itself, and every narrowing field (`narrow-…`, a `Subset`'s checkboxes each), so that the
/// verified post decides what the first post asked, read the same way.
fn carried(name: &str) -> bool {
    matches!(name, "csrf" | "decision" | "choice" | "typed" | "remember")
        || name.starts_with("narrow-")
}

/// The approval page's passkey step for an approval the rule requires a passkey for, approving
/// `chosen` with the narrowing `narrowed` (as the decision records it): with an assertion in the
/// form, verify it over exactly that decision (`Ok(credential id)`); without one, the page that
/// asks for it, carrying the rest of the form along.
pub(super) async fn step(
    desk: &ApprovalDesk,
    passkeys: &Passkeys,
    approval: &Approval,
    principal: &Principal,
    chosen: &str,
    narrowed: Option<&str>,
    body: &[u8],
) -> Result<String, Response<Full<Bytes>>> {
    let keys = desk;
    let now = desk.now();
    let binding = binding(approval, chosen, narrowed, principal.subject());
    if let (Some(sealed), Some(response)) =
        (form_value(body, "ceremony"), form_value(body, "response"))
    {
        return passkeys
            .verify_assertion(keys, principal.subject(), &binding, &sealed, &response, now)
            .await
            .map_err(|e| {
                desk.refused(&approval.tool, principal, &format!("passkey: {e}"));
                match e {
                    PasskeyError::Store(_) => unavailable(),
                    _ => refused_page(),
                }
            });
    }
    let ceremony = match passkeys
        .start_assertion(keys, principal.subject(), &binding, now)
        .await
    {
        Ok(ceremony) => ceremony,
        Err(PasskeyError::NoPasskey) => {
            return Err(notice(
                StatusCode::FORBIDDEN,
                "Passkey required",
                "This approval must be made with a passkey, and you have none registered. \
                 Register one, then come back.",
            ));
        }
        Err(PasskeyError::Store(_)) => return Err(unavailable()),
        Err(e) => {
            desk.refused(&approval.tool, principal, &format!("passkey: {e}"));
            return Err(refused_page());
        }
    };
    let target = if chosen.is_empty() {
        "this request"
    } else {
        chosen
    };
    // The rest of the form as it was posted, narrowing included, so the verified post decides
    // the same thing; a post that changes any of it no longer matches the challenge.
    let posted: Vec<(String, String)> = form_urlencoded::parse(body)
        .filter(|(name, _)| carried(name))
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect();
    let html = html! {
        p {
            "Confirm with your passkey: approve " strong { (approval.tool) } " on "
            strong { (target) }
            @if !binding.version.is_empty() {
                " " span class="version" { "version " (binding.version) }
            }
            ", requested by " (approval.subject) "."
        }
        @if let Some(narrowed) = narrowed {
            p id="narrowed" { "Narrowed to: " code { (narrowed) } }
        }
        (data_block(&ceremony.options))
        form method="post" id="passkey-form" {
            @for (field, value) in &posted {
                input type="hidden" name=(field) value=(value);
            }
            input type="hidden" name="ceremony" value=(ceremony.sealed);
            input type="hidden" name="response" value="";
        }
        p { button type="button" id="passkey" { "Use my passkey" } }
        p id="status" role="status" {}
    };
    Err(page_with_script(
        StatusCode::OK,
        "Confirm with your passkey",
        html,
        ASSERT_SCRIPT,
    ))
}

fn refused_page() -> Response<Full<Bytes>> {
    notice(
        StatusCode::FORBIDDEN,
        "Passkey not accepted",
        "The passkey did not confirm this decision. Nothing changed; reload the approval \
         page to try again.",
    )
}

/// Where approvers register and remove their passkeys: `GET` lists the signed-in principal's
/// passkeys and offers to register one; `POST` registers (`action=register`) or removes
/// (`action=remove`). Get it from
/// [`LayerPages::passkey_page`](crate::LayerPages::passkey_page).
#[derive(Clone)]
pub struct PasskeyPage {
    desk: ApprovalDesk,
    passkeys: Passkeys,
    sign_in: Option<String>,
    form_ttl: Duration,
}

impl std::fmt::Debug for PasskeyPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasskeyPage")
            .field("sign_in", &self.sign_in)
            .field("form_ttl", &self.form_ttl)
            .finish_non_exhaustive()
    }
}

impl PasskeyPage {
    pub(crate) fn new(desk: ApprovalDesk, passkeys: Passkeys) -> Self {
        Self {
            desk,
            passkeys,
            sign_in: None,
            form_ttl: DEFAULT_FORM_TTL,
        }
    }

    /// Where a visitor who is not signed in is sent, as for the approval page.
    #[must_use]
    pub fn sign_in_url(mut self, url: impl Into<String>) -> Self {
        self.sign_in = Some(url.into());
        self
    }

    /// How long the page's forms stay good once shown (default
    /// [`DEFAULT_FORM_TTL`](crate::DEFAULT_FORM_TTL), 30 minutes); a form posted later
    /// is refused, and the page asks to be reloaded.
    #[must_use]
    pub fn form_ttl(mut self, ttl: Duration) -> Self {
        self.form_ttl = ttl;
        self
    }

    fn passkeys(&self) -> Option<(&Passkeys, &ApprovalDesk)> {
        Some((&self.passkeys, &self.desk))
    }

    fn tokens(&self) -> FormTokens<'_> {
        FormTokens::new(&self.desk, self.form_ttl)
    }

    async fn answer<B>(self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let entrance = Entrance {
            desk: &self.desk,
            posts: true,
            origin: self.desk.approval_url(),
            sign_in: self.sign_in.as_deref(),
            sign_in_title: "Sign in to manage your passkeys",
            channel: "passkey_page",
            name: "the passkey page",
            lists: crate::form::no_lists,
        };
        let (visitor, body) = match entrance.enter(request).await {
            Ok(Entry::Show(visitor)) => return self.show(&visitor, None).await,
            Ok(Entry::Post(visitor, body)) => (visitor, body),
            Err(answer) => return answer,
        };
        if !self
            .tokens()
            .accepts(FormPurpose::PasskeyPage, &visitor, &body)
        {
            return form_refused(
                &self.desk,
                "passkey_page",
                &visitor.principal,
                "passkey POST without a valid anti-forgery token",
            );
        }
        let principal = &visitor.principal;
        let Some((passkeys, keys)) = self.passkeys() else {
            return unavailable();
        };
        let now = self.desk.now();
        match form_value(&body, "action").as_deref() {
            Some("register") => {
                let (Some(sealed), Some(response)) =
                    (form_value(&body, "ceremony"), form_value(&body, "response"))
                else {
                    return self.show(&visitor, Some("No passkey was posted.")).await;
                };
                let name = form_value(&body, "name").unwrap_or_default();
                let name = if name.trim().is_empty() {
                    "passkey".to_owned()
                } else {
                    name
                };
                match passkeys
                    .finish_registration(keys, principal.subject(), &sealed, &response, &name, now)
                    .await
                {
                    Ok(_) => self.show(&visitor, None).await,
                    Err(PasskeyError::Store(_)) => unavailable(),
                    Err(e) => {
                        self.desk
                            .refused("-", principal, &format!("passkey registration: {e}"));
                        self.show(&visitor, Some("The passkey was not registered."))
                            .await
                    }
                }
            }
            Some("remove") => {
                let id = form_value(&body, "id").unwrap_or_default();
                match passkeys.remove(principal.subject(), &id).await {
                    Ok(_) => self.show(&visitor, None).await,
                    Err(_) => unavailable(),
                }
            }
            _ => notice(StatusCode::BAD_REQUEST, "Refused", "Register or remove."),
        }
    }

    async fn show(&self, visitor: &Visitor, error: Option<&str>) -> Response<Full<Bytes>> {
        let principal = &visitor.principal;
        let Some((passkeys, keys)) = self.passkeys() else {
            return unavailable();
        };
        let now = self.desk.now();
        let Ok(held) = passkeys.registered(principal.subject()).await else {
            return unavailable();
        };
        let Ok(ceremony) = passkeys
            .start_registration(keys, principal.subject(), now)
            .await
        else {
            return unavailable();
        };
        let token = self.tokens().issue(FormPurpose::PasskeyPage, visitor);
        let html = html! {
            @if let Some(error) = error {
                p class="error" role="alert" { (error) }
            }
            @if held.is_empty() {
                p id="none" { "You have no passkey registered." }
            } @else {
                ul id="passkeys" {
                    @for p in &held {
                        li {
                            strong { (p.name) } " "
                            form method="post" style="display:inline" {
                                input type="hidden" name="csrf" value=(token);
                                input type="hidden" name="action" value="remove";
                                input type="hidden" name="id" value=(p.id);
                                button type="submit" { "Remove" }
                            }
                        }
                    }
                }
            }
            (data_block(&ceremony.options))
            form method="post" id="passkey-form" {
                input type="hidden" name="csrf" value=(token);
                input type="hidden" name="action" value="register";
                input type="hidden" name="ceremony" value=(ceremony.sealed);
                input type="hidden" name="response" value="";
                p {
                    label { "Name: " input name="name" id="name" value="passkey" maxlength="64"; }
                }
            }
            p { button type="button" id="passkey" { "Register a passkey" } }
            p id="status" role="status" {}
        };
        page_with_script(StatusCode::OK, "Your passkeys", html, REGISTER_SCRIPT)
    }
}

crate::service::page_service!(PasskeyPage);
