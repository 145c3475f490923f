// The official TypeScript MCP client (@modelcontextprotocol/client 2.x) calling one tool on a
// 2026-07-28 server, answering each confirmation form with `action`:
//   node mrtr-client.mjs <url> <token> <tool> <argsJSON> accept|decline|cancel [choice-index]
// Prints one JSON line: {"action", "chosen", "isError", "text"}. Exit 0 on a tool result.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, token, tool, argsJson, action, choiceIndex = '0'] = process.argv.slice(2);
let chosen = null;

const client = new Client(
  { name: 'ts-real-client', version: '1.0.0' },
  {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
    inputRequired: { autoFulfill: true, maxRounds: 5 },
  },
);

client.setRequestHandler('elicitation/create', async (request) => {
  if (action !== 'accept') return { action };
  const properties = request.params.requestedSchema?.properties ?? {};
  const content = {};
  for (const [field, spec] of Object.entries(properties)) {
    const options = spec.oneOf?.map((o) => o.const) ?? spec.enum;
    if (options) {
      chosen = options[Number(choiceIndex)];
      content[field] = chosen;
    } else if (spec.type === 'boolean') {
      content[field] = true;
    }
  }
  return { action: 'accept', content };
});

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
try {
  await client.connect(transport);
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
  const text = (result.content ?? []).map((c) => c.text ?? '').join('\n');
  console.log(JSON.stringify({ action, chosen, isError: result.isError ?? false, text }));
  await client.close();
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ action, chosen, error: String(e) }));
  process.exit(1);
}
