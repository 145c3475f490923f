use mcp_confirm::{Candidate, Lookup, PolicyError, Refusal, Revalidation, confirm_router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// A call under a standing approval has no confirmation of its own for the handler to claim.
#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete a note.")]
    #[confirm(pick_one = Self::matching, revalidate = Self::check, claimed_by_handler,
              standing(up_to = "10m", uses = 3, scope = Self::workspace))]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(Vec::new())
    }

    async fn check(&self, _check: Revalidation) -> Result<(), Refusal> {
        Ok(())
    }

    fn workspace(&self, _lookup: &Lookup) -> Option<String> {
        None
    }
}

fn main() {}
