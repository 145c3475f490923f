"""The official Python MCP client (`mcp` 2.x, mode="2026-07-28") calling one tool on a server,
answering each confirmation form with `action`:

    python mrtr_client.py <url> <token> <tool> <argsJSON> accept|decline|cancel [choice-index]

Prints one JSON line: {"action", "chosen", "isError", "text"}. Exit 0 on a tool result.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client


async def main() -> int:
    url, token, tool, args_json, action = sys.argv[1:6]
    choice_index = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    chosen = None

    async def on_elicit(_ctx, params):
        nonlocal chosen
        if action != "accept":
            return types.ElicitResult(action=action)
        content = {}
        for field, spec in (params.requested_schema.get("properties") or {}).items():
            options = [o["const"] for o in spec.get("oneOf", [])] or spec.get("enum")
            if options:
                chosen = options[choice_index]
                content[field] = chosen
            elif spec.get("type") == "boolean":
                content[field] = True
        return types.ElicitResult(action="accept", content=content)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
    try:
        async with Client(transport, mode="2026-07-28", elicitation_callback=on_elicit,
                          input_required_max_rounds=5) as client:
            result = await client.call_tool(tool, json.loads(args_json))
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        print(json.dumps({"action": action, "chosen": chosen, "isError": bool(result.is_error), "text": text}))
        return 0
    except Exception as e:  # report, then fail the run
        print(json.dumps({"action": action, "chosen": chosen, "error": repr(e)}))
        return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
