use mcp_confirm::confirm_router;

#[derive(Clone)]
struct Server;

#[confirm_router]
impl Server {
    #[confirm]
    async fn purge(&self) -> String {
        String::new()
    }
}

fn main() {}
