//! The gateway's metrics (`[metrics]`): what the core records (`mcp_confirm::metrics`: the
//! decisions, refusals, answer times, claims and store errors) and the decision log
//! (`mcp_confirm_log::metrics`), exported by `metrics-exporter-prometheus` as Prometheus text
//! on a listener of their own. Metrics are for operators: never on the public listener.
//!
//! The recorder is the process's one `metrics` recorder: [`install`] installs it once and hands
//! out the same handle after that.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

/// How often the recorder's upkeep runs (its histograms' samples are drained into their
/// buckets).
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The media type of the text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// Installs the Prometheus recorder as the process's `metrics` recorder, the answer-time
/// histogram with [`ANSWER_SECONDS_BUCKETS`](mcp_confirm::metrics::ANSWER_SECONDS_BUCKETS),
/// every metric described, and its upkeep run every [`UPKEEP_EVERY`]; its handle. Called again,
/// the same handle. Must be called within a Tokio runtime (the upkeep is a task).
///
/// # Errors
/// The exporter's, as text: another recorder was installed in this process first.
pub fn install() -> Result<PrometheusHandle, String> {
    let mut installed = INSTALLED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(mcp_confirm::metrics::ANSWER_SECONDS.into()),
            mcp_confirm::metrics::ANSWER_SECONDS_BUCKETS,
        )
        .map_err(|e| format!("metrics: {e}"))?
        .install_recorder()
        .map_err(|e| format!("metrics: {e}"))?;
    mcp_confirm::metrics::describe();
    mcp_confirm_log::metrics::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            upkeep.run_upkeep();
        }
    });
    *installed = Some(handle.clone());
    Ok(handle)
}

/// Serves `handle`'s metrics on `listener`: `GET` (or `HEAD`) `path` is the text exposition,
/// any other method there a 405, any other path a 404.
///
/// # Errors
/// The listener's, if it stops accepting.
pub async fn serve(
    listener: TcpListener,
    path: String,
    handle: PrometheusHandle,
) -> std::io::Result<()> {
    let path: std::sync::Arc<str> = path.into();
    loop {
        let (stream, _) = listener.accept().await?;
        let (path, handle) = (path.clone(), handle.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<_>| {
                let answer = page(&request, &path, &handle);
                async move { Ok::<_, std::convert::Infallible>(answer) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(crate::server::HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "a metrics connection ended with an error");
            }
        });
    }
}

/// The answer to one request on the metrics listener.
fn page<B>(request: &Request<B>, path: &str, handle: &PrometheusHandle) -> Response<Full<Bytes>> {
    let answer = |status: StatusCode, content_type: &'static str, body: Bytes| {
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    };
    let text = "text/plain; charset=utf-8";
    if request.uri().path() != path {
        return answer(
            StatusCode::NOT_FOUND,
            text,
            Bytes::from_static(b"Not found."),
        );
    }
    match *request.method() {
        // (hyper sends no body to a HEAD, and the length GET's would have.)
        Method::GET | Method::HEAD => {
            answer(StatusCode::OK, TEXT_FORMAT, Bytes::from(handle.render()))
        }
        _ => {
            let mut response = answer(
                StatusCode::METHOD_NOT_ALLOWED,
                text,
                Bytes::from_static(b"GET only."),
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            response
        }
    }
}
