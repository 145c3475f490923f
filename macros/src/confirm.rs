//! `#[confirm(…)]`: what one tool's confirmation is, parsed with darling, and the `ToolPolicy`
//! builder expression it becomes.
//!
//! The rules between keys (`select_into` needs `pick_one`, `queued` needs `revalidate`, …) are
//! not repeated here: the expansion hands the keys it saw to `mcp_confirm`'s own `PolicyShape`
//! in a `const`, so the one copy of the rules rejects a bad combination at compile time.

use darling::FromMeta;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, LitStr, Meta, Path};

/// A key written alone (`queued`), with a clearer error than darling's own for `queued = true`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Flag(Option<Span>);

impl Flag {
    fn is_present(&self) -> bool {
        self.0.is_some()
    }

    fn span(&self) -> Span {
        self.0.unwrap_or_else(Span::call_site)
    }
}

impl FromMeta for Flag {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        match item {
            Meta::Path(path) => Ok(Self(Some(path.span()))),
            other => Err(darling::Error::custom(
                "this key is a flag: write it alone, without a value",
            )
            .with_span(other)),
        }
    }
}

/// `standing(up_to = "10m", uses = 20, scope = Self::scope_of)`: the widest standing approval
/// the form may offer.
#[derive(Debug, FromMeta)]
pub(crate) struct StandingArgs {
    up_to: LitStr,
    uses: u32,
    scope: Path,
}

/// `approved_by(…)`: who decides, as `mcp_confirm::Approvers` says it. Exactly one of
/// `anyone_but_caller`, `any_of` and `role`; the rest refine it.
#[derive(Debug, Default, FromMeta)]
#[darling(default)]
pub(crate) struct ApprovedByArgs {
    anyone_but_caller: Flag,
    any_of: Option<syn::ExprArray>,
    role: Option<LitStr>,
    except_caller: Flag,
    required: Option<u8>,
    passkey: Flag,
    share_candidate_labels: Flag,
    share_argument_values: Flag,
    recheck: Option<Path>,
}

impl ApprovedByArgs {
    /// The `Approvers` expression and the `recheck_approvers` hook's path, or a compile error.
    fn rule(&self) -> Result<TokenStream, TokenStream> {
        let error = |span: Span, message: &str| {
            Err(quote_spanned!(span=> ::core::compile_error!(#message)))
        };
        let named = usize::from(self.anyone_but_caller.is_present())
            + usize::from(self.any_of.is_some())
            + usize::from(self.role.is_some());
        if named != 1 {
            return error(
                Span::call_site(),
                "`approved_by` names who decides with exactly one of `anyone_but_caller`, \
                 `any_of = [\"…\"]` and `role = \"…\"`",
            );
        }
        let excludes_caller =
            self.anyone_but_caller.is_present() || self.except_caller.is_present();
        if excludes_caller && self.recheck.is_none() {
            // The page and the endpoint may name one person differently (an e-mail and a user
            // id): only the deployment's directory can tell the caller from someone else.
            return error(
                Span::call_site(),
                "approvers that exclude the caller need `recheck = …`: your directory gets the \
                 caller as the endpoint names them and each approver as the page names them, and \
                 answers false when they are the same person",
            );
        }
        let mut rule = if let Some(array) = &self.any_of {
            if array.elems.is_empty() {
                // An empty list is no rule at all; and rustc's own error for `[]` (E0283, type
                // annotations needed) names no fix.
                return error(
                    array.span(),
                    "`any_of` names at least one principal: any_of = [\"bob\", \"carol\"]",
                );
            }
            let mut names = Vec::new();
            for element in &array.elems {
                match element {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(name),
                        ..
                    }) if name.value().trim().is_empty() => {
                        return error(
                            name.span(),
                            "an empty principal names no one: list the approvers by name",
                        );
                    }
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(name),
                        ..
                    }) => names.push(name.clone()),
                    other => {
                        return error(
                            other.span(),
                            "`any_of` lists principals as string literals: [\"bob\", \"carol\"]",
                        );
                    }
                }
            }
            quote!(::mcp_confirm::Approvers::any_of([#(#names),*]))
        } else if let Some(role) = &self.role {
            quote!(::mcp_confirm::Approvers::role(#role))
        } else {
            quote!(::mcp_confirm::Approvers::anyone_but_caller())
        };
        if self.except_caller.is_present() {
            rule = quote!(#rule.except_caller());
        }
        if let Some(n) = self.required {
            rule = quote!(#rule.required(#n));
        }
        if self.passkey.is_present() {
            rule = quote!(#rule.with_passkey());
        }
        if self.share_candidate_labels.is_present() {
            rule = quote!(#rule.share_candidate_labels());
        }
        if self.share_argument_values.is_present() {
            rule = quote!(#rule.share_argument_values());
        }
        Ok(rule)
    }
}

/// Seconds in `"90s"`, `"10m"`, `"1h"`.
fn seconds(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// `narrow(subset = ["ids"], at_most = ["limit"], turn_on = ["dry_run"],
/// one_of(argument = "mode", values = ["archive", "delete"]))`: the arguments an approver may
/// narrow, by kind (`one_of` may repeat).
#[derive(Debug, Default, FromMeta)]
#[darling(default)]
pub(crate) struct NarrowArgs {
    subset: Option<syn::ExprArray>,
    at_most: Option<syn::ExprArray>,
    turn_on: Option<syn::ExprArray>,
    #[darling(multiple)]
    one_of: Vec<OneOfArgs>,
}

/// One `one_of(argument = "…", values = ["…", …])` of `narrow`.
#[derive(Debug, FromMeta)]
pub(crate) struct OneOfArgs {
    argument: LitStr,
    values: syn::ExprArray,
}

/// The string literals of `array`, or a compile error at the first that is not one.
fn strings(array: &syn::ExprArray) -> Result<Vec<LitStr>, TokenStream> {
    array
        .elems
        .iter()
        .map(|e| match e {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Ok(s.clone()),
            other => Err(quote_spanned!(other.span()=>
                ::core::compile_error!("`narrow` takes string literals: [\"ids\", …]"))),
        })
        .collect()
}

impl NarrowArgs {
    /// The `.narrowable(…)` calls, or a compile error.
    fn calls(&self) -> Result<TokenStream, TokenStream> {
        let mut calls = TokenStream::new();
        for (kind, array) in [
            ("Subset", &self.subset),
            ("AtMost", &self.at_most),
            ("TurnOn", &self.turn_on),
        ] {
            let Some(array) = array else { continue };
            let kind = syn::Ident::new(kind, Span::call_site());
            for argument in strings(array)? {
                calls.extend(
                    quote!(.narrowable(#argument, ::mcp_confirm::narrow::Narrowing::#kind)),
                );
            }
        }
        for one_of in &self.one_of {
            let argument = &one_of.argument;
            let values = strings(&one_of.values)?;
            calls.extend(
                quote!(.narrowable(#argument, ::mcp_confirm::narrow::Narrowing::OneOf(
                ::std::vec![#(::std::string::String::from(#values)),*]))),
            );
        }
        Ok(calls)
    }
}

/// The keys of one `#[confirm(…)]`.
#[derive(Debug, Default, FromMeta)]
#[darling(default)]
pub(crate) struct ConfirmArgs {
    pick_one: Option<Path>,
    revalidate: Option<Path>,
    when: Option<Path>,
    message: Option<LitStr>,
    input_key: Option<LitStr>,
    confirm_field: Option<LitStr>,
    confirm_title: Option<LitStr>,
    choice_field: Option<LitStr>,
    choice_title: Option<LitStr>,
    select_into: Option<LitStr>,
    select_header: Option<LitStr>,
    no_candidates_text: Option<LitStr>,
    max_candidates: Option<usize>,
    max_label_chars: Option<usize>,
    plain_enum: Flag,
    without_versions: Flag,
    claimed_by_handler: Flag,
    queued: Flag,
    approve_in_browser: Flag,
    require_typed_id: Flag,
    batch_group: Option<LitStr>,
    narrow: Option<NarrowArgs>,
    standing: Option<StandingArgs>,
    approved_by: Option<ApprovedByArgs>,
}

impl ConfirmArgs {
    /// Reads `#[confirm]` or `#[confirm(key = value, …)]`.
    pub(crate) fn from_attribute(attr: &Attribute) -> darling::Result<Self> {
        match &attr.meta {
            Meta::Path(_) => Ok(Self::default()),
            meta => Self::from_meta(meta),
        }
    }

    /// The kind the tool's definition is marked with: what the layer must confirm it as.
    pub(crate) fn kind(&self) -> &'static str {
        if self.pick_one.is_some() {
            "pick_one"
        } else {
            "confirm"
        }
    }

    /// A `const` that fails compilation, with the rule's words, if these keys break a rule of
    /// `mcp_confirm`'s policies.
    pub(crate) fn shape_check(&self, span: Span) -> TokenStream {
        let pick_one = self.pick_one.is_some();
        let revalidate = self.revalidate.is_some();
        let choice_settings = self.choice_field.is_some()
            || self.choice_title.is_some()
            || self.no_candidates_text.is_some()
            || self.max_candidates.is_some()
            || self.max_label_chars.is_some()
            || self.plain_enum.is_present()
            || self.without_versions.is_present();
        let select_into = self.select_into.is_some();
        let select_header = self.select_header.is_some();
        let queued = self.queued.is_present();
        let claimed_by_handler = self.claimed_by_handler.is_present();
        let when = self.when.is_some();
        let standing = self.standing.is_some();
        quote_spanned! {span=>
            const _: () = ::mcp_confirm::__private::PolicyShape {
                pick_one: #pick_one,
                revalidate: #revalidate,
                choice_settings: #choice_settings,
                select_into: #select_into,
                select_header: #select_header,
                queued: #queued,
                claimed_by_handler: #claimed_by_handler,
                when: #when,
                standing: #standing,
            }
            .assert_valid();
        }
    }

    /// The `ToolPolicy` builder expression, evaluated in a `&self` method of the server.
    pub(crate) fn policy(&self) -> TokenStream {
        let mut policy = match &self.pick_one {
            None => quote!(::mcp_confirm::ToolPolicy::confirm_only()),
            Some(path) => {
                let hook = hook(
                    path,
                    quote!(lookup: ::mcp_confirm::Lookup),
                    quote!(lookup),
                    quote!(
                        ::std::vec::Vec<::mcp_confirm::Candidate>,
                        ::mcp_confirm::PolicyError
                    ),
                );
                quote!(::mcp_confirm::ToolPolicy::pick_one(#hook))
            }
        };
        if let Some(path) = &self.revalidate {
            let hook = hook(
                path,
                quote!(check: ::mcp_confirm::Revalidation),
                quote!(check),
                quote!((), ::mcp_confirm::Refusal),
            );
            policy = quote!(#policy.revalidate(#hook));
        }
        if let Some(path) = &self.when {
            let hook = hook(
                path,
                quote!(lookup: ::mcp_confirm::Lookup),
                quote!(lookup),
                quote!(bool, ::mcp_confirm::PolicyError),
            );
            policy = quote!(#policy.when(#hook));
        }
        let strings = [
            ("message", &self.message),
            ("input_key", &self.input_key),
            ("confirm_field", &self.confirm_field),
            ("confirm_title", &self.confirm_title),
            ("choice_field", &self.choice_field),
            ("choice_title", &self.choice_title),
            ("select_into", &self.select_into),
            ("select_header", &self.select_header),
            ("no_candidates_text", &self.no_candidates_text),
            ("batch_group", &self.batch_group),
        ];
        for (key, value) in strings {
            if let Some(value) = value {
                let key = syn::Ident::new(key, value.span());
                policy = quote!(#policy.#key(#value));
            }
        }
        for (key, value) in [
            ("max_candidates", self.max_candidates),
            ("max_label_chars", self.max_label_chars),
        ] {
            if let Some(value) = value {
                let key = syn::Ident::new(key, Span::call_site());
                policy = quote!(#policy.#key(#value));
            }
        }
        let flags = [
            ("plain_enum", &self.plain_enum),
            ("without_versions", &self.without_versions),
            ("claimed_by_handler", &self.claimed_by_handler),
            ("queued", &self.queued),
            ("approve_in_browser", &self.approve_in_browser),
            ("require_typed_id", &self.require_typed_id),
        ];
        for (key, flag) in flags {
            if flag.is_present() {
                let key = syn::Ident::new(key, flag.span());
                policy = quote!(#policy.#key());
            }
        }
        if let Some(standing) = &self.standing {
            let up_to = match seconds(&standing.up_to.value()) {
                Some(secs) => quote!(::std::time::Duration::from_secs(#secs)),
                None => {
                    return quote_spanned! {standing.up_to.span()=>
                        ::core::compile_error!(
                            "`up_to` is a whole number of seconds, minutes or hours: \"90s\", \"10m\", \"1h\""
                        )
                    };
                }
            };
            let uses = standing.uses;
            let path = &standing.scope;
            let call = if is_method(path) {
                quote_spanned!(path.span()=> #path(&this, lookup))
            } else {
                quote_spanned!(path.span()=> #path(lookup))
            };
            let scope = quote! {{
                let this = ::std::clone::Clone::clone(self);
                move |lookup: &::mcp_confirm::Lookup| -> ::std::option::Option<::std::string::String> {
                    let _ = &this;
                    #call
                }
            }};
            policy = quote!(#policy.standing(#up_to, #uses, #scope));
        }
        if let Some(narrow) = &self.narrow {
            match narrow.calls() {
                Ok(calls) => policy = quote!(#policy #calls),
                Err(error) => return error,
            }
        }
        if let Some(approved_by) = &self.approved_by {
            let rule = match approved_by.rule() {
                Ok(rule) => rule,
                Err(error) => return error,
            };
            policy = quote!(#policy.approved_by(#rule));
            if let Some(path) = &approved_by.recheck {
                let hook = hook(
                    path,
                    quote!(query: ::mcp_confirm::ApproverQuery),
                    quote!(query),
                    quote!(bool, ::mcp_confirm::PolicyError),
                );
                policy = quote!(#policy.recheck_approvers(#hook));
            }
        }
        policy
    }
}

/// Whether `path` names a method of the impl (`Self::…`), called on a clone of the server.
fn is_method(path: &Path) -> bool {
    path.segments.first().is_some_and(|s| s.ident == "Self") && path.segments.len() > 1
}

/// A hook closure calling `path` (a `Self::` method on a clone of the server, or a free
/// function), with the result typed at the path's span so a wrong signature is reported there.
fn hook(path: &Path, param: TokenStream, arg: TokenStream, result: TokenStream) -> TokenStream {
    let call = if is_method(path) {
        quote_spanned!(path.span()=> #path(&this, #arg))
    } else {
        quote_spanned!(path.span()=> #path(#arg))
    };
    let typed = quote_spanned! {path.span()=>
        let out: ::std::result::Result<#result> = #call.await;
    };
    quote! {{
        let this = ::std::clone::Clone::clone(self);
        move |#param| {
            let this = ::std::clone::Clone::clone(&this);
            async move {
                let _ = &this;
                #typed
                out
            }
        }
    }}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_durations_read_seconds_minutes_and_hours_only() {
        assert_eq!(seconds("90s"), Some(90));
        assert_eq!(seconds("10m"), Some(600));
        assert_eq!(seconds("1h"), Some(3600));
        for bad in ["", "10", "m", "10 m", "10min", "1d", "-1m"] {
            assert_eq!(seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn standing_becomes_the_builder_call() {
        let args = args(quote!(#[confirm(pick_one = Self::matching,
            standing(up_to = "10m", uses = 20, scope = Self::workspace_of))]))
        .unwrap();
        let policy = text(args.policy());
        assert!(
            policy.contains(".standing(::std::time::Duration::from_secs(600u64),20u32,"),
            "{policy}"
        );
        assert!(
            policy.contains("Self::workspace_of(&this,lookup)"),
            "{policy}"
        );
        assert!(text(args.shape_check(Span::call_site())).contains("standing:true"));
    }

    fn args(attr: TokenStream) -> darling::Result<ConfirmArgs> {
        let attr: Attribute = syn::parse_quote!(#attr);
        ConfirmArgs::from_attribute(&attr)
    }

    fn text(tokens: TokenStream) -> String {
        tokens.to_string().replace(' ', "")
    }

    #[test]
    fn approved_by_becomes_the_rule_and_its_recheck() {
        let given = args(quote!(#[confirm(approved_by(
            any_of = ["bob", "carol"], except_caller, required = 2, passkey,
            share_candidate_labels, share_argument_values,
            recheck = Self::still_approver
        ))]))
        .unwrap();
        let policy = text(given.policy());
        assert!(
            policy.contains(
                ".approved_by(::mcp_confirm::Approvers::any_of([\"bob\",\"carol\"])\
                 .except_caller().required(2u8).with_passkey().share_candidate_labels()\
                 .share_argument_values())"
            ),
            "{policy}"
        );
        assert!(policy.contains(".recheck_approvers("), "{policy}");
        assert!(
            policy.contains("Self::still_approver(&this,query)"),
            "{policy}"
        );
        let four_eyes = args(quote!(#[confirm(approved_by(
            anyone_but_caller,
            recheck = Self::not_the_caller
        ))]))
        .unwrap();
        assert!(
            text(four_eyes.policy())
                .contains(".approved_by(::mcp_confirm::Approvers::anyone_but_caller())"),
        );
        // Without a directory to tell one person's two names apart: an error at the attribute.
        let unchecked = args(quote!(#[confirm(approved_by(anyone_but_caller))])).unwrap();
        let policy = text(unchecked.policy());
        assert!(
            policy.contains("compile_error!") && policy.contains("recheck"),
            "{policy}"
        );
        let role = args(quote!(#[confirm(approved_by(role = "admin"))])).unwrap();
        assert!(text(role.policy()).contains("Approvers::role(\"admin\")"));
    }

    #[test]
    fn approved_by_names_exactly_one_kind_of_approver() {
        for attr in [
            quote!(#[confirm(approved_by(passkey))]),
            quote!(#[confirm(approved_by(anyone_but_caller, role = "admin"))]),
            quote!(#[confirm(approved_by(any_of = [bob]))]),
        ] {
            let policy = text(args(attr).unwrap().policy());
            assert!(policy.contains("compile_error!"), "{policy}");
        }
        assert!(args(quote!(#[confirm(approved_by(anyone_but_caller, required = 300))])).is_err());
        assert!(args(quote!(#[confirm(approved_by(anyone))])).is_err());
    }

    #[test]
    fn a_bare_confirm_is_a_confirm_only_policy() {
        let args = args(quote!(#[confirm])).unwrap();
        assert_eq!(args.kind(), "confirm");
        assert_eq!(
            text(args.policy()),
            "::mcp_confirm::ToolPolicy::confirm_only()"
        );
    }

    #[test]
    fn keys_become_builder_calls_and_hooks_call_the_server() {
        let args = args(quote!(#[confirm(
            pick_one = Self::matching, revalidate = check, when = Self::needed,
            message = "Pick one.", select_into = "note_id", max_candidates = 5, queued
        )]))
        .unwrap();
        assert_eq!(args.kind(), "pick_one");
        let policy = text(args.policy());
        assert!(
            policy.starts_with("::mcp_confirm::ToolPolicy::pick_one("),
            "{policy}"
        );
        assert!(policy.contains("Self::matching(&this,lookup)"), "{policy}");
        assert!(policy.contains("check(check)"), "{policy}");
        assert!(policy.contains(".when("), "{policy}");
        assert!(policy.contains("Self::needed(&this,lookup)"), "{policy}");
        assert!(policy.contains(".message(\"Pickone.\")"), "{policy}");
        assert!(policy.contains(".select_into(\"note_id\")"), "{policy}");
        assert!(policy.contains(".max_candidates(5usize)"), "{policy}");
        assert!(policy.ends_with(".queued()"), "{policy}");
    }

    #[test]
    fn the_shape_check_reports_exactly_the_keys_given() {
        let args = args(quote!(#[confirm(select_into = "x", queued)])).unwrap();
        let check = text(args.shape_check(Span::call_site()));
        assert!(check.contains("pick_one:false"), "{check}");
        assert!(check.contains("select_into:true"), "{check}");
        assert!(check.contains("queued:true"), "{check}");
        assert!(check.contains("revalidate:false"), "{check}");
        assert!(check.ends_with(".assert_valid();"), "{check}");
    }

    #[test]
    fn unknown_keys_and_wrong_shapes_are_errors_with_suggestions() {
        let error = args(quote!(#[confirm(selec_into = "x")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("selec_into"), "{error}");
        assert!(error.contains("select_into"), "{error}");
        assert!(args(quote!(#[confirm(queued = "yes")])).is_err());
        assert!(args(quote!(#[confirm(message = 7)])).is_err());
        assert!(args(quote!(#[confirm = "x"])).is_err());
    }
}
