use mcp_confirm::{Lookup, confirm_router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete one note.")]
    #[confirm(pick_one = Self::matching, select_into = "note_id")]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    // Returns ids, not `Result<Vec<Candidate>, PolicyError>`.
    async fn matching(&self, _lookup: Lookup) -> Vec<String> {
        Vec::new()
    }
}

fn main() {}
