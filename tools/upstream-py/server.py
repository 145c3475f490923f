"""A "notes" MCP server on the official Python MCP SDK (`mcp` 2.x, MCPServer) with NO
confirmation of its own: notes_delete deletes the first note with the title at once. The second
upstream the confirmation gateway is proven in front of (.ci/gateway.sh). Streamable HTTP,
stateless, JSON responses. Every deletion is printed to stdout as `deleted <id>`.

    python server.py --port PORT
"""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

notes: dict[str, tuple[str, str]] = {}
for i, (workspace, title) in enumerate(
    [("personal", "Groceries"), ("personal", "Standup"), ("personal", "Ideas"), ("team", "Roadmap")],
    start=1,
):
    notes[f"note-{i}"] = (workspace, title)

server = MCPServer("notes-upstream-py")


def workspace_of(uri: str) -> str:
    return uri.rsplit("/", 1)[-1]


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def notes_list(workspaceUri: str) -> str:
    """List the notes of a workspace."""
    return "\n".join(f"{i}: {t}" for i, (w, t) in notes.items() if w == workspace_of(workspaceUri))


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def notes_delete(workspaceUri: str, title: str) -> str:
    """Delete a note by title."""
    for note_id, (workspace, note_title) in list(notes.items()):
        if workspace == workspace_of(workspaceUri) and note_title == title:
            del notes[note_id]
            print(f"deleted {note_id}", flush=True)
            return f"Deleted {note_id} ({title})."
    return f'No note titled "{title}"; nothing was deleted.'


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
