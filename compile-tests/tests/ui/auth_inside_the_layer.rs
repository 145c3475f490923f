// The authentication middleware placed inside the layer: the layer hands its inner service a
// body of its own, which axum's middleware does not take. The error says where auth goes.
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use mcp_confirm::ConfirmLayer;
use tower::ServiceBuilder;

async fn authenticate(request: Request, next: Next) -> Response {
    next.run(request).await
}

fn app(confirm: ConfirmLayer) -> Router {
    let mcp = tower::service_fn(|_: Request| async {
        Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
    });
    Router::new().nest_service(
        "/mcp",
        ServiceBuilder::new()
            .layer(confirm)
            .layer(middleware::from_fn(authenticate))
            .service(mcp),
    )
}

fn main() {}
