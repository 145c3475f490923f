use mcp_confirm::{Candidate, Lookup, PolicyError, confirm_router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// A call the condition waves through would carry the client's own `note_id`.
#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete one note.")]
    #[confirm(pick_one = Self::matching, select_into = "note_id", when = Self::shared)]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(Vec::new())
    }

    async fn shared(&self, _lookup: Lookup) -> Result<bool, PolicyError> {
        Ok(false)
    }
}

fn main() {}
