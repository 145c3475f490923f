//! The pages' defaults, for code that wants to say "the default" by name.

use std::time::Duration;

/// How long a page's form stays good once the page showed it, by default: a form posted later
/// is refused, and the page asks to be reloaded.
pub const DEFAULT_FORM_TTL: Duration = Duration::from_secs(30 * 60);

/// How far apart, by default, two calls of one principal may have been made for the approval
/// page to offer them as one batch (tools of one [`batch_group`](mcp_confirm::ToolPolicy::batch_group)).
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_secs(2 * 60);
