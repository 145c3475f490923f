//! The delivering notifier: signed Standard Webhooks to each endpoint, from a bounded queue, on
//! a thread of its own, with retries and backoff. The request that proposed an approval only
//! takes a permit and hands the notice over; a full queue drops the notice and counts it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use mcp_confirm::notify::signature::{
    WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, WebhookSecret, sign,
};
use mcp_confirm::notify::{ApprovalNotice, Notifier, Payload};

/// One receiver: where to post, the secret it verifies with, and the body's shape.
#[derive(Debug, Clone)]
pub struct WebhookEndpoint {
    url: String,
    secret: WebhookSecret,
    payload: Payload,
}

impl WebhookEndpoint {
    /// Posts [`Payload::Standard`] events to `url` (`http` or `https`), signed with `secret`.
    pub fn new(url: impl Into<String>, secret: WebhookSecret) -> Self {
        Self {
            url: url.into(),
            secret,
            payload: Payload::Standard,
        }
    }

    /// Posts bodies of this shape instead (e.g. [`Payload::Slack`] for an incoming webhook).
    #[must_use]
    pub fn payload(mut self, payload: Payload) -> Self {
        self.payload = payload;
        self
    }
}

/// What the notifier did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhooksStats {
    /// Deliveries a receiver acknowledged (2xx).
    pub delivered: u64,
    /// Attempts that failed and were tried again.
    pub retried: u64,
    /// Deliveries given up: a final refusal (a 4xx other than 408 and 429) or every retry
    /// failed.
    pub failed: u64,
    /// Notices dropped because the queue was full.
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

struct Job {
    notice: Arc<ApprovalNotice>,
    endpoint: Arc<WebhookEndpoint>,
    _permit: OwnedSemaphorePermit,
}

/// Delivers each new approval's notice to every endpoint, as a signed Standard Webhook:
/// `webhook-id` (the same on every retry, so a receiver drops repeats), `webhook-timestamp` and
/// `webhook-signature`. Hand it to
/// [`ConfirmLayerBuilder::notifier`](mcp_confirm::ConfirmLayerBuilder::notifier).
///
/// Deliveries wait in a bounded queue (by default 1,024, in flight and retrying included) and
/// run on a thread of their own; attempts time out after 10 s and are retried after 1 s, 5 s,
/// 30 s, 2 min and 10 min on a network error, 408, 429 or 5xx. Redirects are not followed. The
/// MCP request never waits on any of it. Dropping the last handle stops the thread and abandons
/// what is still queued.
#[derive(Clone)]
pub struct Webhooks {
    endpoints: Arc<[Arc<WebhookEndpoint>]>,
    permits: Arc<Semaphore>,
    jobs: mpsc::UnboundedSender<Job>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("endpoints", &self.endpoints.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Why a [`Webhooks`] notifier was not built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhooksError {
    /// An endpoint's URL is not an absolute `http` or `https` URL.
    #[error("webhook endpoint {0:?} is not an absolute http(s) URL")]
    Url(String),
    /// No endpoint, a zero queue or no retry delays where some were given.
    #[error("webhooks: {0}")]
    Config(&'static str),
    /// The delivery thread could not start.
    #[error("webhooks: the delivery thread did not start: {0}")]
    Thread(#[source] std::io::Error),
}

/// How [`Webhooks`] is set up.
#[derive(Debug, Clone)]
pub struct WebhooksBuilder {
    endpoints: Vec<WebhookEndpoint>,
    queue: usize,
    retry_delays: Vec<Duration>,
    timeout: Duration,
}

impl Webhooks {
    /// A notifier for `endpoints`, with the defaults; see [`Webhooks::builder`].
    ///
    /// # Errors
    /// [`WebhooksError`] for a URL that is not absolute `http(s)`, or no endpoint.
    pub fn new(
        endpoints: impl IntoIterator<Item = WebhookEndpoint>,
    ) -> Result<Self, WebhooksError> {
        let mut builder = Self::builder();
        for endpoint in endpoints {
            builder = builder.endpoint(endpoint);
        }
        builder.build()
    }

    /// A builder, for the queue's bound, the retry delays and the attempt timeout.
    pub fn builder() -> WebhooksBuilder {
        WebhooksBuilder {
            endpoints: Vec::new(),
            queue: 1024,
            retry_delays: [1, 5, 30, 120, 600].map(Duration::from_secs).to_vec(),
            timeout: Duration::from_secs(10),
        }
    }

    /// What the notifier did so far.
    pub fn stats(&self) -> WebhooksStats {
        let c = &self.counters;
        WebhooksStats {
            delivered: c.delivered.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
    }
}

impl WebhooksBuilder {
    /// Delivers to `endpoint` too.
    #[must_use]
    pub fn endpoint(mut self, endpoint: WebhookEndpoint) -> Self {
        self.endpoints.push(endpoint);
        self
    }

    /// At most `deliveries` waiting or in flight (one per notice and endpoint); more are
    /// dropped and counted.
    #[must_use]
    pub fn queue(mut self, deliveries: usize) -> Self {
        self.queue = deliveries;
        self
    }

    /// The waits between attempts; one attempt more than there are delays.
    #[must_use]
    pub fn retry_delays(mut self, delays: impl IntoIterator<Item = Duration>) -> Self {
        self.retry_delays = delays.into_iter().collect();
        self
    }

    /// The most one attempt may take.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Starts the delivery thread.
    ///
    /// # Errors
    /// [`WebhooksError`] for a URL that is not absolute `http(s)`, no endpoint, a zero queue, or
    /// a thread that does not start.
    pub fn build(self) -> Result<Webhooks, WebhooksError> {
        if self.endpoints.is_empty() {
            return Err(WebhooksError::Config("no endpoint"));
        }
        if self.queue == 0 {
            return Err(WebhooksError::Config("a queue of 0 drops every notice"));
        }
        for endpoint in &self.endpoints {
            let absolute = endpoint.url.parse::<http::Uri>().ok().is_some_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
            });
            if !absolute {
                return Err(WebhooksError::Url(endpoint.url.clone()));
            }
        }
        let (jobs, queue) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            counters: Arc::clone(&counters),
            retry_delays: self.retry_delays.into(),
            timeout: self.timeout,
        };
        std::thread::Builder::new()
            .name("mcp-confirm-webhooks".into())
            .spawn(move || worker.run(queue))
            .map_err(WebhooksError::Thread)?;
        Ok(Webhooks {
            endpoints: self.endpoints.into_iter().map(Arc::new).collect(),
            permits: Arc::new(Semaphore::new(self.queue)),
            jobs,
            counters,
        })
    }
}

impl Notifier for Webhooks {
    fn approval_requested(&self, notice: ApprovalNotice) {
        let notice = Arc::new(notice);
        for endpoint in self.endpoints.iter() {
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: mcp_confirm::audit::TARGET, approval = %notice.id,
                    "webhook queue full: notification dropped");
                continue;
            };
            let job = Job {
                notice: Arc::clone(&notice),
                endpoint: Arc::clone(endpoint),
                _permit: permit,
            };
            if self.jobs.send(job).is_err() {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct Worker {
    counters: Arc<Counters>,
    retry_delays: Arc<[Duration]>,
    timeout: Duration,
}

impl Worker {
    fn run(self, mut queue: mpsc::UnboundedReceiver<Job>) {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            tracing::error!(target: mcp_confirm::audit::TARGET,
                "webhooks: no runtime for deliveries; notifications are dropped");
            return;
        };
        runtime.block_on(async move {
            let client = match reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(self.timeout)
                .build()
            {
                Ok(client) => client,
                Err(e) => {
                    tracing::error!(target: mcp_confirm::audit::TARGET, error = %e,
                        "webhooks: no HTTP client; notifications are dropped");
                    return;
                }
            };
            let this = Arc::new(self);
            while let Some(job) = queue.recv().await {
                tokio::spawn(Arc::clone(&this).deliver(client.clone(), job));
            }
        });
    }

    /// Every attempt at one delivery, until a receiver acknowledges it, refuses it for good, or
    /// the retries run out. The permit is released when it ends.
    async fn deliver(self: Arc<Self>, client: reqwest::Client, job: Job) {
        let endpoint = &job.endpoint;
        let id = format!("msg_{}", job.notice.id);
        let body = endpoint.payload.body(&job.notice, SystemTime::now());
        let mut delays = self.retry_delays.iter();
        loop {
            let timestamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let signature = sign(&endpoint.secret, &id, timestamp, &body);
            let sent = client
                .post(&endpoint.url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(WEBHOOK_ID, &id)
                .header(WEBHOOK_TIMESTAMP, timestamp.to_string())
                .header(WEBHOOK_SIGNATURE, signature)
                .body(body.clone())
                .send()
                .await;
            let again = match &sent {
                Ok(response) if response.status().is_success() => {
                    self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Ok(response) => {
                    let status = response.status();
                    status.is_server_error()
                        || status == http::StatusCode::REQUEST_TIMEOUT
                        || status == http::StatusCode::TOO_MANY_REQUESTS
                }
                Err(_) => true,
            };
            let why = match &sent {
                Ok(response) => response.status().to_string(),
                Err(e) => e.to_string(),
            };
            match delays.next() {
                Some(delay) if again => {
                    self.counters.retried.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(target: mcp_confirm::audit::TARGET, approval = %job.notice.id,
                        why, "webhook attempt failed; trying again");
                    tokio::time::sleep(*delay).await;
                }
                _ => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(target: mcp_confirm::audit::TARGET, approval = %job.notice.id,
                        why, "webhook delivery given up");
                    return;
                }
            }
        }
    }
}
