use mcp_confirm::confirm_router;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete every note, later.")]
    #[confirm(message = "Delete every note?", queued)]
    async fn notes_purge(&self) -> String {
        String::new()
    }
}

fn main() {}
