//! Attributes that declare [mcp-confirm](https://docs.rs/mcp-confirm) confirmations where the tools
//! are defined, next to rmcp's `#[tool]`, so the list of confirmed tools cannot drift from the
//! list of tools. Use them through `mcp-confirm`'s `macros` feature:
//! `mcp_confirm::{confirm_router, confirm}`.
//!
//! ```ignore
//! #[confirm_router]          // above or below #[tool_router]
//! #[tool_router]
//! impl NotesServer {
//!     #[tool(description = "Delete one note", annotations(destructive_hint = true))]
//!     #[confirm(pick_one = Self::matching_notes, revalidate = Self::still_same,
//!               message = "Choose one matching note and confirm deletion.")]
//!     async fn notes_delete(&self, confirmation: Confirmation, /* … */) -> Result<CallToolResult, ErrorData> {
//!         let (id, version) = confirmation.chosen_with_version()?;
//!         /* … */
//!     }
//! }
//! // ConfirmLayer::builder(keys).declarations(server.confirm_declarations())
//! ```
//!
//! One file per attribute: `confirm.rs` (the keys of `#[confirm]`), `router.rs`
//! (`#[confirm_router]`), and `tool.rs` (what is read from and written into rmcp's `#[tool]`).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::ItemImpl;

mod confirm;
mod router;
mod tool;

/// Reads the `#[confirm(…)]` attributes of an impl block's `#[tool]` methods, guards the handlers
/// that must not run unconfirmed, and generates `confirm_declarations()` (and
/// `confirm_policies()`).
///
/// Put it on every impl with `#[tool]` methods, above or below rmcp's `#[tool_router]`. For each
/// `#[tool]` method:
///
/// - **with `#[confirm(…)]`**: its policy joins `confirm_declarations()`; its definition is
///   marked `_meta["io.github.mcp-confirm/declared"] = {"kind": "pick_one" | "confirm"}`, so a
///   layer built with the tool list but without the policy fails to build; and its handler gets a
///   hidden first parameter, `mcp_confirm::rmcp::Confirmation`, that refuses the call (a JSON-RPC
///   error, an audit event, nothing run) unless the layer confirmed exactly this call;
/// - **without `#[confirm]`, destructive by its annotations** (the spec's defaults: not
///   `read_only_hint = true`, not `destructive_hint = false`): marked `"destructive"` and guarded
///   the same way, so the layer must confirm it (`confirm_destructive`), or exempt it;
/// - **otherwise**: left as it is.
///
/// `#[confirm_router(skip_handler_guards)]` marks the definitions but adds no guards: only for a
/// server whose transport cannot carry the layer's verdict to the handler (rmcp over stdio behind
/// the layer's message service), where the layer is the only way in.
///
/// Keys of `#[confirm]`:
///
/// | key | value | builder call |
/// |---|---|---|
/// | (none) | | `ToolPolicy::confirm_only()` |
/// | `pick_one` | `Self::method` (`async fn(&self, Lookup) -> Result<Vec<Candidate>, PolicyError>`) or a function path (`async fn(Lookup) -> …`) | `ToolPolicy::pick_one` |
/// | `revalidate` | `Self::method` (`async fn(&self, Revalidation) -> Result<(), Refusal>`) or a function path | `.revalidate` |
/// | `when` | `Self::method` (`async fn(&self, Lookup) -> Result<bool, PolicyError>`) or a function path | `.when`: confirm only the calls it says need it |
/// | `message`, `input_key`, `confirm_field`, `confirm_title` | string | the builder method of that name |
/// | `choice_field`, `choice_title`, `select_into`, `no_candidates_text` | string, `pick_one` only | the builder method of that name |
/// | `select_header` | string, with `select_into` | `.select_header` |
/// | `max_candidates`, `max_label_chars` | integer, `pick_one` only | the builder method of that name |
/// | `plain_enum`, `without_versions` | flag, `pick_one` only | the builder method of that name |
/// | `claimed_by_handler` | flag | `.claimed_by_handler()` |
/// | `queued` | flag, with `revalidate` | `.queued()`: the work runs later, from a durable grant |
/// | `approve_in_browser`, `require_typed_id` | flag | the builder method of that name: approval on the layer's page |
/// | `batch_group` | string | `.batch_group(…)`: waiting calls of the group's tools decided together on the page |
/// | `narrow(subset = ["ids"], at_most = ["limit"], turn_on = ["dry_run"], one_of(argument = "mode", values = ["archive", "delete"]))` | lists of argument names; `one_of` may repeat, its values narrowest first | `.narrowable(…)` per argument: what an approver may narrow before approving |
/// | `approved_by(anyone_but_caller \| any_of = ["bob", …] \| role = "admin", except_caller, required = 2, passkey, share_candidate_labels, share_argument_values, recheck = …)` | exactly one of the first three; `recheck`: `Self::method` (`async fn(&self, ApproverQuery) -> Result<bool, PolicyError>`) or a function path | `.approved_by(Approvers::…)` and `.recheck_approvers`: someone else decides, on the layer's page |
/// | `standing(up_to = "10m", uses = 20, scope = …)` | `up_to`: `"90s"`, `"10m"` or `"1h"`; `scope`: `Self::method` (`fn(&self, &Lookup) -> Option<String>`) or a function path | `.standing`: the form may also offer a standing approval |
///
/// The rules between keys are `mcp_confirm`'s own (`PolicyShape`), checked at compile time.
/// Methods referred to as `Self::…` are called on a clone of the server taken when
/// `confirm_declarations()` runs, so the server type must be `Clone + Send + Sync + 'static`
/// (rmcp's servers are), and state the hooks must see live belongs behind an `Arc`.
#[proc_macro_attribute]
pub fn confirm_router(attr: TokenStream, item: TokenStream) -> TokenStream {
    // A bad key is reported, and the impl is still expanded (guarded, as by default), so the
    // error is the only one.
    let (args, error) = match router::RouterArgs::parse(attr.into()) {
        Ok(args) => (args, None),
        Err(e) => (router::RouterArgs::default(), Some(e.write_errors())),
    };
    match syn::parse::<ItemImpl>(item) {
        Ok(item) => {
            let expanded = router::expand(&args, item);
            quote!(#error #expanded).into()
        }
        Err(e) => e.into_compile_error().into(),
    }
}

/// Declares how one `#[tool]` method is confirmed. Read (and removed) by
/// [`macro@confirm_router`] on the enclosing impl block; on its own it is an error, so a forgotten
/// `#[confirm_router]` cannot leave a tool silently unconfirmed.
#[proc_macro_attribute]
pub fn confirm(_attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = TokenStream2::from(item);
    let error = syn::Error::new(
        Span::call_site(),
        "#[confirm] is read by #[confirm_router]: put #[confirm_router] on the impl block",
    )
    .into_compile_error();
    quote!(#error #item).into()
}
