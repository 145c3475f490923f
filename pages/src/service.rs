//! The tower plumbing every page shares: one `Service` text, answering with the core's boxed
//! future (`mcp_confirm::store::BoxFuture`).

/// The tower `Service` of a page, one text for all of them: a page is always ready, never
/// fails (every refusal is a page), and answers each request from a clone of itself with its
/// own `answer`.
macro_rules! page_service {
    ($page:ty) => {
        impl<B> tower_service::Service<http::Request<B>> for $page
        where
            B: http_body::Body + Send + 'static,
            B::Data: Send,
            B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        {
            type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
            type Error = std::convert::Infallible;
            type Future =
                mcp_confirm::store::BoxFuture<'static, Result<Self::Response, Self::Error>>;

            fn poll_ready(
                &mut self,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn call(&mut self, request: http::Request<B>) -> Self::Future {
                let page = self.clone();
                Box::pin(async move { Ok(page.answer(request).await) })
            }
        }
    };
}
pub(crate) use page_service;
