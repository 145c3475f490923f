//! `mcp-confirm-gateway`: confirmations in front of any MCP server, whatever it is written in.
//!
//! A streaming reverse proxy for the 2026-07-28 Streamable HTTP transport with
//! [`mcp_confirm::ConfirmLayer`] in front, one upstream per route, configured by one file
//! ([`config`]). For each upstream it lists the tools, judges each ([`policy`]: the operator's
//! entry, then the tool's annotations, then the spec's default: confirm), and builds the layer
//! for that list ([`catalog`], [`route`]). A tool the operator denies is never forwarded; an
//! upstream that cannot be listed gets no `tools/call`. Callers sign in with OAuth ([`oauth`]);
//! a tool may get a pick-one form over records a read tool finds ([`lookup`]); an upstream's own
//! questions are relayed ([`relay`]).
//!
//! - [`config`]: the file, its validation and its JSON Schema;
//! - [`policy`]: what a tool's calls get, and why (pure);
//! - [`catalog`]: one upstream's judged tools and the policy revision;
//! - [`upstream`]: the pooled client, what crosses and what does not, the gateway's own
//!   `tools/list`;
//! - [`lookup`]: which records a call may mean (the pick-one form's candidates), by a read
//!   tool of the same upstream;
//! - [`relay`]: an upstream's own questions relayed, and the continuations that let the
//!   client answer them without confirming again;
//! - [`recheck`]: the approvers' live check, asked of the deployment's endpoint right before an
//!   approved call runs;
//! - [`route`]: one route's requests, the layer per catalog;
//! - [`answer`]: the gateway's own answers (its body type, JSON and text answers);
//! - [`auth`]: who is calling: an OAuth bearer JWT, or static tokens for a first try;
//! - [`oauth`]: the OAuth 2.1 resource server (JWT, JWKS, RFC 9728 metadata);
//! - [`server`]: the gateway built from its file, and served;
//! - [`standing`]: standing approvals that count only under the offer they were granted under;
//! - [`metrics`]: the core's and the decision log's metrics as Prometheus text, on a listener
//!   of their own (`[metrics]`).
//!
//! What it took, and why: `hyper-util`'s pooled client (the same stack as the server side; a
//! request body streams through untouched), `figment` for the file with environment variables
//! over it, `schemars` for the file's schema, `clap` for the command line, `arc-swap` to swap a
//! route's layer when its tools change, and the whole configuration when the file changes;
//! `jsonwebtoken` (its RustCrypto backend) for bearer JWTs, and `reqwest` with rustls only to
//! fetch an issuer's metadata and keys over TLS; `serde_json_path` for RFC 9535 JSONPath in
//! lookups (JSON Pointers are `serde_json`'s own); `hmac` for continuations; the core's pages
//! and webhooks, and `mcp-confirm-log` for the decision log; `metrics-exporter-prometheus`
//! (without its own HTTP listener and push gateway) for the metrics page.
//! What it left: `reqwest` for the proxy itself (a second HTTP stack for nothing a proxy
//! needs), `config` (figment's providers are smaller and typed), `jsonwebtoken` 12 (its `rsa`
//! cannot be unified with the core's passkey dependencies; 11 verifies the same tokens), an
//! OpenID Connect client for browser sign-in (a sign-in proxy in front does it, and the gateway
//! trusts it only with a shared secret), and `notify` for watching the file: the file (and the
//! tokens or JWKS file it names) is read and hashed once a second instead, which also sees a file
//! replaced through a symlink (how Kubernetes updates a mounted ConfigMap or Secret, which
//! inotify watches on the old file miss) and costs nothing measurable.

#![deny(missing_docs, unsafe_code)]

pub mod answer;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod lookup;
pub mod metrics;
pub mod oauth;
pub mod policy;
pub mod recheck;
pub mod relay;
pub mod route;
pub mod server;
pub mod standing;
pub mod upstream;
