//! Both rounds of a confirmation over every adapter (HTTP, JSON-RPC messages) and in front of every
//! kind of inner service.

mod http;
mod inner_services;
mod policy_change;
mod protocol_attacks;
mod rpc;
