//! The fixtures of the suite's `tasks-*` scenarios: the Tasks extension (SEP-2663,
//! `io.modelcontextprotocol/tasks`), behind `ConfirmLayer` like every other tool.
//!
//! The scenarios name seven tools: `greet` (never a task), `slow_compute`, `failing_job`,
//! `protocol_error_job`, `confirm_delete`, `multi_input` and `test_tool_with_task`. The server
//! alone decides whether a call becomes a task (there is no client hint): each tool here that can
//! run as a task does so whenever the request declares the extension in its per-request client
//! capabilities, since that is the only way the scenarios can observe the task surface. Tasks live
//! in one `TaskManager` that every request's handler shares (the fixture is stateless: a new
//! handler per request), and `tasks/get`, `tasks/update` and `tasks/cancel` are answered from it by
//! the `ServerHandler` in `main.rs`. rmcp itself answers those three with -32021 to a request that
//! did not declare the extension, and `tasks/result` and `tasks/list`, which SEP-2663 removed, with
//! -32601.
//!
//! The suite has one principal, so a task is not bound to the caller that created it: its id, a
//! random UUID, is all a later `tasks/*` request needs. A real server behind `ConfirmLayer` would
//! check the caller's `Principal` on every `tasks/*` request too.

use std::time::Duration;

use rmcp::handler::server::tool::InputResponses as ToolInputResponses;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskFuture, TaskOptions};
use rmcp::{ErrorData, tool, tool_router};
use serde_json::Value;

use super::{Everything, accepted, elicit, input_required, text};

/// The longest `slow_compute` accepts: above the 60 s the scenarios ask for, well below the
/// tasks' five-minute TTL, so no task of the fixture ever expires while it runs.
const MAX_SLOW_COMPUTE_SECONDS: f64 = 120.0;

/// How long `failing_job` works before reporting its tool error (the suite describes "~1s").
const FAILING_JOB_DELAY: Duration = Duration::from_secs(1);

/// How long `protocol_error_job` and `test_tool_with_task` work as tasks: long enough that the
/// suite sees them `working` first, short enough not to slow the run.
const SHORT_JOB_DELAY: Duration = Duration::from_millis(200);

/// The arguments of `greet`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

/// The arguments of `slow_compute`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SlowComputeArgs {
    /// How long to work, in seconds (0 to 120; 1 when absent).
    seconds: Option<f64>,
    /// A label echoed in the result.
    label: Option<String>,
}

/// The arguments of `confirm_delete`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ConfirmDeleteArgs {
    /// The file the user is asked about (nothing is deleted: this is a fixture).
    filename: Option<String>,
}

/// Whether the request declared the Tasks extension: in the 2026-07-28 stateless protocol that is
/// per request, in `_meta`, and only such a request may get a task back.
fn declares_tasks(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

/// For the tools that cannot answer without a task: -32021 with the extension under
/// `requiredCapabilities`, so the client learns what to declare (SEP-2663 "Required
/// Capabilities").
fn require_tasks(ctx: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
    if declares_tasks(ctx) {
        Ok(())
    } else {
        Err(ErrorData::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ))
    }
}

/// A form asking the user to confirm with a required boolean `confirm`.
fn confirm_form(message: String) -> InputRequest {
    let schema = ElicitationSchema::builder()
        .required_bool("confirm")
        .build_unchecked();
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        },
    ))
}

/// Whether an elicitation answer accepted with `confirm: true`.
fn confirmed(answer: &Value) -> bool {
    answer["action"] == "accept" && answer["content"]["confirm"] == true
}

/// The string `value` of an accepted elicitation answer.
fn accepted_value(answer: &Value) -> &str {
    match answer["action"].as_str() {
        Some("accept") => answer["content"]["value"].as_str().unwrap_or("(no value)"),
        Some(action) => action,
        None => "(no answer)",
    }
}

/// The result of `slow_compute` once its time is up.
fn computed(label: &str, seconds: f64) -> CallToolResult {
    text(format!("slow_compute({label}) done after {seconds}s"))
}

impl Everything {
    /// Starts `work` as a task with rmcp's defaults (a five-minute TTL) and answers the call with
    /// the flat `CreateTaskResult` (`resultType: "task"`). The task is in the manager before this
    /// returns, so a `tasks/get` right after the answer finds it.
    fn start_task(&self, work: impl FnOnce(TaskContext) -> TaskFuture) -> CallToolResponse {
        let task = self.tasks.spawn(TaskOptions::default(), work);
        CreateTaskResult::new(task).into()
    }
}

#[tool_router(router = task_tools, vis = "pub(super)")]
impl Everything {
    /// Never a task, whatever the request declares: the scenarios check that a synchronous tool
    /// stays synchronous, also when the call carries the legacy v1 `task` parameter.
    #[tool(description = "Greets by name, synchronously (never a task).")]
    async fn greet(&self, Parameters(args): Parameters<GreetArgs>) -> CallToolResult {
        text(format!("Hello, {}!", args.name))
    }

    /// A task when the request declares the extension, otherwise the same work inline. The task
    /// watches for `tasks/cancel` and then settles as `cancelled`: cancellation is cooperative,
    /// and the lifecycle scenario wants that terminal status.
    #[tool(
        description = "Works for `seconds` seconds, as a task when the client declares the Tasks extension; cancellable."
    )]
    async fn slow_compute(
        &self,
        Parameters(args): Parameters<SlowComputeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let seconds = args.seconds.unwrap_or(1.0);
        if !(0.0..=MAX_SLOW_COMPUTE_SECONDS).contains(&seconds) {
            return Err(ErrorData::invalid_params(
                format!("seconds must be between 0 and {MAX_SLOW_COMPUTE_SECONDS}"),
                None,
            ));
        }
        let duration = Duration::from_secs_f64(seconds);
        let label = args.label.unwrap_or_else(|| "compute".to_owned());
        if !declares_tasks(&ctx) {
            tokio::time::sleep(duration).await;
            return Ok(computed(&label, seconds).into());
        }
        Ok(self.start_task(move |task| {
            Box::pin(async move {
                tokio::select! {
                    () = task.cancelled() => Err(TaskExit::Cancelled),
                    () = tokio::time::sleep(duration) => Ok(computed(&label, seconds)),
                }
            })
        }))
    }

    /// Only ever a task (-32021 without the extension): the tool error it reports settles the
    /// task as `completed` with `isError: true`, not as `failed`, which is for protocol errors.
    #[tool(
        description = "Requires the Tasks extension; the task completes with a tool error (isError: true)."
    )]
    async fn failing_job(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        require_tasks(&ctx)?;
        Ok(self.start_task(|_| {
            Box::pin(async {
                tokio::time::sleep(FAILING_JOB_DELAY).await;
                Ok(CallToolResult::error(vec![ContentBlock::text(
                    "failing_job: this tool always fails",
                )]))
            })
        }))
    }

    /// A protocol-level failure: as a task it settles as `failed` with the JSON-RPC error inlined,
    /// without the extension the call itself answers with that error.
    #[tool(
        description = "Fails with a protocol error; as a task (with the Tasks extension) the task ends failed."
    )]
    async fn protocol_error_job(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let failure =
            || ErrorData::internal_error("protocol_error_job: this job always fails", None);
        if !declares_tasks(&ctx) {
            return Err(failure());
        }
        Ok(self.start_task(move |_| {
            Box::pin(async move {
                tokio::time::sleep(SHORT_JOB_DELAY).await;
                Err(TaskExit::Error(failure()))
            })
        }))
    }

    /// Only ever a task: it parks on one elicitation, surfaced as `input_required` with the form
    /// under `inputRequests` on `tasks/get`, until `tasks/update` answers it (or `tasks/cancel`
    /// wakes it, and the task settles as `cancelled`).
    #[tool(
        description = "Requires the Tasks extension; the task asks the user to confirm, then reports the answer (deletes nothing)."
    )]
    async fn confirm_delete(
        &self,
        Parameters(args): Parameters<ConfirmDeleteArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        require_tasks(&ctx)?;
        let filename = args.filename.unwrap_or_else(|| "file.txt".to_owned());
        Ok(self.start_task(move |task| {
            Box::pin(async move {
                let form = confirm_form(format!("Delete {filename}?"));
                let answer = task.request_input("confirm", form).await?;
                Ok(text(if confirmed(&answer) {
                    format!("confirm_delete: {filename} confirmed (nothing was deleted)")
                } else {
                    format!("confirm_delete: {filename} kept")
                }))
            })
        }))
    }

    /// Only ever a task: it asks two questions at once, so both keys are pending together and the
    /// suite can answer them one `tasks/update` at a time (partial fulfilment).
    #[tool(
        description = "Requires the Tasks extension; the task asks two questions at once, then reports both answers."
    )]
    async fn multi_input(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        require_tasks(&ctx)?;
        Ok(self.start_task(|task| {
            Box::pin(async move {
                let (a, b) = tokio::join!(
                    task.request_input("input-a", elicit("Provide value A", "value")),
                    task.request_input("input-b", elicit("Provide value B", "value")),
                );
                let (a, b) = (a?, b?);
                Ok(text(format!(
                    "multi_input: a = {}, b = {}",
                    accepted_value(&a),
                    accepted_value(&b)
                )))
            })
        }))
    }

    /// MRTR, then a task (SEP-2663 composition): the first call answers `input_required` for the
    /// user's name, with no task and no `requestState`; the retry carrying the answer starts a
    /// task whose result has the name in it, so the suite sees the answer cross from one surface
    /// to the other.
    #[tool(
        description = "Requires the Tasks extension; asks for a name (input_required), then greets it from a task."
    )]
    async fn test_tool_with_task(
        &self,
        ToolInputResponses(responses): ToolInputResponses,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        require_tasks(&ctx)?;
        let Some(name) = accepted(responses.as_ref(), "user_name", "name") else {
            let ask = elicit("What is your name?", "name");
            return Ok(input_required("user_name", ask, None).into());
        };
        let greeting = format!("Hello, {name}! (from a task)");
        Ok(self.start_task(move |_| {
            Box::pin(async move {
                tokio::time::sleep(SHORT_JOB_DELAY).await;
                Ok(text(greeting))
            })
        }))
    }
}
