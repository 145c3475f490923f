use mcp_confirm::{Candidate, Lookup, PolicyError, confirm_router};
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
    #[confirm(pick_one = Self::matching, plain_enum = true)]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(Vec::new())
    }
}

fn main() {}
