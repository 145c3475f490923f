//! `#[confirm_router]`: reads the `#[confirm]` of each `#[tool]` method of an impl, guards the
//! handlers that must not run unconfirmed, marks their definitions, and generates
//! `confirm_policies()` and `confirm_declarations()`.
//!
//! It works above or below rmcp's `#[tool_router]`: either way the methods' `#[tool]`
//! attributes are still unexpanded when it runs (they expand with the impl's items, after every
//! attribute of the impl itself), and it refers to rmcp's output only through the
//! `<method>_tool_attr()` functions `#[tool]` generates.

use darling::FromMeta;
use darling::ast::NestedMeta;
use darling::util::Flag;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ImplItemFn, ItemImpl};

use crate::confirm::ConfirmArgs;
use crate::tool::{ToolAttr, named};

/// The keys of `#[confirm_router(…)]`.
#[derive(Debug, Default, FromMeta)]
#[darling(default)]
pub(crate) struct RouterArgs {
    /// The handlers run even when no confirmation of the layer came with the call: for servers
    /// whose transport cannot carry it (rmcp over stdio), where the layer is the only way in.
    skip_handler_guards: Flag,
}

impl RouterArgs {
    pub(crate) fn parse(attr: TokenStream) -> darling::Result<Self> {
        if attr.is_empty() {
            return Ok(Self::default());
        }
        Self::from_list(&NestedMeta::parse_meta_list(attr)?)
    }
}

/// What one `#[tool]` method contributes.
struct Tool {
    /// The `<method>_tool_attr` function `#[tool]` generates.
    definition: syn::Ident,
    /// `(name, policy expression)` when it has a `#[confirm]`.
    policy: Option<(String, TokenStream)>,
    /// The compile-time check of its `#[confirm]` keys.
    check: Option<TokenStream>,
}

/// The impl with its `#[confirm]` attributes read and removed, its guarded handlers given their
/// guard, the generated functions, and a compile error for each misused attribute. The impl is
/// emitted even with errors, so rustc reports the attribute's mistake alone rather than
/// everything that follows from a missing impl.
pub(crate) fn expand(args: &RouterArgs, mut item: ItemImpl) -> TokenStream {
    let guard = !args.skip_handler_guards.is_present();
    let mut tools = Vec::new();
    let mut errors = darling::Error::accumulator();
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        if let Some(tool) = errors.handle(method_tool(method, guard)).flatten() {
            tools.push(tool);
        }
    }
    let errors = errors.finish().err().map(darling::Error::write_errors);
    let policies: Vec<TokenStream> = tools
        .iter()
        .filter_map(|t| t.policy.as_ref())
        .map(|(name, policy)| quote!((::std::string::String::from(#name), #policy)))
        .collect();
    let checks = tools.iter().filter_map(|t| t.check.as_ref());
    let definitions = tools.iter().map(|t| &t.definition);
    let (impl_generics, _, where_clause) = item.generics.split_for_impl();
    let self_ty = &item.self_ty;
    quote! {
        #errors
        #item

        #(#checks)*

        impl #impl_generics #self_ty #where_clause {
            /// The confirmation policies declared with `#[confirm]` on this impl's tools, by tool
            /// name. Prefer [`confirm_declarations`](Self::confirm_declarations), which carries the
            /// tools' definitions with them.
            pub fn confirm_policies(&self) -> ::std::vec::Vec<(::std::string::String, ::mcp_confirm::ToolPolicy)> {
                ::std::vec![#(#policies),*]
            }

            /// This impl's confirmation policies and tool definitions, for
            /// `ConfirmLayerBuilder::declarations`: the one call that wires them into the layer.
            pub fn confirm_declarations(&self) -> ::mcp_confirm::rmcp::Declarations {
                let tools: ::std::vec::Vec<::mcp_confirm::__private::Tool> =
                    ::std::vec![#(Self::#definitions()),*];
                ::mcp_confirm::rmcp::Declarations::new(self.confirm_policies(), tools)
            }
        }
    }
}

/// Reads one method: `None` if it is not a `#[tool]`.
fn method_tool(method: &mut ImplItemFn, guard: bool) -> darling::Result<Option<Tool>> {
    let mut confirms = Vec::new();
    method.attrs.retain(|attr| {
        let is_confirm = named(attr, "confirm");
        if is_confirm {
            confirms.push(attr.clone());
        }
        !is_confirm
    });
    let Some(at) = method.attrs.iter().position(|a| named(a, "tool")) else {
        return match confirms.first() {
            Some(confirm) => Err(syn::Error::new_spanned(
                confirm,
                "#[confirm] goes on a #[tool] method (rmcp's #[tool] attribute is missing here)",
            )
            .into()),
            None => Ok(None),
        };
    };
    if let Some(second) = confirms.get(1) {
        return Err(darling::Error::custom(
            "one #[confirm] per tool: merge the keys into one attribute",
        )
        .with_span(second));
    }
    let confirm = match confirms.first() {
        Some(attr) => Some((ConfirmArgs::from_attribute(attr)?, attr.path().span())),
        None => None,
    };
    let tool = ToolAttr::read(&method.attrs[at], &method.sig.ident)?;
    let name = tool.name.clone();
    let kind = match &confirm {
        Some((args, _)) => Some(args.kind()),
        None if tool.destructive => Some("destructive"),
        None => None,
    };
    if let Some(kind) = kind {
        let attr = method.attrs[at].clone();
        method.attrs[at] = tool.with_mark(&attr, kind);
        if guard {
            add_guard(method);
        }
    }
    Ok(Some(Tool {
        definition: format_ident!("{}_tool_attr", method.sig.ident),
        check: confirm.as_ref().map(|(args, span)| args.shape_check(*span)),
        policy: confirm.map(|(args, _)| (name, args.policy())),
    }))
}

/// Gives the handler a first parameter that refuses the call unless the layer confirmed (or
/// waived) exactly this call: first, so it sees the arguments before `Parameters` takes them.
fn add_guard(method: &mut ImplItemFn) {
    let at = usize::from(matches!(
        method.sig.inputs.first(),
        Some(FnArg::Receiver(_))
    ));
    let guard: FnArg = syn::parse_quote!(_mcp_confirm_guard: ::mcp_confirm::rmcp::Confirmation);
    method.sig.inputs.insert(at, guard);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(args: TokenStream, item: TokenStream) -> String {
        let args = RouterArgs::parse(args).unwrap();
        expand(&args, syn::parse2(item).unwrap())
            .to_string()
            .replace(' ', "")
    }

    const IMPL: &str = r#"
        impl Files {
            #[tool(description = "List", annotations(read_only_hint = true))]
            async fn files_list(&self) -> String { String::new() }

            #[tool(description = "Delete", annotations(destructive_hint = true))]
            #[confirm(pick_one = Self::matching, select_into = "path")]
            async fn files_delete(&self, Parameters(args): Parameters<Args>) -> String { String::new() }

            #[tool(description = "Wipe", annotations(destructive_hint = true))]
            async fn files_wipe(&self) -> String { String::new() }

            async fn matching(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> { Ok(vec![]) }
        }
    "#;

    #[test]
    fn confirmed_and_destructive_handlers_are_guarded_and_marked_read_only_ones_not() {
        let out = expanded(TokenStream::new(), IMPL.parse().unwrap());
        assert!(!out.contains("#[confirm(pick_one"), "{out}");
        assert!(
            out.contains("asyncfnfiles_delete(&self,_mcp_confirm_guard:::mcp_confirm::rmcp::Confirmation,Parameters(args)"),
            "{out}"
        );
        assert!(
            out.contains(
                "asyncfnfiles_wipe(&self,_mcp_confirm_guard:::mcp_confirm::rmcp::Confirmation)"
            ),
            "{out}"
        );
        assert!(out.contains("asyncfnfiles_list(&self)->String"), "{out}");
        assert!(
            out.contains("declare(::std::default::Default::default(),\"pick_one\")"),
            "{out}"
        );
        assert!(
            out.contains("declare(::std::default::Default::default(),\"destructive\")"),
            "{out}"
        );
        assert_eq!(out.matches("__private::declare(").count(), 2, "{out}");
        assert!(
            out.contains("::std::string::String::from(\"files_delete\")"),
            "{out}"
        );
        assert!(!out.contains("String::from(\"files_wipe\")"), "{out}");
        assert!(
            out.contains("vec![Self::files_list_tool_attr(),Self::files_delete_tool_attr(),Self::files_wipe_tool_attr()]"),
            "{out}"
        );
        assert_eq!(out.matches(".assert_valid();").count(), 1, "{out}");
    }

    #[test]
    fn skip_handler_guards_marks_but_does_not_guard() {
        let out = expanded(quote!(skip_handler_guards), IMPL.parse().unwrap());
        assert!(!out.contains("_mcp_confirm_guard"), "{out}");
        assert_eq!(out.matches("__private::declare(").count(), 2, "{out}");
    }

    #[test]
    fn misuse_is_reported_at_the_attribute() {
        let out = expanded(
            TokenStream::new(),
            quote! {
                impl S {
                    #[confirm]
                    async fn helper(&self) {}
                    #[tool]
                    #[confirm]
                    #[confirm(queued)]
                    async fn twice(&self) {}
                }
            },
        );
        assert!(out.contains("#[confirm]goesona#[tool]method"), "{out}");
        assert!(out.contains("one#[confirm]pertool"), "{out}");
        assert!(RouterArgs::parse(quote!(skip_guards)).is_err());
    }
}
