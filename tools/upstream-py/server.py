"""A "notes" MCP server on the official Python MCP SDK (`mcp` 2.x, MCPServer) with NO
confirmation of its own: notes_delete deletes the first note with the title at once. The second
upstream the confirmation gateway is proven in front of (.ci/gateway.sh). Streamable HTTP,
stateless, JSON responses. Every deletion is printed to stdout as `deleted <id>`.

    python server.py --port PORT [--load-titles N] [--list-ttl-ms MS]

For the load generator's gateway flow (tools/src/bin/loadgen.rs): `--load-titles N` adds N notes
titled `load-0` … `load-<N-1>` in the workspace `load`, which it deletes one per call;
`--list-ttl-ms MS` says its tool list stays fresh for MS ms (`ttlMs`; without it, the SDK's
default: 0, stale at once).
"""

import sys

from mcp.server.caching import CacheHint
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

notes: dict[str, tuple[str, str]] = {}
# (workspace, title) -> the ids of its notes, oldest first: notes_delete finds the first one
# without walking every note (a scan would slow down as the load generator deletes).
by_title: dict[tuple[str, str], list[str]] = {}


def add(workspace: str, title: str) -> None:
    note_id = f"note-{len(notes) + 1}"
    notes[note_id] = (workspace, title)
    by_title.setdefault((workspace, title), []).append(note_id)


for workspace, title in [("personal", "Groceries"), ("personal", "Standup"), ("personal", "Ideas"), ("team", "Roadmap")]:
    add(workspace, title)
if "--load-titles" in sys.argv:
    for k in range(int(sys.argv[sys.argv.index("--load-titles") + 1])):
        add("load", f"load-{k}")

cache_hints = None
if "--list-ttl-ms" in sys.argv:
    cache_hints = {"tools/list": CacheHint(ttl_ms=int(sys.argv[sys.argv.index("--list-ttl-ms") + 1]))}
server = MCPServer("notes-upstream-py", cache_hints=cache_hints)


def workspace_of(uri: str) -> str:
    return uri.rsplit("/", 1)[-1]


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def notes_list(workspaceUri: str) -> str:
    """List the notes of a workspace."""
    return "\n".join(f"{i}: {t}" for i, (w, t) in notes.items() if w == workspace_of(workspaceUri))


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def notes_delete(workspaceUri: str, title: str) -> str:
    """Delete a note by title."""
    key = (workspace_of(workspaceUri), title)
    ids = by_title.get(key)
    if not ids:
        return f'No note titled "{title}"; nothing was deleted.'
    note_id = ids.pop(0)
    if not ids:
        del by_title[key]
    del notes[note_id]
    print(f"deleted {note_id}", flush=True)
    return f"Deleted {note_id} ({title})."


if __name__ == "__main__":
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 9001
    print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=port,
        streamable_http_path="/mcp",
        json_response=True,
        stateless_http=True,
    )
