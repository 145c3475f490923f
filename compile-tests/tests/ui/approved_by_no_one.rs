use mcp_confirm::confirm_router;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_router};

#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Self>,
}

// An empty list of approvers: no one could ever approve.
#[confirm_router]
#[tool_router(router = tool_router)]
impl Server {
    #[tool(description = "Void an invoice.")]
    #[confirm(message = "Void it?", approve_in_browser, approved_by(any_of = []))]
    async fn invoice_void(&self) -> String {
        String::new()
    }
}

fn main() {}
