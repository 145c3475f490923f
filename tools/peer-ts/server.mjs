// The "notes" MCP server on the official TypeScript MCP SDK v2 (@modelcontextprotocol/server),
// a performance peer for mcp-confirm's load generator. Protocol 2026-07-28, stateless
// (createMcpHandler: a fresh McpServer per request), JSON responses, and the SDK's own MRTR seam:
// notes_delete returns inputRequired(...) with a requestState sealed by createRequestStateCodec.
//
//   node server.mjs --addr 127.0.0.1:PORT --load-titles N --load-notes-per-title K
//
// Other flags (--data-dir, --key, --notes, ...) are accepted and ignored. The requestState key is
// PEER_TS_STATE_KEY (64 hex digits) or a fixed development key.
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';

import { localhostHostValidation, localhostOriginValidation, toNodeHandler } from '@modelcontextprotocol/node';
import {
    acceptedContent,
    bearerAuthChallengeResponse,
    createMcpHandler,
    createRequestStateCodec,
    inputRequired,
    inputResponse,
    McpServer,
    OAuthError,
    OAuthErrorCode,
    verifyBearerToken
} from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

// ---- command line ----------------------------------------------------------------------------
const flags = { addr: '127.0.0.1:8080', loadTitles: 0, loadNotesPerTitle: 3 };
{
    const argv = process.argv.slice(2);
    for (let i = 0; i < argv.length; i++) {
        const flag = argv[i];
        const hasValue = i + 1 < argv.length && !argv[i + 1].startsWith('--');
        const value = hasValue ? argv[++i] : undefined;
        if (flag === '--addr') flags.addr = value;
        else if (flag === '--load-titles') flags.loadTitles = Number(value);
        else if (flag === '--load-notes-per-title') flags.loadNotesPerTitle = Number(value);
        // anything else (--data-dir X, --key HEX, --notes memory, --no-audit-log, ...) is ignored
    }
    if (!Number.isInteger(flags.loadTitles) || flags.loadTitles < 0) throw new Error('--load-titles: not a count');
    if (!Number.isInteger(flags.loadNotesPerTitle) || flags.loadNotesPerTitle < 1) {
        throw new Error('--load-notes-per-title: not a count');
    }
}

// ---- notes, in memory ------------------------------------------------------------------------
/** name -> { notes: Map<id, title>, byTitle: Map<title, id[]> } */
const workspaces = new Map();
let counter = 0;
function addNote(workspace, title) {
    const id = `note-${++counter}`;
    workspace.notes.set(id, title);
    const ids = workspace.byTitle.get(title);
    if (ids) ids.push(id);
    else workspace.byTitle.set(title, [id]);
}
function seed(name, titles) {
    const workspace = { notes: new Map(), byTitle: new Map() };
    for (const title of titles) addNote(workspace, title);
    workspaces.set(name, workspace);
}
seed('personal', ['Groceries', 'Standup', 'Ideas']);
seed('team', ['Roadmap', 'Retro']);
seed('load', []);
{
    const load = workspaces.get('load');
    for (let t = 0; t < flags.loadTitles; t++) {
        for (let k = 0; k < flags.loadNotesPerTitle; k++) addNote(load, `load-${t}`);
    }
}
const ACCESS = { alice: new Set(['personal', 'team', 'load']), bob: new Set(['team']) };

/** The workspace a `file://` URI names (its last path segment) if `principal` may use it. */
function workspaceFor(uri, principal) {
    if (!uri.startsWith('file://')) return undefined;
    const name = uri.slice(uri.lastIndexOf('/') + 1);
    if (!ACCESS[principal]?.has(name)) return undefined;
    const workspace = workspaces.get(name);
    return workspace && { name, workspace };
}

const text = (t, isError = false) => ({ content: [{ type: 'text', text: t }], ...(isError && { isError: true }) });

// ---- authentication (before the transport, as the SDK's serving docs describe) ---------------
const TOKENS = { 'alice-token': 'alice', 'bob-token': 'bob' };
const verifier = {
    async verifyAccessToken(token) {
        const clientId = TOKENS[token];
        if (clientId === undefined) throw new OAuthError(OAuthErrorCode.InvalidToken, 'unknown token');
        return { token, clientId, scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600 };
    }
};

// ---- requestState: the SDK's HMAC codec, bound to method and principal -----------------------
const KEY_HEX = process.env.PEER_TS_STATE_KEY ?? '7065657220747320726571756573745374617465206b65792030313233343536';
const stateCodec = createRequestStateCodec({
    key: Buffer.from(KEY_HEX, 'hex'),
    ttlSeconds: 300,
    bind: ctx => `${ctx.mcpReq.method}\0${ctx.http?.authInfo?.clientId ?? ''}`
});
// bind(ctx) sees no request params, so the arguments are bound inside the signed payload: a digest
// of the tool name and its arguments, checked on re-entry.
const argsDigest = (workspaceUri, title) =>
    createHash('sha256').update(`notes_delete\0${workspaceUri}\0${title}`).digest('base64url').slice(0, 22);

// ---- tools -----------------------------------------------------------------------------------
const listInput = z.object({ workspaceUri: z.string() });
const deleteInput = z.object({ workspaceUri: z.string(), title: z.string() });
const choiceSchema = z.object({ note_id: z.string(), confirm: z.boolean() });

function deleteForm(title, name, ids) {
    return inputRequired.elicit({
        message: `Delete a note titled "${title}" from ${name}? Pick which one.`,
        requestedSchema: {
            type: 'object',
            properties: {
                note_id: { type: 'string', title: 'Note', oneOf: ids.map(id => ({ const: id, title: `${id} (${title})` })) },
                confirm: { type: 'boolean', title: 'Delete it' }
            },
            required: ['note_id', 'confirm']
        }
    });
}

function buildServer() {
    const server = new McpServer(
        { name: 'notes-peer-ts', version: '1.0.0' },
        { capabilities: { tools: {} }, requestState: { verify: stateCodec.verify } }
    );

    server.registerTool(
        'notes_list',
        { description: 'List the notes of a workspace', inputSchema: listInput, annotations: { readOnlyHint: true } },
        async ({ workspaceUri }, ctx) => {
            const found = workspaceFor(workspaceUri, ctx.http?.authInfo?.clientId);
            if (!found) return text(`No workspace ${workspaceUri}.`, true);
            const lines = [];
            for (const [id, title] of found.workspace.notes) lines.push(`${id}: ${title}`);
            return text(lines.join('\n'));
        }
    );

    server.registerTool(
        'notes_delete',
        { description: 'Delete a note by title, after the user picks and confirms it', inputSchema: deleteInput, annotations: { destructiveHint: true } },
        async ({ workspaceUri, title }, ctx) => {
            const found = workspaceFor(workspaceUri, ctx.http?.authInfo?.clientId);
            if (!found) return text(`No workspace ${workspaceUri}.`, true);
            const { name, workspace } = found;
            const digest = argsDigest(workspaceUri, title);
            // The payload `verify` decoded (integrity, expiry and binding already checked by the seam).
            const state = ctx.mcpReq.requestState();

            if (state === undefined) {
                const ids = workspace.byTitle.get(title);
                if (!ids?.length) return text(`No note titled "${title}" in ${name}; nothing was deleted.`, true);
                const offered = ids.slice();
                return inputRequired({
                    inputRequests: { delete_choice: deleteForm(title, name, offered) },
                    requestState: await stateCodec.mint({ a: digest, ids: offered }, ctx)
                });
            }
            // (McpServer turns anything a tool handler throws into an isError result, so say it plainly.)
            if (state.a !== digest || !Array.isArray(state.ids)) {
                return text('This requestState was issued for other arguments; nothing was deleted.', true);
            }

            const view = inputResponse(ctx.mcpReq.inputResponses, 'delete_choice');
            if (view.kind === 'elicit' && view.action !== 'accept') {
                return text(`Nothing was deleted (${view.action}).`);
            }
            const choice = acceptedContent(ctx.mcpReq.inputResponses, 'delete_choice', choiceSchema);
            if (choice === undefined) {
                // No (valid) answer: ask again, as the spec recommends.
                return inputRequired({
                    inputRequests: { delete_choice: deleteForm(title, name, state.ids) },
                    requestState: await stateCodec.mint({ a: digest, ids: state.ids }, ctx)
                });
            }
            if (choice.confirm !== true) return text('Nothing was deleted (not confirmed).');
            if (!state.ids.includes(choice.note_id)) {
                return text(`${choice.note_id} was not offered; nothing was deleted.`, true);
            }
            if (workspace.notes.get(choice.note_id) !== title) {
                return text(`${choice.note_id} is already gone; nothing was deleted.`, true);
            }
            workspace.notes.delete(choice.note_id);
            const ids = workspace.byTitle.get(title);
            ids.splice(ids.indexOf(choice.note_id), 1);
            if (ids.length === 0) workspace.byTitle.delete(title);
            return text(`Deleted ${choice.note_id} (${title}) from ${name}.`);
        }
    );

    return server;
}

// ---- HTTP ------------------------------------------------------------------------------------
const handler = createMcpHandler(buildServer, { responseMode: 'json' });
const nodeHandler = toNodeHandler(handler);
const validateHost = localhostHostValidation();
const validateOrigin = localhostOriginValidation();

async function sendWebResponse(res, response) {
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(await response.text());
}

const httpServer = createServer(async (req, res) => {
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    if (req.url !== '/mcp') {
        res.writeHead(404).end();
        return;
    }
    try {
        req.auth = await verifyBearerToken(req.headers.authorization, { verifier });
    } catch (error) {
        await sendWebResponse(res, bearerAuthChallengeResponse(error));
        return;
    }
    await nodeHandler(req, res);
});

const [host, port] = [flags.addr.slice(0, flags.addr.lastIndexOf(':')), Number(flags.addr.slice(flags.addr.lastIndexOf(':') + 1))];
httpServer.listen(port, host.replace(/^\[|\]$/g, ''));

function shutdown() {
    httpServer.close();
    httpServer.closeAllConnections();
    setTimeout(() => process.exit(0), 1000).unref();
    handler.close().finally(() => process.exit(0));
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
