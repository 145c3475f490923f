//! `#[confirm_router]` below `#[tool_router]` works as well as above it: no order rule.
use mcp_confirm::rmcp::Confirmation;
use mcp_confirm::{Candidate, Lookup, PolicyError, confirm_router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ErrorData, tool, tool_router};

#[derive(Clone)]
struct Server {
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    #[allow(dead_code)]
    title: String,
}

#[tool_router(router = tool_router)]
#[confirm_router]
impl Server {
    #[tool(description = "List.", annotations(read_only_hint = true))]
    async fn files_list(&self) -> String {
        String::new()
    }

    #[tool(description = "Delete one file.", annotations(destructive_hint = true))]
    #[confirm(pick_one = Self::matching)]
    async fn files_delete(
        &self,
        confirmation: Confirmation,
        Parameters(_args): Parameters<Args>,
    ) -> Result<String, ErrorData> {
        let (id, _version) = confirmation.chosen_with_version()?;
        Ok(id.to_owned())
    }

    async fn matching(&self, _lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        Ok(vec![])
    }
}

fn main() {
    let server = Server { tool_router: Server::tool_router() };
    let declarations = server.confirm_declarations();
    assert_eq!(declarations.confirmed_tools().collect::<Vec<_>>(), ["files_delete"]);
    assert_eq!(Server::tool_router().list_all().len(), 2);
}
