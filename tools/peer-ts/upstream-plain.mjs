// A "notes" MCP server on the official TypeScript MCP SDK v2 with NO confirmation of its own:
// notes_delete deletes the first note with the title at once. It is the upstream the
// confirmation gateway is proven in front of (.ci/gateway.sh): reached directly, the first call
// deletes; through the gateway, only an accepted confirmation does. Protocol 2026-07-28,
// stateless, JSON responses. Every deletion is printed to stdout as `deleted <id>`.
//
//   node upstream-plain.mjs --addr 127.0.0.1:PORT [--load-titles N] [--list-ttl-ms MS]
//
// For the load generator's gateway flow (tools/src/bin/loadgen.rs): `--load-titles N` adds N notes
// titled `load-0` … `load-<N-1>` in the workspace `load`, which it deletes one per call;
// `--list-ttl-ms MS` says its tool list stays fresh for MS ms (`ttlMs`; without it, the SDK's
// default: 0, stale at once).
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
let loadTitles = 0;
let listTtlMs;
{
    const argv = process.argv.slice(2);
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === '--addr') addr = argv[++i];
        else if (argv[i] === '--load-titles') loadTitles = Number(argv[++i]);
        else if (argv[i] === '--list-ttl-ms') listTtlMs = Number(argv[++i]);
    }
}
const TOKEN = process.env.UPSTREAM_TOKEN ?? 'operator-token-0123456789';

/** id -> { workspace, title } */
const notes = new Map();
/** `workspace\0title` -> the ids of its notes, oldest first: notes_delete finds the first one
 * without walking every note (a scan would slow down as the load generator deletes). */
const byTitle = new Map();
let counter = 0;
const add = (workspace, title) => {
    const id = `note-${++counter}`;
    notes.set(id, { workspace, title });
    const key = `${workspace}\0${title}`;
    if (!byTitle.has(key)) byTitle.set(key, []);
    byTitle.get(key).push(id);
};
for (const [workspace, titles] of [['personal', ['Groceries', 'Standup', 'Ideas', 'Taxes']], ['team', ['Roadmap']]]) {
    for (const title of titles) add(workspace, title);
}
for (let k = 0; k < loadTitles; k++) add('load', `load-${k}`);
const workspaceOf = uri => uri.slice(uri.lastIndexOf('/') + 1);
const text = (t, isError = false) => ({ content: [{ type: 'text', text: t }], ...(isError && { isError: true }) });

function buildServer() {
    const server = new McpServer(
        { name: 'notes-upstream-ts', version: '1.0.0' },
        { capabilities: { tools: {} }, ...(listTtlMs !== undefined && { cacheHints: { 'tools/list': { ttlMs: listTtlMs } } }) }
    );
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
            const key = `${workspaceOf(workspaceUri)}\0${title}`;
            const ids = byTitle.get(key);
            if (ids === undefined) return text(`No note titled "${title}"; nothing was deleted.`, true);
            const id = ids.shift();
            if (ids.length === 0) byTitle.delete(key);
            notes.delete(id);
            console.log(`deleted ${id}`);
            return text(`Deleted ${id} (${title}).`);
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
