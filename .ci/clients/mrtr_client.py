"""The official Python MCP client (`mcp` 2.x, mode="2026-07-28") calling one tool on a server,
answering each confirmation form with `action`:

    python mrtr_client.py <url> <token> <tool> <argsJSON> accept|decline|cancel [choice-index]
                          [remember] [laterArgsJSON...]

`remember` answers the form's `remember` field on the first call ("once" or "standing"); each
later call (same tool, its own arguments) accepts any form it gets with choice 0, "once".
Prints one JSON line: {"action", "chosen", "isError", "text", "forms", "later": [{"forms",
"chosen", "isError", "text"}]}. Exit 0 on tool results.
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
    remember = sys.argv[7] if len(sys.argv) > 7 else "once"
    later = sys.argv[8:]
    answering = {"action": action, "choice": choice_index, "remember": remember}
    seen = {"forms": 0, "chosen": None}

    async def on_elicit(_ctx, params):
        seen["forms"] += 1
        if answering["action"] != "accept":
            return types.ElicitResult(action=answering["action"])
        content = {}
        for field, spec in (params.requested_schema.get("properties") or {}).items():
            options = [o["const"] for o in spec.get("oneOf", [])] or spec.get("enum")
            if field == "remember" and options:
                content[field] = answering["remember"] if answering["remember"] in options else "once"
            elif options:
                seen["chosen"] = options[answering["choice"]]
                content[field] = seen["chosen"]
            elif spec.get("type") == "boolean":
                content[field] = True
        return types.ElicitResult(action="accept", content=content)

    async def call(client, args):
        seen.update(forms=0, chosen=None)
        result = await client.call_tool(tool, json.loads(args))
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        return {"forms": seen["forms"], "chosen": seen["chosen"], "isError": bool(result.is_error), "text": text}

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
    try:
        async with Client(transport, mode="2026-07-28", elicitation_callback=on_elicit,
                          input_required_max_rounds=5) as client:
            first = await call(client, args_json)
            after = []
            for args in later:
                answering.update(action="accept", choice=0, remember="once")
                after.append(await call(client, args))
        print(json.dumps({"action": action, **first, "later": after}))
        return 0
    except Exception as e:  # report, then fail the run
        print(json.dumps({"action": action, "chosen": seen["chosen"], "error": repr(e)}))
        return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
