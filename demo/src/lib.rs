//! The notes server of mcp-confirm, as a library: what the `notes_server` example runs, and what
//! the tests start in process (one or several instances of one deployment) to attack it.
//!
//! - [`app`]: the rmcp server with its `#[confirm]` tools, the layer, the approval page and the
//!   sign-in, put together as one axum `Router`;
//! - [`notes`]: the notes, on disk or in memory, and their workspaces;
//! - [`queue`]: `notes_purge`'s tasks, run from durable grants;
//! - [`signin`]: the demo's sign-in for the approval page (a cookie, read there only);
//! - [`shared`]: what they share: the demo's identity provider and access policy, tool results.

pub mod app;
pub mod notes;
pub mod queue;
pub mod shared;
pub mod signin;
