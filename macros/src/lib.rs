//! Attributes that declare [mcp-confirm](https://docs.rs/mcp-confirm) confirmations where the tools
//! are defined, next to rmcp's `#[tool]`, so the list of confirmed tools cannot drift from the
//! list of tools. Use them through `mcp-confirm`'s `macros` feature:
//! `mcp_confirm::{confirm_router, confirm}`.
//!
//! ```ignore
//! #[confirm_router]          // above #[tool_router]: it sees the #[tool] attributes unexpanded
//! #[tool_router]
//! impl NotesServer {
//!     #[tool(description = "Delete one note", annotations(destructive_hint = true))]
//!     #[confirm(pick_one = Self::matching_notes, revalidate = Self::still_same,
//!               message = "Choose one matching note and confirm deletion.", select_into = "note_id")]
//!     async fn notes_delete(&self, /* … */) -> Result<CallToolResult, ErrorData> { /* … */ }
//! }
//! // NotesServer::confirm_policies(&server) -> Vec<(String, ToolPolicy)>
//! ```

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, ImplItem, ItemImpl, Lit, LitStr, Meta, Path, Token};

/// Collects the `#[confirm(…)]` attributes of an impl block's `#[tool]` methods into a generated
/// `pub fn confirm_policies(&self) -> Vec<(String, mcp_confirm::ToolPolicy)>`, and removes them.
///
/// Put it above rmcp's `#[tool_router]`. The tool name is `#[tool(name = "…")]` or the method's
/// name. Keys of `#[confirm]`:
///
/// | key | value | builder call |
/// |---|---|---|
/// | (none) | | `ToolPolicy::confirm_only()` |
/// | `pick_one` | `Self::method` (`async fn(&self, Lookup) -> Result<Vec<Candidate>, PolicyError>`) or a function path (`async fn(Lookup) -> …`) | `ToolPolicy::pick_one` |
/// | `revalidate` | `Self::method` (`async fn(&self, Revalidation) -> Result<(), Refusal>`) or a function path | `.revalidate` |
/// | `message`, `input_key`, `confirm_field`, `confirm_title` | string | the builder method of that name |
/// | `choice_field`, `choice_title`, `select_into`, `no_candidates_text` | string, `pick_one` only | the builder method of that name |
/// | `select_header` | string, with `select_into` | `.select_header` |
/// | `max_candidates`, `max_label_chars` | integer, `pick_one` only | the builder method of that name |
/// | `plain_enum`, `without_versions` | flag, `pick_one` only | the builder method of that name |
/// | `claimed_by_handler` | flag | `.claimed_by_handler()` |
/// | `queued` | flag, with `revalidate` | `.queued()`: the work runs later, from a durable grant |
/// | `approve_in_browser`, `require_typed_id` | flag | the builder method of that name: approval on the layer's page |
///
/// Methods referred to as `Self::…` are called on a clone of the server taken when
/// `confirm_policies()` runs, so the server type must be `Clone + Send + Sync + 'static` (rmcp's
/// servers are), and state the hooks must see live (the records they re-check) belongs behind an
/// `Arc`, as rmcp servers keep it.
#[proc_macro_attribute]
pub fn confirm_router(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = TokenStream2::from(attr);
    let result = if attr.is_empty() {
        syn::parse::<ItemImpl>(item).map(expand)
    } else {
        Err(syn::Error::new(
            attr.span(),
            "#[confirm_router] takes no arguments; put the keys on each method's #[confirm(…)]",
        ))
    };
    result.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Declares how one `#[tool]` method is confirmed. Read (and removed) by
/// [`macro@confirm_router`] on the enclosing impl block; on its own it is an error, so a forgotten
/// `#[confirm_router]` cannot leave a tool silently unconfirmed.
#[proc_macro_attribute]
pub fn confirm(_attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = TokenStream2::from(item);
    let error = syn::Error::new(
        Span::call_site(),
        "#[confirm] is read by #[confirm_router]: put #[confirm_router] above #[tool_router] on the impl block",
    )
    .into_compile_error();
    quote!(#error #item).into()
}

/// The impl block without its `#[confirm]` attributes, the generated `confirm_policies`, and a
/// compile error for each misused attribute. The impl is emitted even with errors, so rustc
/// reports the attribute's mistake alone rather than everything that follows from a missing impl.
fn expand(mut item: ItemImpl) -> TokenStream2 {
    let mut policies = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        let mut confirms = Vec::new();
        method.attrs.retain(|attr| {
            let is_confirm = named(attr, "confirm");
            if is_confirm {
                confirms.push(attr.clone());
            }
            !is_confirm
        });
        let Some(first) = confirms.first() else {
            continue;
        };
        let outcome = match confirms.get(1) {
            Some(second) => Err(syn::Error::new_spanned(
                second,
                "one #[confirm] per tool: merge the keys into one attribute",
            )),
            None => tool_name(&method.attrs, &method.sig.ident, first)
                .and_then(|name| policy(first, &name)),
        };
        match outcome {
            Ok(tokens) => policies.push(tokens),
            Err(e) => match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            },
        }
    }
    let errors = errors.map(syn::Error::into_compile_error);
    let (impl_generics, _, where_clause) = item.generics.split_for_impl();
    let self_ty = &item.self_ty;
    quote! {
        #errors
        #item

        impl #impl_generics #self_ty #where_clause {
            /// The confirmation policies declared with `#[confirm]` on this impl's tools, by tool
            /// name: give them to `ConfirmLayerBuilder::tools`.
            pub fn confirm_policies(&self) -> ::std::vec::Vec<(::std::string::String, ::mcp_confirm::ToolPolicy)> {
                ::std::vec![#(#policies),*]
            }
        }
    }
}

/// Whether `attr` is `#[name]`, `#[name(…)]`, or the same under a path (`#[rmcp::tool]`).
fn named(attr: &Attribute, name: &str) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == name)
}

/// The tool's name: `#[tool(name = "…")]`, else the method's name.
fn tool_name(attrs: &[Attribute], ident: &syn::Ident, confirm: &Attribute) -> syn::Result<String> {
    let Some(tool) = attrs.iter().find(|a| named(a, "tool")) else {
        return Err(syn::Error::new_spanned(
            confirm,
            "#[confirm] goes on a #[tool] method (rmcp's #[tool] attribute is missing here)",
        ));
    };
    if let Meta::List(list) = &tool.meta {
        let items = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)?;
        for item in items {
            if let Meta::NameValue(nv) = item
                && nv.path.is_ident("name")
            {
                return match &nv.value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(name),
                        ..
                    }) => Ok(name.value()),
                    other => Err(syn::Error::new_spanned(
                        other,
                        "#[confirm] needs the tool name as a string literal",
                    )),
                };
            }
        }
    }
    Ok(ident.to_string())
}

/// What one `#[confirm(…)]` says, key by key.
#[derive(Default)]
struct Keys {
    pick_one: Option<Path>,
    revalidate: Option<Path>,
    strings: Vec<(syn::Ident, LitStr)>,
    numbers: Vec<(syn::Ident, syn::LitInt)>,
    flags: Vec<syn::Ident>,
    /// Keys that only make sense with `pick_one`, to report if it is missing.
    needs_pick_one: Option<syn::Ident>,
    select_into: bool,
    select_header: Option<syn::Ident>,
}

const STRING_KEYS: &[&str] = &[
    "message",
    "input_key",
    "confirm_field",
    "confirm_title",
    "choice_field",
    "choice_title",
    "select_into",
    "select_header",
    "no_candidates_text",
];
const NUMBER_KEYS: &[&str] = &["max_candidates", "max_label_chars"];
const FLAG_KEYS: &[&str] = &[
    "plain_enum",
    "without_versions",
    "claimed_by_handler",
    "queued",
    "approve_in_browser",
    "require_typed_id",
];
const PICK_ONE_ONLY: &[&str] = &[
    "choice_field",
    "choice_title",
    "select_into",
    "no_candidates_text",
    "max_candidates",
    "max_label_chars",
    "plain_enum",
    "without_versions",
];
const ALL_KEYS: &str = "pick_one, revalidate, message, input_key, confirm_field, confirm_title, \
    choice_field, choice_title, select_into, select_header, no_candidates_text, max_candidates, \
    max_label_chars, plain_enum, without_versions, claimed_by_handler, queued, approve_in_browser, \
    require_typed_id";

fn read_keys(attr: &Attribute) -> syn::Result<Keys> {
    let items = match &attr.meta {
        Meta::Path(_) => Punctuated::new(),
        Meta::List(_) => attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)?,
        Meta::NameValue(nv) => {
            return Err(syn::Error::new_spanned(
                nv,
                "write #[confirm] or #[confirm(key = value, …)]",
            ));
        }
    };
    let mut keys = Keys::default();
    let mut seen: Vec<String> = Vec::new();
    for item in items {
        let path = item.path();
        let Some(ident) = path.get_ident().cloned() else {
            return Err(syn::Error::new_spanned(path, unknown(path)));
        };
        let name = ident.to_string();
        if seen.contains(&name) {
            return Err(syn::Error::new(
                ident.span(),
                format!("`{name}` is given twice"),
            ));
        }
        seen.push(name.clone());
        if PICK_ONE_ONLY.contains(&name.as_str()) && keys.needs_pick_one.is_none() {
            keys.needs_pick_one = Some(ident.clone());
        }
        match (&item, name.as_str()) {
            (Meta::NameValue(nv), "pick_one" | "revalidate") => {
                let Expr::Path(p) = &nv.value else {
                    return Err(syn::Error::new_spanned(
                        &nv.value,
                        format!(
                            "`{name}` takes the path of an async method (`Self::find`) or function"
                        ),
                    ));
                };
                if name == "pick_one" {
                    keys.pick_one = Some(p.path.clone());
                } else {
                    keys.revalidate = Some(p.path.clone());
                }
            }
            (Meta::NameValue(nv), key) if STRING_KEYS.contains(&key) => {
                let Expr::Lit(ExprLit {
                    lit: Lit::Str(value),
                    ..
                }) = &nv.value
                else {
                    return Err(syn::Error::new_spanned(
                        &nv.value,
                        format!("`{name}` takes a string literal"),
                    ));
                };
                match key {
                    "select_into" => keys.select_into = true,
                    "select_header" => keys.select_header = Some(ident.clone()),
                    _ => {}
                }
                keys.strings.push((ident, value.clone()));
            }
            (Meta::NameValue(nv), key) if NUMBER_KEYS.contains(&key) => {
                let Expr::Lit(ExprLit {
                    lit: Lit::Int(value),
                    ..
                }) = &nv.value
                else {
                    return Err(syn::Error::new_spanned(
                        &nv.value,
                        format!("`{name}` takes an integer literal"),
                    ));
                };
                value.base10_parse::<usize>()?;
                keys.numbers.push((ident, value.clone()));
            }
            (Meta::Path(_), key) if FLAG_KEYS.contains(&key) => keys.flags.push(ident),
            (_, key)
                if FLAG_KEYS.contains(&key)
                    || STRING_KEYS.contains(&key)
                    || NUMBER_KEYS.contains(&key)
                    || key == "pick_one"
                    || key == "revalidate" =>
            {
                let shape = if FLAG_KEYS.contains(&key) {
                    "a flag: write it alone, without a value"
                } else {
                    "written `key = value`"
                };
                return Err(syn::Error::new_spanned(
                    &item,
                    format!("`{name}` is {shape}"),
                ));
            }
            _ => return Err(syn::Error::new(ident.span(), unknown(path))),
        }
    }
    if keys.pick_one.is_none()
        && let Some(key) = &keys.needs_pick_one
    {
        return Err(syn::Error::new(
            key.span(),
            format!("`{key}` needs `pick_one = …`: only a pick-one policy offers a choice"),
        ));
    }
    if keys.revalidate.is_none()
        && let Some(key) = keys.flags.iter().find(|flag| *flag == "queued")
    {
        return Err(syn::Error::new(
            key.span(),
            "`queued` needs `revalidate = …`: a grant's worker re-checks the live record before it runs",
        ));
    }
    if let Some(key) = &keys.select_header
        && !keys.select_into
    {
        return Err(syn::Error::new(
            key.span(),
            "`select_header` needs `select_into`: it names the header of the rewritten argument",
        ));
    }
    Ok(keys)
}

fn unknown(path: &Path) -> String {
    let shown = quote!(#path).to_string().replace(' ', "");
    format!("unknown key `{shown}` in #[confirm]; expected one of: {ALL_KEYS}")
}

/// Whether `path` names a method of the impl (`Self::…`), called on a clone of the server.
fn is_method(path: &Path) -> bool {
    path.segments.first().is_some_and(|s| s.ident == "Self") && path.segments.len() > 1
}

/// The builder expression for one tool, paired with its name.
fn policy(attr: &Attribute, name: &str) -> syn::Result<TokenStream2> {
    let keys = read_keys(attr)?;
    let mut policy = match &keys.pick_one {
        None => quote!(::mcp_confirm::ToolPolicy::confirm_only()),
        Some(path) => {
            let call = if is_method(path) {
                quote_spanned!(path.span()=> #path(&this, lookup))
            } else {
                quote_spanned!(path.span()=> #path(lookup))
            };
            let typed = quote_spanned! {path.span()=>
                let found: ::std::result::Result<
                    ::std::vec::Vec<::mcp_confirm::Candidate>,
                    ::mcp_confirm::PolicyError,
                > = #call.await;
            };
            quote! {
                ::mcp_confirm::ToolPolicy::pick_one({
                    let this = ::std::clone::Clone::clone(self);
                    move |lookup: ::mcp_confirm::Lookup| {
                        let this = ::std::clone::Clone::clone(&this);
                        async move {
                            let _ = &this;
                            #typed
                            found
                        }
                    }
                })
            }
        }
    };
    if let Some(path) = &keys.revalidate {
        let call = if is_method(path) {
            quote_spanned!(path.span()=> #path(&this, check))
        } else {
            quote_spanned!(path.span()=> #path(check))
        };
        let typed = quote_spanned! {path.span()=>
            let verdict: ::std::result::Result<(), ::mcp_confirm::Refusal> = #call.await;
        };
        policy = quote! {
            #policy.revalidate({
                let this = ::std::clone::Clone::clone(self);
                move |check: ::mcp_confirm::Revalidation| {
                    let this = ::std::clone::Clone::clone(&this);
                    async move {
                        let _ = &this;
                        #typed
                        verdict
                    }
                }
            })
        };
    }
    for (key, value) in &keys.strings {
        policy = quote!(#policy.#key(#value));
    }
    for (key, value) in &keys.numbers {
        policy = quote!(#policy.#key(#value));
    }
    for key in &keys.flags {
        policy = quote!(#policy.#key());
    }
    Ok(quote!((::std::string::String::from(#name), #policy)))
}
