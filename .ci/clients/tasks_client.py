"""The official Python MCP client (`mcp` 2.x, mode="2026-07-28") driving a queued tool through the
Tasks extension (io.modelcontextprotocol/tasks, SEP-2663):

    python tasks_client.py <url> <token> <tool> <argsJSON> accept|cancel

The SDK ships no tasks support of its own: its `mcp_types` Task models are the 2025-11-25 core
shapes, and no request in it is routed for `tasks/*`. What it does ship is the client extension
API (`mcp.client.ClientExtension`, SEP-2133), and this script uses only that and the public
session, no HTTP of its own:

- `TasksExtension.identifier` puts `"extensions": {"io.modelcontextprotocol/tasks": {}}` into the
  client capabilities the SDK stamps into every request's `_meta`;
- its `ResultClaim(result_type="task", model=CreateTask, resolve=...)` makes `Client.call_tool`
  accept a `resultType: "task"` answer and hand it to the resolver;
- the resolver sends `tasks/get` (and, in `cancel` mode, first `tasks/cancel`) through
  `ClaimContext.session.send_request`, with request models whose `name_param = "taskId"` makes
  the SDK send the task id as the `Mcp-Name` header; it polls every `pollIntervalMs` until the
  task is no longer `working`, and returns the task's `CallToolResult` (or, for a task that ended
  without one, an error `CallToolResult` naming the status) to `call_tool`.

The confirmation form before the task (an `input_required` round) is answered by the SDK's own
input-required driver through `elicitation_callback`, always with accept: the one offered choice
and every boolean set to true. `cancel` cancels the task right after it is created.

Prints one JSON line: {"mode", "chosen", "taskId", "statuses", "status", "statusMessage",
"isError", "text"} (`statuses`: each `tasks/get` status in order, after "cancel acknowledged" in
`cancel` mode; `status`: the final one). Exit 0 once the task has settled, 1 on any error (then
the line carries "error").
"""

import asyncio
import json
import sys
import time
from typing import Any, Literal

import anyio
import httpx2
from mcp import Client, types
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
POLL_DEADLINE_SECONDS = 30.0


class CreateTask(types.Result):
    """SEP-2663 `CreateTaskResult`: the `tools/call` answer that a task now runs the call."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class TaskState(types.Result):
    """SEP-2663 `GetTaskResult`: the task, with its `result` once completed."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None


class TaskAck(types.Result):
    """SEP-2663 `tasks/cancel` answer: an empty acknowledgement (the status may lag)."""

    model_config = ConfigDict(extra="allow")


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # the SDK mirrors params.taskId into the Mcp-Name header


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class TasksExtension(ClientExtension):
    """The Tasks extension, client side: claims `resultType: "task"` and polls it to the end."""

    identifier = TASKS

    def __init__(self, cancel_on_create: bool) -> None:
        self.cancel_on_create = cancel_on_create
        self.task_id: str | None = None
        self.statuses: list[str] = []
        self.final: TaskState | None = None

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTask, resolve=self.resolve)]

    async def resolve(self, created: CreateTask, ctx: ClaimContext) -> types.CallToolResult:
        self.task_id = created.task_id
        params = TaskIdParams(task_id=created.task_id)
        timeout = ctx.read_timeout_seconds
        task = TaskState(task_id=created.task_id, status=created.status,
                         poll_interval_ms=created.poll_interval_ms)
        if self.cancel_on_create:
            await ctx.session.send_request(CancelTask(params=params), TaskAck, timeout)
            self.statuses.append("cancel acknowledged")
        deadline = time.monotonic() + POLL_DEADLINE_SECONDS
        interval = (created.poll_interval_ms or 250) / 1000
        while task.status == "working":
            if time.monotonic() > deadline:
                raise TimeoutError(f"task {created.task_id} still working after {POLL_DEADLINE_SECONDS}s")
            await anyio.sleep(interval)
            task = await ctx.session.send_request(GetTask(params=params), TaskState, timeout)
            self.statuses.append(task.status)
            interval = (task.poll_interval_ms or created.poll_interval_ms or 250) / 1000
        self.final = task
        if task.status == "completed" and task.result is not None:
            return types.CallToolResult.model_validate(task.result, by_name=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"task {task.status}, no result")], is_error=True
        )


async def main() -> int:
    url, token, tool, args_json, mode = sys.argv[1:6]
    if mode not in ("accept", "cancel"):
        raise SystemExit(f"mode must be accept or cancel, not {mode!r}")
    chosen = None
    tasks = TasksExtension(cancel_on_create=mode == "cancel")

    async def on_elicit(_ctx, params):
        nonlocal chosen
        content = {}
        for field, spec in (params.requested_schema.get("properties") or {}).items():
            options = [o["const"] for o in spec.get("oneOf", [])] or spec.get("enum")
            if options:
                chosen = options[0]
                content[field] = chosen
            elif spec.get("type") == "boolean":
                content[field] = True
        return types.ElicitResult(action="accept", content=content)

    def report(**fields) -> None:
        final = tasks.final
        print(json.dumps({"mode": mode, "chosen": chosen, "taskId": tasks.task_id, "statuses": tasks.statuses,
                          "status": final.status if final else None,
                          "statusMessage": final.status_message if final else None, **fields}))

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
    try:
        async with Client(transport, mode="2026-07-28", elicitation_callback=on_elicit,
                          input_required_max_rounds=5, extensions=[tasks]) as client:
            result = await client.call_tool(tool, json.loads(args_json))
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        if tasks.final is None:
            report(isError=bool(result.is_error), text=text, error="the server answered without a task")
            return 1
        report(isError=bool(result.is_error), text=text)
        return 0
    except Exception as e:  # report, then fail the run
        report(error=repr(e))
        return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
