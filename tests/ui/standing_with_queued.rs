use mcp_confirm::{Candidate, Lookup, PolicyError, Refusal, Revalidation, confirm_router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// A call under a standing approval has no confirmation of its own to turn into a grant.
#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Purge notes.")]
    #[confirm(pick_one = Self::matching, revalidate = Self::check, queued,
              standing(up_to = "10m", uses = 3, scope = Self::workspace))]
    async fn notes_purge(&self) -> String {
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
