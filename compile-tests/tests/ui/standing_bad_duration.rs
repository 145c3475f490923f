use mcp_confirm::{Candidate, Lookup, PolicyError, confirm_router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// "10 minutes" is not one of the spellings ("90s", "10m", "1h").
#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete one note.")]
    #[confirm(pick_one = Self::matching,
              standing(up_to = "10 minutes", uses = 3, scope = Self::workspace))]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(Vec::new())
    }

    fn workspace(&self, _lookup: &Lookup) -> Option<String> {
        None
    }
}

fn main() {}
