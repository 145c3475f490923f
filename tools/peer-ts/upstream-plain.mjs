// A "notes" MCP server on the official TypeScript MCP SDK v2 with NO confirmation of its own:
// notes_delete deletes the first note with the title at once. It is the upstream the
// confirmation gateway is proven in front of (.ci/gateway.sh): reached directly, the first call
// deletes; through the gateway, only an accepted confirmation does. Protocol 2026-07-28,
// stateless, JSON responses. Every deletion is printed to stdout as `deleted <id>`.
//
//   node upstream-plain.mjs --addr 127.0.0.1:PORT
//
// It accepts one bearer token, the operator's (UPSTREAM_TOKEN, default
// "operator-token-0123456789"): callers reach it through the gateway, which sends the
// operator's credential, never theirs.
import { createServer } from 'node:http';

import { localhostHostValidation, toNodeHandler } from '@modelcontextprotocol/node';
import {
    bearerAuthChallengeResponse,
    createMcpHandler,
    McpServer,
    OAuthError,
    OAuthErrorCode,
    verifyBearerToken
} from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

let addr = '127.0.0.1:9000';
{
    const argv = process.argv.slice(2);
    for (let i = 0; i < argv.length; i++) if (argv[i] === '--addr') addr = argv[++i];
}
const TOKEN = process.env.UPSTREAM_TOKEN ?? 'operator-token-0123456789';

/** id -> { workspace, title } */
const notes = new Map();
let counter = 0;
for (const [workspace, titles] of [['personal', ['Groceries', 'Standup', 'Ideas', 'Taxes']], ['team', ['Roadmap']]]) {
    for (const title of titles) notes.set(`note-${++counter}`, { workspace, title });
}
const workspaceOf = uri => uri.slice(uri.lastIndexOf('/') + 1);
const text = (t, isError = false) => ({ content: [{ type: 'text', text: t }], ...(isError && { isError: true }) });

function buildServer() {
    const server = new McpServer({ name: 'notes-upstream-ts', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.registerTool(
        'notes_list',
        { description: 'List the notes of a workspace', inputSchema: z.object({ workspaceUri: z.string() }), annotations: { readOnlyHint: true } },
        async ({ workspaceUri }) => {
            const lines = [];
            for (const [id, note] of notes) if (note.workspace === workspaceOf(workspaceUri)) lines.push(`${id}: ${note.title}`);
            return text(lines.join('\n'));
        }
    );
    server.registerTool(
        'notes_delete',
        {
            description: 'Delete a note by title',
            inputSchema: z.object({ workspaceUri: z.string(), title: z.string() }),
            annotations: { destructiveHint: true }
        },
        async ({ workspaceUri, title }) => {
            for (const [id, note] of notes) {
                if (note.workspace === workspaceOf(workspaceUri) && note.title === title) {
                    notes.delete(id);
                    console.log(`deleted ${id}`);
                    return text(`Deleted ${id} (${title}).`);
                }
            }
            return text(`No note titled "${title}"; nothing was deleted.`, true);
        }
    );
    return server;
}

const verifier = {
    async verifyAccessToken(token) {
        if (token !== TOKEN) throw new OAuthError(OAuthErrorCode.InvalidToken, 'unknown token');
        return { token, clientId: 'operator', scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600 };
    }
};
const handler = createMcpHandler(buildServer, { responseMode: 'json' });
const nodeHandler = toNodeHandler(handler);
const validateHost = localhostHostValidation();
const httpServer = createServer(async (req, res) => {
    if (!validateHost(req, res)) return;
    if (req.url !== '/mcp') {
        res.writeHead(404).end();
        return;
    }
    try {
        req.auth = await verifyBearerToken(req.headers.authorization, { verifier });
    } catch (error) {
        const response = bearerAuthChallengeResponse(error);
        res.writeHead(response.status, Object.fromEntries(response.headers));
        res.end(await response.text());
        return;
    }
    await nodeHandler(req, res);
});
const cut = addr.lastIndexOf(':');
httpServer.listen(Number(addr.slice(cut + 1)), addr.slice(0, cut), () => console.log(`listening on http://${addr}/mcp`));
const shutdown = () => {
    httpServer.close();
    httpServer.closeAllConnections();
    process.exit(0);
};
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
