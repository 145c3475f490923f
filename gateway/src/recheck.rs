//! The approvers' live check from the file (`approvers.recheck`): right before an approved call
//! runs, the gateway asks the deployment's endpoint whether each approver may still approve it,
//! through the core's [`ApproverCheck`](mcp_confirm::ApproverCheck) hook. Fail closed: only a
//! 2xx answer `{"still_approver": true}` lets the call run; `false` refuses it (the core's
//! `revoked` outcome), and anything else (another status or body, a redirect, a timeout, an
//! endpoint that cannot be reached) refuses it as an error. The reasons go to the log only; the
//! endpoint's URL, which may carry a credential, goes nowhere.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcp_confirm::{ApproverQuery, PolicyError};
use serde_json::{Value, json};

use crate::config::{ConfigError, Location, recheck_url_problem};

/// The most of an endpoint's answer that is read (bytes): it says one boolean.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// One tool's recheck: the endpoint and what the gateway tells it besides the query.
#[derive(Clone)]
pub struct Recheck {
    client: reqwest::Client,
    url: Arc<reqwest::Url>,
    /// The route's URL, so one endpoint can serve several routes.
    route: String,
    /// The role the rule names, if it names one: the approver must still hold it.
    role: Option<String>,
}

impl std::fmt::Debug for Recheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a credential: never printed.
        f.debug_struct("Recheck")
            .field("route", &self.route)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Why an endpoint's answer let nothing run (for the log).
#[derive(Debug, thiserror::Error)]
pub enum RecheckError {
    /// It could not be asked, or did not answer in time (the URL left out).
    #[error("the recheck endpoint could not be asked: {0}")]
    Unreachable(reqwest::Error),
    /// It answered with a status other than 2xx (a redirect included).
    #[error("the recheck endpoint answered {0}")]
    Status(u16),
    /// Its answer is longer than [`MAX_ANSWER_BYTES`].
    #[error("the recheck endpoint's answer is too long")]
    TooLong,
    /// Its answer is not `{"still_approver": true|false}`.
    #[error("the recheck endpoint's answer is not {{\"still_approver\": true|false}}")]
    NotAnAnswer,
}

impl Recheck {
    /// The recheck of a tool of the route `route` under a rule naming `role` (if any): the URL
    /// read (relative to `base` when named by file) and checked, a client bounded by `timeout`.
    ///
    /// # Errors
    /// [`ConfigError`] if the URL cannot be read or used.
    pub fn new(
        url: &Location,
        timeout: Duration,
        base: &Path,
        route: String,
        role: Option<String>,
    ) -> Result<Self, ConfigError> {
        let text = zeroize::Zeroizing::new(url.read(base)?);
        let described = match url {
            Location::Written(url) => format!("{url:?}"),
            Location::Named(secret) => secret.to_string(),
        };
        let invalid = |why: &str| ConfigError::Invalid(format!("recheck url {described}: {why}"));
        if let Some(why) = recheck_url_problem(&text, matches!(url, Location::Written(_))) {
            return Err(invalid(why));
        }
        let parsed = reqwest::Url::parse(&text).map_err(|_| invalid("not a URL"))?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| ConfigError::Invalid(format!("recheck: the HTTP client: {e}")))?;
        Ok(Self {
            client,
            url: Arc::new(parsed),
            route,
            role,
        })
    }

    /// Whether `query.approver` may still approve, as the endpoint says.
    ///
    /// # Errors
    /// [`RecheckError`] for anything but a 2xx answer saying `true` or `false`.
    pub async fn ask(&self, query: &ApproverQuery) -> Result<bool, RecheckError> {
        let body = json!({
            "approver": query.approver,
            "tool": query.tool,
            "caller": {
                "subject": query.caller.subject(),
                "roles": query.caller.roles().collect::<Vec<_>>(),
            },
            "route": self.route,
            "role": self.role,
        });
        let mut response = self
            .client
            .post(self.url.as_ref().clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| RecheckError::Unreachable(e.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(RecheckError::Status(status.as_u16()));
        }
        let mut read = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| RecheckError::Unreachable(e.without_url()))?
        {
            if read.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(RecheckError::TooLong);
            }
            read.extend_from_slice(&chunk);
        }
        let answer: Value = serde_json::from_slice(&read).map_err(|_| RecheckError::NotAnAnswer)?;
        match answer.get("still_approver") {
            Some(Value::Bool(yes)) => Ok(*yes),
            _ => Err(RecheckError::NotAnAnswer),
        }
    }

    /// The core's hook: this recheck, asked for each approver.
    pub fn hook(&self) -> impl mcp_confirm::ApproverCheck {
        let recheck = self.clone();
        move |query: ApproverQuery| {
            let recheck = recheck.clone();
            async move {
                recheck.ask(&query).await.map_err(|e| {
                    tracing::warn!(route = %recheck.route, tool = %query.tool, error = %e,
                        "an approver could not be rechecked: the approved call is refused");
                    PolicyError::new(e)
                })
            }
        }
    }
}
