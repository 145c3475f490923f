// The official TypeScript MCP client (@modelcontextprotocol/client 2.x) calling one tool on a
// 2026-07-28 server, answering each confirmation form with `action`:
//   node mrtr-client.mjs <url> <token> <tool> <argsJSON> accept|decline|cancel [choice-index]
//        [remember] [laterArgsJSON...]
// `remember` answers the form's `remember` field on the first call ("once" or "standing"); each
// later call (same tool, its own arguments) accepts any form it gets with choice 0, "once".
// Prints one JSON line: {"action", "chosen", "isError", "text", "forms", "later": [{"forms",
// "chosen", "isError", "text"}]}. Exit 0 on tool results.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, token, tool, argsJson, action, choiceIndex = '0', remember = 'once', ...later] =
  process.argv.slice(2);
// What the form handler answers for the call in flight, and what it saw.
let answering = { action, choice: Number(choiceIndex), remember };
let seen = { forms: 0, chosen: null };

const client = new Client(
  { name: 'ts-real-client', version: '1.0.0' },
  {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
    inputRequired: { autoFulfill: true, maxRounds: 5 },
  },
);

client.setRequestHandler('elicitation/create', async (request) => {
  seen.forms += 1;
  if (answering.action !== 'accept') return { action: answering.action };
  const properties = request.params.requestedSchema?.properties ?? {};
  const content = {};
  for (const [field, spec] of Object.entries(properties)) {
    const options = spec.oneOf?.map((o) => o.const) ?? spec.enum;
    if (field === 'remember' && options) {
      content[field] = options.includes(answering.remember) ? answering.remember : 'once';
    } else if (options) {
      seen.chosen = options[answering.choice];
      content[field] = seen.chosen;
    } else if (spec.type === 'boolean') {
      content[field] = true;
    }
  }
  return { action: 'accept', content };
});

async function call(args) {
  seen = { forms: 0, chosen: null };
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
  const text = (result.content ?? []).map((c) => c.text ?? '').join('\n');
  return { forms: seen.forms, chosen: seen.chosen, isError: result.isError ?? false, text };
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
try {
  await client.connect(transport);
  const first = await call(argsJson);
  const after = [];
  for (const args of later) {
    answering = { action: 'accept', choice: 0, remember: 'once' };
    after.push(await call(args));
  }
  console.log(JSON.stringify({ action, ...first, later: after }));
  await client.close();
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ action, chosen: seen.chosen, error: String(e) }));
  process.exit(1);
}
