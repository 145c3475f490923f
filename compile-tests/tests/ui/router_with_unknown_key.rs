use mcp_confirm::confirm_router;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// The opt-out is spelt out in full: a near miss is an error, not a silently guarded server.
#[confirm_router(skip_guards)]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete everything.")]
    #[confirm]
    async fn purge(&self) -> String {
        String::new()
    }
}

fn main() {}
