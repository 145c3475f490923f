//! rmcp's `#[tool(…)]`, as far as `#[confirm_router]` reads and writes it: the tool's name,
//! whether its annotations make it destructive, and the `meta` that carries the declaration mark.
//!
//! The attribute is read as plain `key = value` / `key(…)` items so every key rmcp knows (or adds
//! later) is kept as written; only `meta` is rewritten.

use proc_macro2::TokenStream;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, ExprLit, Ident, Lit, Meta, Token};

/// One `#[tool]` attribute, read.
pub(crate) struct ToolAttr {
    /// `name = "…"`, else the method's name.
    pub(crate) name: String,
    /// Whether the annotations make the tool destructive, by the spec's defaults: read-only never
    /// is; otherwise it is unless `destructive_hint = false`. Hints written as anything but a
    /// `true`/`false` literal count as unknown, and an unknown hint counts as destructive.
    pub(crate) destructive: bool,
    items: Punctuated<Meta, Token![,]>,
}

/// Whether `attr` is `#[name]`, `#[name(…)]`, or the same under a path (`#[rmcp::tool]`).
pub(crate) fn named(attr: &Attribute, name: &str) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == name)
}

impl ToolAttr {
    pub(crate) fn read(attr: &Attribute, method: &Ident) -> syn::Result<Self> {
        let items = match &attr.meta {
            Meta::Path(_) => Punctuated::new(),
            Meta::List(list) => list.parse_args_with(Punctuated::parse_terminated)?,
            Meta::NameValue(nv) => {
                return Err(syn::Error::new_spanned(
                    nv,
                    "expected #[tool] or #[tool(…)]",
                ));
            }
        };
        let mut name = method.to_string();
        let mut read_only = Some(false);
        let mut destructive = Some(true);
        for item in &items {
            match item {
                Meta::NameValue(nv) if nv.path.is_ident("name") => match &nv.value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(value),
                        ..
                    }) => name = value.value(),
                    other => {
                        return Err(syn::Error::new_spanned(
                            other,
                            "#[confirm_router] needs the tool name as a string literal",
                        ));
                    }
                },
                Meta::List(list) if list.path.is_ident("annotations") => {
                    let hints: Punctuated<Meta, Token![,]> =
                        list.parse_args_with(Punctuated::parse_terminated)?;
                    for hint in hints {
                        let Meta::NameValue(nv) = hint else { continue };
                        let value = match &nv.value {
                            Expr::Lit(ExprLit {
                                lit: Lit::Bool(b), ..
                            }) => Some(b.value),
                            _ => None,
                        };
                        if nv.path.is_ident("read_only_hint") {
                            read_only = value;
                        } else if nv.path.is_ident("destructive_hint") {
                            destructive = value;
                        }
                    }
                }
                _ => {}
            }
        }
        // Unknown (not a literal) is read the safe way: not read-only, destructive.
        let destructive = read_only != Some(true) && destructive != Some(false);
        Ok(Self {
            name,
            destructive,
            items,
        })
    }

    /// The attribute again, with `meta` wrapped so the tool's definition carries the mark of
    /// `kind` (merged into whatever `meta` the attribute already gave).
    pub(crate) fn with_mark(mut self, attr: &Attribute, kind: &str) -> Attribute {
        let mut marked = false;
        for item in &mut self.items {
            if let Meta::NameValue(nv) = item
                && nv.path.is_ident("meta")
            {
                let given = &nv.value;
                nv.value = syn::parse_quote!(::mcp_confirm::__private::declare(#given, #kind));
                marked = true;
            }
        }
        if !marked {
            self.items
                .push(syn::parse_quote!(meta = ::mcp_confirm::__private::declare(
                    ::std::default::Default::default(),
                    #kind
                )));
        }
        let path = attr.path();
        let items = &self.items;
        let pound = &attr.pound_token;
        let tokens: TokenStream = quote!(#pound[#path(#items)]);
        let mut parsed: Vec<Attribute> = syn::parse::Parser::parse2(Attribute::parse_outer, tokens)
            .unwrap_or_else(|_| vec![attr.clone()]);
        parsed.pop().unwrap_or_else(|| attr.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(attr: Attribute) -> ToolAttr {
        ToolAttr::read(&attr, &syn::parse_quote!(files_wipe)).unwrap()
    }

    #[test]
    fn destructive_follows_the_spec_defaults_and_fails_closed() {
        let cases: [(Attribute, bool); 7] = [
            (syn::parse_quote!(#[tool]), true),
            (syn::parse_quote!(#[tool(description = "x")]), true),
            (
                syn::parse_quote!(#[tool(annotations(destructive_hint = true))]),
                true,
            ),
            (
                syn::parse_quote!(#[tool(annotations(destructive_hint = false))]),
                false,
            ),
            (
                syn::parse_quote!(#[tool(annotations(read_only_hint = true))]),
                false,
            ),
            (
                syn::parse_quote!(#[rmcp::tool(annotations(read_only_hint = false))]),
                true,
            ),
            (
                syn::parse_quote!(#[tool(annotations(read_only_hint = READ_ONLY))]),
                true,
            ),
        ];
        for (attr, destructive) in cases {
            let shown = quote!(#attr).to_string();
            assert_eq!(read(attr).destructive, destructive, "{shown}");
        }
    }

    #[test]
    fn the_name_is_the_attribute_s_else_the_method_s() {
        assert_eq!(read(syn::parse_quote!(#[tool])).name, "files_wipe");
        assert_eq!(read(syn::parse_quote!(#[tool(name = "wipe")])).name, "wipe");
        assert!(
            ToolAttr::read(
                &syn::parse_quote!(#[tool(name = NAME)]),
                &syn::parse_quote!(f)
            )
            .is_err()
        );
    }

    #[test]
    fn the_mark_is_added_or_merged_into_meta_and_the_rest_is_kept() {
        let attr: Attribute = syn::parse_quote!(#[rmcp::tool(description = "Wipe", annotations(destructive_hint = true))]);
        let marked = read(attr.clone()).with_mark(&attr, "destructive");
        let text = quote!(#marked).to_string().replace(' ', "");
        assert!(
            text.starts_with(
                "#[rmcp::tool(description=\"Wipe\",annotations(destructive_hint=true),meta="
            ),
            "{text}"
        );
        assert!(text.contains("::mcp_confirm::__private::declare(::std::default::Default::default(),\"destructive\")"), "{text}");

        let attr: Attribute = syn::parse_quote!(#[tool(meta = my_meta())]);
        let marked = read(attr.clone()).with_mark(&attr, "pick_one");
        let text = quote!(#marked).to_string().replace(' ', "");
        assert_eq!(
            text,
            "#[tool(meta=::mcp_confirm::__private::declare(my_meta(),\"pick_one\"))]"
        );
    }
}
