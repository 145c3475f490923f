//! The layer's metrics, recorded through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`).
//!
//! Why that facade: like `tracing`, it lets a library record without choosing how the numbers
//! leave the process. The application installs one recorder (`metrics-exporter-prometheus` for
//! a `/metrics` page, an OpenTelemetry or StatsD bridge); with none installed, each recording
//! is an atomic load. OpenTelemetry's metrics API would have tied every user to its SDK.
//!
//! Names follow Prometheus' conventions (the exporter appends nothing); labels are bounded:
//! `tool` is a configured tool's name or `other`, `outcome` an event name of the audit
//! vocabulary, `class` a refusal class of the wire, `channel` one of `form`, `browser`,
//! `approver`, `standing`, `grant`, `none`. No label ever holds a principal, an argument or an
//! id. [`describe`] registers the descriptions; [`ANSWER_SECONDS_BUCKETS`] are the histogram
//! buckets an exporter should use for [`ANSWER_SECONDS`] (people take minutes to hours).
//!
//! The decision log (`mcp-confirm-log`, feature `metrics`) adds `mcp_confirm_log_*`.

use metrics::{Key, Label};
use series::Static;

/// Decisions, by `tool`, `outcome` (`challenged`, `accepted`, `standing_used`, `declined`,
/// `cancelled`, `refused`, `replay_blocked`, `waived`, `approval_approved`,
/// `approval_declined`, `approval_endorsed`, `standing_granted`, `grant_issued`, `grant_begun`,
/// `grant_consumed`, `grant_failed`) and `channel`.
pub const DECISIONS: &str = "mcp_confirm_decisions_total";

/// Refusals that ended a call, by `tool` and `class`: the wire error's `data.reason`
/// (`invalid_request_state`, `principal_budget_spent`, `decision_log_unavailable`, …), its code
/// where it has none (`-32022`), or `revalidation` for an acceptance whose record changed.
pub const REFUSALS: &str = "mcp_confirm_refusals_total";

/// Seconds from the question to the answer read on the retry, by `tool` and `answer`
/// (`accept`, `decline`, `cancel`): how long people take.
pub const ANSWER_SECONDS: &str = "mcp_confirm_answer_seconds";

/// Retries' states and one-time claims, by `result`: `ok` (claimed), `replay` (already used or
/// in use), `expired`, `mismatch` (bound to another principal, tool, arguments, phase or
/// request), `invalid` (forged, garbled or under an unknown key), `restarted` (issued before the
/// replay store restarted).
pub const CLAIMS: &str = "mcp_confirm_claims_total";

/// Replay store failures (unreachable, over budget), by `backend` (`memory`, `redis`,
/// `postgres`, `custom`).
pub const STORE_ERRORS: &str = "mcp_confirm_store_errors_total";

/// Browser approvals waiting for a decision now (undecided, unexpired), read from the shared
/// approval store by [`Gauges::refresh`]: every instance reports the same number.
pub const PENDING_APPROVALS: &str = "mcp_confirm_pending_approvals";

/// Standing approvals in force now (unexpired, unrevoked, uses left), read by
/// [`Gauges::refresh`].
pub const STANDING_ACTIVE: &str = "mcp_confirm_standing_active";

/// Buckets for [`ANSWER_SECONDS`], from a second to a day.
pub const ANSWER_SECONDS_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1_800.0, 3_600.0, 7_200.0, 14_400.0,
    43_200.0, 86_400.0,
];

/// Describes every metric to the installed recorder (their help texts and units). Call it once
/// after installing the recorder; recording works without it.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        DECISIONS,
        "Decisions of confirmed tools' calls, by outcome and channel"
    );
    describe_counter!(REFUSALS, "Refusals that ended a confirmed call, by class");
    describe_histogram!(
        ANSWER_SECONDS,
        Unit::Seconds,
        "Time from a confirmation's question to the answer read on its retry"
    );
    describe_counter!(CLAIMS, "Retries' states and one-time claims, by result");
    describe_counter!(STORE_ERRORS, "Replay store failures, by backend");
    describe_gauge!(
        PENDING_APPROVALS,
        "Browser approvals waiting for a decision"
    );
    describe_gauge!(STANDING_ACTIVE, "Standing approvals in force");
}

/// The gauges a layer's stores answer ([`ConfirmLayer::gauges`](crate::ConfirmLayer::gauges)):
/// counted in the shared stores when asked, not from this instance's events, so several
/// instances agree and an approval that expired unseen is no longer counted. Refresh before
/// each scrape (a store that cannot count leaves its gauge unset).
#[derive(Clone)]
pub struct Gauges {
    pub(crate) audience: String,
    pub(crate) approvals: Option<std::sync::Arc<dyn crate::store::approval::ApprovalStore>>,
    pub(crate) standing: Option<std::sync::Arc<dyn crate::store::standing::StandingStore>>,
}

impl std::fmt::Debug for Gauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gauges")
            .field("audience", &self.audience)
            .field("approvals", &self.approvals.is_some())
            .field("standing", &self.standing.is_some())
            .finish()
    }
}

impl Gauges {
    /// Counts what waits and what is in force, and sets [`PENDING_APPROVALS`] and
    /// [`STANDING_ACTIVE`]. A store that fails is logged and its gauge keeps its last value.
    pub async fn refresh(&self) {
        if let Some(store) = &self.approvals {
            match store.pending(&self.audience).await {
                Ok(Some(count)) => metrics::gauge!(PENDING_APPROVALS).set(count as f64),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(target: crate::audit::TARGET, error = %e,
                        "the approval store could not count pending approvals");
                }
            }
        }
        if let Some(store) = &self.standing {
            match store.live(&self.audience).await {
                Ok(Some(count)) => metrics::gauge!(STANDING_ACTIVE).set(count as f64),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(target: crate::audit::TARGET, error = %e,
                        "the standing store could not count standing approvals");
                }
            }
        }
    }
}

/// Counts one decision (`tool` is already a label: a configured tool's name or `other`).
pub(crate) fn decision(
    outcome: &'static str,
    tool: &str,
    channel: &'static str,
    class: Option<&str>,
) {
    let refused = class.filter(|_| matches!(outcome, "refused" | "replay_blocked"));
    series::with_tool(tool, |series| {
        let id = (Static(DECISIONS), Static(outcome), Static(channel));
        let key = series.key(id, || {
            Key::from_parts(
                DECISIONS,
                vec![
                    Label::new("tool", tool.to_owned()),
                    Label::from_static_parts("outcome", outcome),
                    Label::from_static_parts("channel", channel),
                ],
            )
        });
        series::count(key);
        if let Some(class) = refused {
            series::count(series.refusal(tool, class));
        }
    });
    if outcome == "replay_blocked" {
        claim("replay");
    }
}

/// Records how long the answer took (`answer`: `accept`, `decline`, `cancel`).
pub(crate) fn answered(tool: &str, answer: &'static str, seconds: u64) {
    series::with_tool(tool, |series| {
        let id = (Static(ANSWER_SECONDS), Static(answer), Static(""));
        let key = series.key(id, || {
            Key::from_parts(
                ANSWER_SECONDS,
                vec![
                    Label::new("tool", tool.to_owned()),
                    Label::from_static_parts("answer", answer),
                ],
            )
        });
        metrics::with_recorder(|recorder| {
            recorder
                .register_histogram(key, &series::METADATA)
                .record(seconds as f64);
        });
    });
}

/// Counts a state or claim result.
pub(crate) fn claim(result: &'static str) {
    /// The key of each result, built at compile time.
    macro_rules! keys {
        ($($result:literal),*) => {
            match result {
                $($result => {
                    static LABELS: [Label; 1] = [Label::from_static_parts("result", $result)];
                    static KEY: Key = Key::from_static_parts(CLAIMS, &LABELS);
                    &KEY
                })*
                _ => &Key::from_parts(CLAIMS, vec![Label::from_static_parts("result", result)]),
            }
        };
    }
    let key = keys!(
        "ok",
        "replay",
        "expired",
        "mismatch",
        "invalid",
        "restarted"
    );
    series::count(key);
}

/// Counts a replay store failure.
pub(crate) fn store_error(backend: &'static str) {
    metrics::counter!(STORE_ERRORS, "backend" => backend).increment(1);
}

/// The keys of the series recorded so far, each built once per thread: a recording then
/// allocates, hashes (beyond a lookup) and locks nothing, so with no recorder installed it costs
/// a lookup and the facade's atomic load, and threads share no cache line. Every label is
/// bounded (see the module's documentation), and so is this cache: past
/// [`MAX_TOOLS`](series::MAX_TOOLS) tool labels (a deployment that renamed its tools that
/// often), keys are built for each recording instead.
mod series {
    use std::cell::RefCell;

    use foldhash::HashMap;
    use metrics::{Key, Label, Level, Metadata};

    /// What the `counter!`/`histogram!` macros would say of these series.
    pub(super) static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// Tool labels cached at most, per thread.
    pub(super) const MAX_TOOLS: usize = 4096;

    /// A series of a tool label: the metric's name and up to two static label values.
    type Id = (Static, Static, Static);

    /// A static string, told apart by where it is: the same text at two addresses makes two
    /// entries of the same key, never a wrong one, and a lookup compares no bytes.
    #[derive(Clone, Copy)]
    pub(super) struct Static(pub(super) &'static str);

    impl PartialEq for Static {
        fn eq(&self, other: &Self) -> bool {
            std::ptr::eq(self.0, other.0)
        }
    }

    /// The keys of one tool label. A tool sees a handful of (outcome, channel) pairs and refusal
    /// classes, all from bounded sets, so a scan of a short vector finds a key with a few
    /// pointer or byte comparisons, cheaper than hashing the id or the class.
    #[derive(Default)]
    pub(super) struct ToolSeries {
        keys: Vec<(Id, Key)>,
        /// The refusals' keys, by class (a wire reason: bounded, but not static).
        refusals: Vec<(Box<str>, Key)>,
    }

    impl ToolSeries {
        /// The key of `id`, built by `build` the first time.
        pub(super) fn key(&mut self, id: Id, build: impl FnOnce() -> Key) -> &Key {
            let at = match self.keys.iter().position(|(seen, _)| *seen == id) {
                Some(at) => at,
                None => {
                    self.keys.push((id, build()));
                    self.keys.len() - 1
                }
            };
            &self.keys[at].1
        }

        /// The key of `tool`'s refusals in `class`.
        pub(super) fn refusal(&mut self, tool: &str, class: &str) -> &Key {
            let at = match self.refusals.iter().position(|(seen, _)| **seen == *class) {
                Some(at) => at,
                None => {
                    let key = Key::from_parts(
                        super::REFUSALS,
                        vec![
                            Label::new("tool", tool.to_owned()),
                            Label::new("class", class.to_owned()),
                        ],
                    );
                    self.refusals.push((class.into(), key));
                    self.refusals.len() - 1
                }
            };
            &self.refusals[at].1
        }
    }

    thread_local! {
        /// By tool label.
        static SERIES: RefCell<HashMap<Box<str>, ToolSeries>> = RefCell::default();
    }

    /// Runs `f` on `tool`'s cached keys (on keys kept for this call only past [`MAX_TOOLS`],
    /// or when a recorder records through the layer from inside a recording and finds the
    /// cache busy).
    pub(super) fn with_tool<R>(tool: &str, f: impl FnOnce(&mut ToolSeries) -> R) -> R {
        SERIES.with(|cell| {
            let Ok(mut series) = cell.try_borrow_mut() else {
                return f(&mut ToolSeries::default());
            };
            if let Some(cached) = series.get_mut(tool) {
                return f(cached);
            }
            if series.len() >= MAX_TOOLS {
                return f(&mut ToolSeries::default());
            }
            f(series.entry(tool.into()).or_default())
        })
    }

    /// Adds one to the counter `key`.
    pub(super) fn count(key: &Key) {
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
    }
}
