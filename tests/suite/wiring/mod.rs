//! Wiring the layer and the handlers: the builder's checks, the #[confirm] attributes, and the
//! handler guard that fails closed without the layer.

mod approver_naming;
mod attributes;
mod billing;
mod builder;
mod deployment;
mod handler_claims;
mod handler_guard;
mod listing_attacks;
mod local_principal;
mod principal;
mod stacked_layers;
mod standing_scope;
mod tool_list;
