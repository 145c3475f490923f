//! Issue 34, mistakes 1, 6 and 7, on the billing server a new user wrote on rmcp: a pick-one
//! `invoice_void` without `revalidate`, a plain `#[confirm]` on `customer_erase`, and a second
//! `#[tool_router(router = admin_router)]` impl with `ledger_purge`, without `#[confirm_router]`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::handler_guard::rmcp_service;
use mcp_confirm::rmcp::{Confirmation, guarded};
use mcp_confirm::testing::TestClient;
use mcp_confirm::{
    Candidate, ConfigError, ConfirmLayer, ConfirmLayerBuilder, KeyRing, Lookup, PolicyError,
    Principal, confirm_router,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ProtocolVersion, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;
use tower::ServiceBuilder;

/// invoice id → (customer, amount in cents)
type Invoices = Arc<Mutex<BTreeMap<String, (String, u64)>>>;
type Done = Arc<Mutex<Vec<String>>>;

#[derive(Clone)]
struct Billing {
    invoices: Invoices,
    done: Done,
    tool_router: ToolRouter<Self>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct VoidArgs {
    /// The customer whose open invoices match.
    #[allow(dead_code)]
    customer: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct EraseArgs {
    customer_id: String,
}

#[confirm_router]
#[tool_router]
impl Billing {
    #[tool(description = "Void an invoice.", annotations(destructive_hint = true))]
    #[confirm(pick_one = Self::open_invoices, message = "Void which invoice?")]
    async fn invoice_void(
        &self,
        confirmation: Confirmation,
        Parameters(_args): Parameters<VoidArgs>,
    ) -> Result<String, ErrorData> {
        let (id, _) = confirmation.chosen_with_version()?;
        self.invoices.lock().unwrap().remove(id);
        self.done.lock().unwrap().push(format!("voided {id}"));
        Ok(format!("Voided {id}"))
    }

    #[tool(
        name = "customer_erase",
        description = "Erase a customer and their data.",
        annotations(title = "Erase customer", destructive_hint = true)
    )]
    #[confirm]
    async fn customer_erase(&self, Parameters(args): Parameters<EraseArgs>) -> String {
        let id = args.customer_id;
        self.done.lock().unwrap().push(format!("erased {id}"));
        format!("Erased {id}")
    }

    async fn open_invoices(&self, lookup: Lookup) -> Result<Vec<Candidate>, PolicyError> {
        let customer = lookup.arguments["customer"].as_str().unwrap_or_default();
        let invoices = self
            .invoices
            .lock()
            .map_err(|_| PolicyError::new("poisoned"))?;
        Ok(invoices
            .iter()
            .filter(|(_, (c, _))| c == customer)
            .map(|(id, (_, cents))| {
                let amount = format!("{}.{:02} EUR", cents / 100, cents % 100);
                // The version is what the user approves: the amount as shown.
                Candidate::labelled(id, format!("{id}: {amount}")).with_version(amount)
            })
            .collect())
    }
}

/// The second impl, written later, without `#[confirm_router]`.
#[tool_router(router = admin_router)]
impl Billing {
    #[tool(
        description = "Purge the ledger.",
        annotations(destructive_hint = true)
    )]
    async fn ledger_purge(&self) -> String {
        self.done.lock().unwrap().push("purged".to_owned());
        "Purged".to_owned()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Billing {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }
}

impl Billing {
    /// As the user wrote it: both routers, nothing guarding the second.
    fn unguarded() -> Self {
        Self::with_router(Self::tool_router() + Self::admin_router())
    }

    /// With the service-level guard over every tool of the server.
    fn guarded() -> Self {
        Self::with_router(guarded(Self::tool_router() + Self::admin_router()))
    }

    fn with_router(tool_router: ToolRouter<Self>) -> Self {
        let invoices = BTreeMap::from([
            ("inv-1".to_owned(), ("acme".to_owned(), 1200)),
            ("inv-2".to_owned(), ("acme".to_owned(), 4500)),
        ]);
        Self {
            invoices: Arc::new(Mutex::new(invoices)),
            done: Done::default(),
            tool_router,
        }
    }

    fn done(&self) -> Vec<String> {
        self.done.lock().unwrap().clone()
    }
}

/// The layer as the README wires it, given the server's whole tool list.
fn layer(server: &Billing) -> ConfirmLayerBuilder {
    ConfirmLayer::builder(KeyRing::single("k1", crate::common::secret(34)).unwrap())
        .audience("https://billing.example/mcp")
        .declarations(server.confirm_declarations())
        .tool_list(server.tool_router.list_all())
        .confirm_destructive()
}

fn client(
    server: &Billing,
) -> TestClient<mcp_confirm::Confirm<StreamableHttpService<Billing, LocalSessionManager>>> {
    let layer = layer(server).build();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(rmcp_service(server.clone()));
    TestClient::new(svc).principal(Principal::new("alice"))
}

/// Mistake 1: the layer used to build silently, and a route around it ran `ledger_purge`.
#[test]
fn a_destructive_tool_of_an_unguarded_impl_stops_the_build_by_name() {
    let err = layer(&Billing::unguarded()).try_build().unwrap_err();
    assert_eq!(err, ConfigError::UnguardedTool("ledger_purge".into()));
    let message = err.to_string();
    assert!(
        message.contains("#[confirm_router]") && message.contains("guarded"),
        "{message}"
    );
    assert!(!message.contains("skip_handler_guards"), "{message}");
}

/// Mistake 1, fixed as the error says: the guarded router refuses `ledger_purge` on a route
/// without the layer, and the layer confirms it on the route with it.
#[tokio::test]
async fn the_guarded_router_refuses_every_destructive_tool_on_a_route_around_the_layer() {
    let server = Billing::guarded();
    let mut bare = TestClient::new(rmcp_service(server.clone())).principal(Principal::new("alice"));
    for (tool, arguments) in [
        ("ledger_purge", json!({})),
        ("customer_erase", json!({"customer_id": "cus_42"})),
        ("invoice_void", json!({"customer": "acme"})),
    ] {
        let answer = bare.call(tool, arguments).await;
        assert_eq!(
            answer.message["error"]["data"]["reason"], "confirmation_missing",
            "{tool}: {:?}",
            answer.message
        );
    }
    assert!(server.done().is_empty(), "{:?}", server.done());
    let mut client = client(&server);
    let first = client.call("ledger_purge", json!({})).await;
    assert!(first.is_input_required(), "{:?}", first.message);
    assert_eq!(client.accept(&first, None).await.text(), Some("Purged"));
    assert_eq!(server.done(), ["purged"]);
}

/// Mistake 6: a plain `#[confirm]` asked "Confirm this action." and nothing else.
#[tokio::test]
async fn a_plain_confirm_names_the_tool_and_shows_the_arguments() {
    let server = Billing::guarded();
    let mut client = client(&server);
    let first = client
        .call("customer_erase", json!({"customer_id": "cus_42"}))
        .await;
    let message = first.message().unwrap_or_default().to_owned();
    assert!(message.contains("Erase customer"), "{message}");
    assert!(message.contains("customer_id: \"cus_42\""), "{message}");
    let checkbox = &first.form().unwrap()["requestedSchema"]["properties"]["confirm"]["title"];
    assert_eq!(checkbox, "Yes, run Erase customer");
    assert!(server.done().is_empty());
    assert_eq!(
        client.accept(&first, None).await.text(),
        Some("Erased cus_42")
    );
}

/// Mistake 7: versions were signed and never compared; an invoice raised from 12.00 to 9,000.00
/// EUR between form and answer was voided anyway. Without a `revalidate`, the layer now asks
/// the resolver again.
#[tokio::test]
async fn a_pick_one_without_revalidate_refuses_a_record_changed_since_the_form() {
    let server = Billing::guarded();
    let mut client = client(&server);
    let first = client
        .call("invoice_void", json!({"customer": "acme"}))
        .await;
    assert_eq!(first.choices(), ["inv-1", "inv-2"]);
    server.invoices.lock().unwrap().get_mut("inv-1").unwrap().1 = 900_000;
    let answer = client.accept(&first, Some("inv-1")).await;
    assert_eq!(answer.outcome(), Some("revoked"), "{:?}", answer.message);
    assert!(server.done().is_empty(), "{:?}", server.done());
    // The same state is spent; a fresh form shows the new amount, and that is what is voided.
    assert!(
        client
            .accept(&first, Some("inv-1"))
            .await
            .error_code()
            .is_some()
    );
    let again = client
        .call("invoice_void", json!({"customer": "acme"}))
        .await;
    assert!(format!("{:?}", again.message).contains("9000.00 EUR"));
    assert_eq!(
        client.accept(&again, Some("inv-1")).await.text(),
        Some("Voided inv-1")
    );
    // An invoice that is gone by the answer is not voided either.
    let third = client
        .call("invoice_void", json!({"customer": "acme"}))
        .await;
    server.invoices.lock().unwrap().remove("inv-2");
    assert_eq!(
        client.accept(&third, Some("inv-2")).await.outcome(),
        Some("revoked")
    );
    assert_eq!(server.done(), ["voided inv-1"]);
}
