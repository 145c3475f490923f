use mcp_confirm::{Candidate, Lookup, PolicyError, Refusal, Revalidation, confirm_router};
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
    #[confirm(pick_one = Self::matching,
              standing(up_to = "10m", uses = 20, scope = Self::workspace))]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    #[tool(description = "Wipe a workspace.")]
    #[confirm(standing(up_to = "1h", uses = 1, scope = workspace_of))]
    async fn notes_wipe(&self) -> String {
        String::new()
    }

    #[tool(description = "Purge notes in the background.")]
    #[confirm(pick_one = Self::matching, revalidate = Self::check, queued,
              standing(up_to = "90s", uses = 3, scope = Self::workspace))]
    async fn notes_purge(&self) -> String {
        String::new()
    }

    async fn check(&self, _check: Revalidation) -> Result<(), Refusal> {
        Ok(())
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(Vec::new())
    }

    fn workspace(&self, lookup: &Lookup) -> Option<String> {
        workspace_of(lookup)
    }
}

fn workspace_of(lookup: &Lookup) -> Option<String> {
    lookup.arguments["workspaceUri"].as_str().map(str::to_owned)
}

fn main() {
    let server = Server { tool_router: Server::tool_router() };
    let _ = server.confirm_policies();
}
