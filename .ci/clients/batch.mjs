// One decision over five parallel calls, the way an agent and a person produce it: the official
// TypeScript MCP client (@modelcontextprotocol/client) creates five notes, then calls
// notes_discard for each of them at once (five tools/call in flight, each answered input_required
// with its own approval URL); headless Chromium (playwright-core, the system Chromium) opens one
// of the URLs, signs alice in, finds all five calls listed together, checks each row, and
// approves all in one click; only then does the client's URL-elicitation handler answer accept,
// the SDK retries each call with its state, and each call deletes exactly its note.
//
//   1 create      notes_create of "Stale 1" … "Stale 5" in personal.
//   2 ask         five notes_discard at once; five URL elicitations, five distinct approval ids.
//   3 page        alice signs in on one URL: "Approve 5 requests?", one row per call with its
//                 title in the arguments; screenshot (batch-page.png).
//   4 approve     "Approve all": "5 of 5 approved"; nothing deleted yet.
//   5 run         the handlers answer accept; each call's result names its own note; the five
//                 notes are gone, no other note is.
//   6 again       the same page now: already decided (nothing to approve).
//
// Run by .ci/browser.sh after approval.mjs, on the same notes server. Environment: MCP_URL,
// WORKSPACE_URI, CHROMIUM, PLAYWRIGHT_FROM (node_modules with playwright-core), CLIENT_FROM
// (node_modules with @modelcontextprotocol/client), OUT. Exits 1 on anything unexpected, with
// the step, the page's text and batch-failure.png.
import { createRequire } from "node:module";
import { join } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const mcpUrl = env("MCP_URL");
const workspaceUri = env("WORKSPACE_URI");
const out = env("OUT");
const { chromium } = createRequire(join(env("PLAYWRIGHT_FROM"), "package.json"))("playwright-core");
const { Client, StreamableHTTPClientTransport } = createRequire(join(env("CLIENT_FROM"), "package.json"))(
  "@modelcontextprotocol/client",
);

const TITLES = ["Stale 1", "Stale 2", "Stale 3", "Stale 4", "Stale 5"];
const origin = new URL(mcpUrl).origin;
const STEP_TIMEOUT = 20_000;
const started = Date.now();
let step = "connect";
let stepStarted = Date.now();
let browser;
let page;

class Failure extends Error {}
function check(ok, message) {
  if (!ok) throw new Failure(typeof message === "function" ? message() : message);
}
const seconds = (ms) => `${(ms / 1000).toFixed(2)}s`;
function begin(name) {
  step = name;
  stepStarted = Date.now();
}
function done(detail) {
  console.log(`[batch] ${step}: ${detail} (${seconds(Date.now() - stepStarted)})`);
}
function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failure(`${what} took over ${STEP_TIMEOUT / 1000}s`)), STEP_TIMEOUT);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function fail(error) {
  console.error(`\nFAILED at step "${step}" after ${seconds(Date.now() - started)}: ${
    error instanceof Failure ? error.message : error?.stack ?? error}`);
  if (page) {
    try {
      console.error(`--- page ${page.url()} ---\n${await page.locator("body").innerText({ timeout: 3000 })}\n---`);
      await page.screenshot({ path: join(out, "batch-failure.png"), fullPage: true, timeout: 5000 });
      console.error(`screenshot: ${join(out, "batch-failure.png")}`);
    } catch (e) {
      console.error(`(no page: ${e.message})`);
    }
  }
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}

// The URL elicitations the five calls get, and the one decision every handler waits for.
const asked = [];
let allAsked;
const fiveAsked = new Promise((resolve) => (allAsked = resolve));
let decide;
const decided = new Promise((resolve) => (decide = resolve));

const client = new Client(
  { name: "ts-batch-client", version: "1.0.0" },
  {
    capabilities: { elicitation: { url: {} } },
    versionNegotiation: { mode: { pin: "2026-07-28" } },
    inputRequired: { autoFulfill: true, maxRounds: 3 },
  },
);
client.setRequestHandler("elicitation/create", async (request) => {
  const p = request.params;
  check(p.mode === "url", `an elicitation of mode ${JSON.stringify(p.mode)}, not url`);
  asked.push(p);
  if (asked.length === TITLES.length) allAsked();
  // The person decides on the page; the client goes on once they did ("I went to the page").
  await decided;
  return { action: "accept" };
});

async function callTool(name, args) {
  const result = await client.callTool({ name, arguments: args });
  const text = (result.content ?? []).map((c) => c.text ?? "").join("\n");
  return { isError: result.isError ?? false, text };
}

async function notesListed() {
  const { text } = await callTool("notes_list", { workspaceUri });
  return text;
}

async function signIn(approvalUrl) {
  const response = await page.goto(approvalUrl, { waitUntil: "load" });
  check(response?.status() === 401, `the approval page answered ${response?.status()} before signing in, not 401`);
  const link = page.getByRole("link", { name: "Sign in", exact: true });
  check((await link.count()) === 1, 'the 401 page has no "Sign in" link');
  await Promise.all([page.waitForURL((u) => u.pathname === "/signin"), link.click()]);
  await page.locator("#token").fill("alice-token");
  const [back] = await Promise.all([
    page.waitForResponse((r) => r.url() === approvalUrl && r.request().method() === "GET"),
    page.locator("#signin").click(),
  ]);
  await page.waitForLoadState("load");
  check(back.status() === 200, `after signing in the approval page answered ${back.status()}`);
}

try {
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
    requestInit: { headers: { Authorization: "Bearer alice-token" } },
  });
  await within(client.connect(transport), "connecting");

  begin("1 create");
  for (const title of TITLES) {
    const created = await within(callTool("notes_create", { workspaceUri, title, body: "Old." }), "notes_create");
    check(!created.isError, `notes_create ${title}: ${created.text}`);
  }
  const before = await notesListed();
  for (const title of TITLES) check(before.includes(`: ${title}`), `${title} is not listed: ${before}`);
  done(`${TITLES.length} notes`);

  begin("2 ask");
  const calls = TITLES.map((title) => callTool("notes_discard", { workspaceUri, title }));
  await within(fiveAsked, "five approval questions");
  const ids = asked.map((p) => new URL(p.url).pathname.split("/").pop());
  check(new Set(ids).size === TITLES.length, `the approval ids are not distinct: ${ids}`);
  for (const p of asked) {
    check(new URL(p.url).origin === origin && /^\/confirm\/[0-9a-f]{32}$/.test(new URL(p.url).pathname),
      `an approval URL ${p.url}`);
  }
  done(`${asked.length} URL elicitations in flight`);

  begin("3 page");
  browser = await chromium.launch({ executablePath: env("CHROMIUM"), args: ["--no-sandbox"] });
  page = await (await browser.newContext()).newPage();
  page.setDefaultTimeout(STEP_TIMEOUT);
  await signIn(asked[2].url);
  const h1 = (await page.locator("h1").innerText()).trim();
  check(h1 === `Approve ${TITLES.length} requests?`, `the page's heading is ${JSON.stringify(h1)}`);
  const rows = page.locator("#batch tbody tr");
  check((await rows.count()) === TITLES.length, `the list has ${await rows.count()} rows`);
  const shown = await rows.allInnerTexts();
  for (const title of TITLES) {
    check(shown.filter((r) => r.includes(`"${title}"`) && r.includes("notes_discard")).length === 1,
      () => `no single row for ${title}: ${JSON.stringify(shown)}`);
  }
  for (const id of ids) check((await page.locator(`#member-${id}`).count()) === 1, `no row for approval ${id}`);
  await page.screenshot({ path: join(out, "batch-page.png"), fullPage: true });
  check((await notesListed()).includes(": Stale 1"), "a note went before anything was approved");
  done(`${TITLES.length} rows, one per call`);

  begin("4 approve");
  const [decision] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST"),
    page.locator("#approve-all").click(),
  ]);
  await page.waitForLoadState("load");
  check(decision.status() === 200, `the decision answered ${decision.status()}`);
  const body = await page.locator("body").innerText();
  check(body.includes(`${TITLES.length} of ${TITLES.length} approved`), `the page says: ${body}`);
  const still = await notesListed();
  check(TITLES.every((t) => still.includes(`: ${t}`)), `a note went before its call was retried: ${still}`);
  done("one decision, nothing run yet");

  begin("5 run");
  decide();
  const results = await within(Promise.all(calls), "the five retries");
  TITLES.forEach((title, i) => {
    check(!results[i].isError && /^Deleted note-\d+ \(/.test(results[i].text) && results[i].text.includes(`(${title})`),
      () => `the call for ${title} answered: ${JSON.stringify(results[i])}`);
  });
  const after = await notesListed();
  for (const title of TITLES) check(!after.includes(`: ${title}`), `${title} is still listed: ${after}`);
  check(after.includes(": Holiday ideas"), `another note went: ${after}`);
  done(`${results.length} calls ran, each its own note`);

  begin("6 again");
  const again = await page.goto(asked[2].url, { waitUntil: "load" });
  const text = await page.locator("body").innerText();
  check(again?.status() === 200 && /already (decided|answered)/i.test(text) && !(await page.locator("#approve-all").count()),
    `the decided page shows: HTTP ${again?.status()} ${text}`);
  done("nothing left to decide");

  await browser.close();
  await client.close();
  console.log(`[batch] passed in ${seconds(Date.now() - started)}`);
  process.exit(0);
} catch (error) {
  await fail(error);
}
