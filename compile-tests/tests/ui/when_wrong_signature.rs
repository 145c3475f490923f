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
    #[tool(description = "Delete notes.")]
    #[confirm(when = Self::bulk)]
    async fn notes_delete(&self) -> String {
        String::new()
    }

    // Returns a bare bool, not `Result<bool, PolicyError>`.
    async fn bulk(&self, _lookup: Lookup) -> bool {
        true
    }
}

fn main() {}
