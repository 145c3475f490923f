use mcp_confirm::confirm;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// #[confirm_router] forgotten: the tool would run unconfirmed, so this must not compile.
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Delete everything.")]
    #[confirm]
    async fn purge(&self) -> String {
        String::new()
    }
}

fn main() {}
