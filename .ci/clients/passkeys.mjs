// Four eyes with a passkey, in real Chromium: alice asks to shred a note of the shared "team"
// workspace (notes_shred: approved by anyone but the caller, with a passkey); bob approves it on
// the server's page with a passkey he registered, made by Chromium's virtual authenticator
// (DevTools' WebAuthn domain: ctap2, internal, user verification); alice's retry deletes exactly
// the note bob chose, once.
//
//   1 register   bob signs in on /passkeys and registers a passkey (navigator.credentials.create
//                against the virtual authenticator); the page lists it.
//   2 ask        alice (plain JSON-RPC) creates two notes titled "Standup" in team and calls
//                notes_shred: input_required with a URL-mode elicitation; the signed webhook the
//                server sends for it is verified (HMAC-SHA256 over id.timestamp.body with the
//                secret from its file, a fresh timestamp) and carries the page's URL; a forged
//                signature fails the same check. Her retry before anyone decided is input_required
//                again ("0 of 1 approvals") and deletes nothing.
//   3 not alice  alice, signed in on the page, sees only its progress: no Approve button; a POST
//                she makes with the page's form fields is refused (403, "Not yours to approve").
//   4 approve    bob finds it in /inbox, opens it, picks the second "Standup", approves, and
//                confirms with his passkey (navigator.credentials.get; the challenge binds the
//                approval, the arguments and the note's version): "Approved".
//   5 retry      alice's retry deletes exactly that note; the same retry again is refused and
//                nothing else changes.
//   6 removed    bob removes his passkey on /passkeys; a new shred approval asks him for a
//                passkey he no longer has ("Passkey required") and stays undecided.
//
// Environment: MCP_URL (at the public origin, e.g. http://localhost:PORT/mcp), DATA_DIR (the
// server's --data-dir), WEBHOOK_PORT and WEBHOOK_SECRET_FILE (the server's --webhook-url and
// --webhook-secret-file), CHROMIUM, PLAYWRIGHT_FROM, OUT. Prints one line per step; on anything
// unexpected prints the step, the page's text, the last MCP exchange, saves
// OUT/passkeys-failure.png and exits 1.
import { createRequire } from "node:module";
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const mcpUrl = env("MCP_URL");
const dataDir = env("DATA_DIR");
const out = env("OUT");
const webhookPort = Number(env("WEBHOOK_PORT"));
const secretFile = env("WEBHOOK_SECRET_FILE");
const { chromium } = createRequire(join(env("PLAYWRIGHT_FROM"), "package.json"))("playwright-core");

const origin = new URL(mcpUrl).origin;
const workspaceUri = `file://${dataDir}/team`;
const TOOL = "notes_shred";
const INPUT_KEY = "shred_approval";
const STEP_TIMEOUT = 15_000;

const started = Date.now();
let step = "launch Chromium";
let stepStarted = Date.now();
let browser;
let current;
let currentStatus = null;
let lastExchange = "(none yet)";
let nextId = 1;

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
  console.log(`[passkeys] ${step}: ${detail} (${seconds(Date.now() - stepStarted)})`);
}
async function fail(error) {
  console.error(`\nFAILED at step "${step}" after ${seconds(Date.now() - started)}: ${
    error instanceof Failure ? error.message : error?.stack ?? error}`);
  if (current) {
    console.error(`--- page ${current.url()} (HTTP ${currentStatus ?? "?"}) ---`);
    try {
      console.error(await current.locator("body").innerText({ timeout: 3000 }));
      await current.screenshot({ path: join(out, "passkeys-failure.png"), fullPage: true, timeout: 5000 });
      console.error(`screenshot: ${join(out, "passkeys-failure.png")}`);
    } catch (e) {
      console.error(`(no page text or screenshot: ${e.message})`);
    }
  }
  console.error(`--- last MCP exchange ---\n${lastExchange}\n---`);
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}

// ---- the webhook receiver: verifies as the SECURITY.md says a receiver must ----

const deliveries = [];
let waiter = null;
const receiver = createServer((request, response) => {
  const chunks = [];
  request.on("data", (c) => chunks.push(c));
  request.on("end", () => {
    deliveries.push({ headers: request.headers, body: Buffer.concat(chunks) });
    response.writeHead(204).end();
    if (waiter) waiter();
  });
});
await new Promise((resolve) => receiver.listen(webhookPort, "127.0.0.1", resolve));

/// The next delivery (waits for it).
async function nextDelivery(seen) {
  const deadline = Date.now() + STEP_TIMEOUT;
  while (deliveries.length <= seen) {
    check(Date.now() < deadline, `no webhook delivery within ${STEP_TIMEOUT} ms`);
    await new Promise((resolve) => {
      waiter = resolve;
      setTimeout(resolve, 200);
    });
  }
  return deliveries[seen];
}

/// Standard Webhooks verification: `v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>`, compared
/// in constant time, the timestamp within five minutes of now.
function verifyWebhook({ headers, body }, secretText) {
  const id = headers["webhook-id"];
  const timestamp = headers["webhook-timestamp"];
  const signatures = headers["webhook-signature"];
  if (!id || !timestamp || !signatures || !/^\d{1,12}$/.test(timestamp)) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > 300) return false;
  const secret = Buffer.from(secretText.trim().replace(/^whsec_/, ""), "base64");
  const expected = createHmac("sha256", secret).update(`${id}.${timestamp}.`).update(body).digest();
  return signatures.split(" ").some((entry) => {
    const [version, value] = entry.split(",", 2);
    if (version !== "v1" || !value) return false;
    const given = Buffer.from(value, "base64");
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}

// ---- the MCP side: plain JSON-RPC over HTTP POST, stateless 2026-07-28, as alice ----

async function toolCall(name, args, extra = {}) {
  const id = nextId++;
  const params = {
    _meta: {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientCapabilities": { elicitation: { url: {} } },
    },
    name,
    arguments: args,
    ...extra,
  };
  const request = { jsonrpc: "2.0", id, method: "tools/call", params };
  const response = await fetch(mcpUrl, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": "2026-07-28",
      "Mcp-Method": "tools/call",
      "Mcp-Name": name,
      Authorization: "Bearer alice-token",
    },
    body: JSON.stringify(request),
    signal: AbortSignal.timeout(STEP_TIMEOUT),
  });
  const text = await response.text();
  lastExchange = `POST ${mcpUrl}\n→ ${JSON.stringify(request)}\n← HTTP ${response.status}\n${text}`;
  check(response.status === 200, `tools/call answered HTTP ${response.status}`);
  let message;
  try {
    message = JSON.parse(text);
  } catch {}
  check(message?.id === id, `no JSON-RPC answer with id ${id}`);
  return message;
}
const shredArgs = { workspaceUri, title: "Standup" };
async function shred(retry) {
  const extra = retry
    ? { requestState: retry.state, inputResponses: { [INPUT_KEY]: { action: "accept" } } }
    : {};
  const message = await toolCall(TOOL, shredArgs, extra);
  check(!message.error, () => `JSON-RPC error ${JSON.stringify(message.error)}`);
  return message.result;
}
function elicitation(result) {
  check(result?.resultType === "input_required", () => `not input_required: ${JSON.stringify(result)}`);
  const p = result.inputRequests?.[INPUT_KEY]?.params ?? {};
  check(p.mode === "url" && new URL(p.url).origin === origin && /^\/confirm\/[0-9a-f]{32}$/.test(new URL(p.url).pathname),
    () => `no URL-mode elicitation to ${origin}/confirm/<id>: ${JSON.stringify(result)}`);
  return { url: p.url, state: result.requestState, message: p.message ?? "" };
}
const text = (result) => (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

function notesOnDisk() {
  const files = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else files.push(relative(dataDir, path));
    }
  };
  walk(dataDir);
  return files.sort();
}
function expectNotes(expected, what) {
  const now = notesOnDisk();
  check(JSON.stringify(now) === JSON.stringify(expected),
    () => `${what}: on disk ${JSON.stringify(now)}, expected ${JSON.stringify(expected)}`);
}

// ---- the browser side ----

async function visit(page, url) {
  current = page;
  const response = await page.goto(url, { waitUntil: "load" });
  currentStatus = response?.status() ?? null;
  return currentStatus;
}
async function signIn(page, url, token) {
  check(currentStatus === 401, `${url} answered ${currentStatus} before signing in, not 401`);
  await Promise.all([page.waitForURL(/\/signin/), page.getByRole("link", { name: "Sign in", exact: true }).click()]);
  await page.locator("#token").fill(token);
  const [back] = await Promise.all([
    page.waitForResponse((r) => r.url() === url && r.request().method() === "GET"),
    page.locator("#signin").click(),
  ]);
  await page.waitForLoadState("load");
  currentStatus = back.status();
  check(currentStatus === 200 && page.url() === url, `after signing in: ${page.url()} (HTTP ${currentStatus})`);
}
/// Clicks `button` and waits for the page's POST to `url` and the page it answers.
async function post(page, url, button) {
  // The passkey buttons post from a script once the authenticator answered: wait for the
  // navigation that POST causes to load, not only for its response.
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url() === url && r.request().method() === "POST"),
    page.waitForNavigation({ waitUntil: "load" }),
    page.locator(button).click(),
  ]);
  currentStatus = response.status();
  return response;
}
const h1 = async (page) => (await page.locator("h1").innerText()).trim();

try {
  browser = await chromium.launch({
    executablePath: env("CHROMIUM"),
    headless: true,
    args: ["--disable-dev-shm-usage"],
  });
  const newContext = async () => {
    const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
    context.setDefaultTimeout(STEP_TIMEOUT);
    await context.route((url) => url.origin !== origin, (route) => route.abort());
    return context;
  };
  done(`Chromium ${browser.version()}`);

  // ---- 1 register ----
  begin("1 register: bob's virtual authenticator");
  const bob = await newContext();
  const bobPage = await bob.newPage();
  const cdp = await bob.newCDPSession(bobPage);
  await cdp.send("WebAuthn.enable");
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  done(`authenticator ${authenticatorId} (ctap2, internal, user verification)`);

  begin("1 register: sign in on /passkeys and register");
  const passkeysUrl = `${origin}/passkeys`;
  await visit(bobPage, passkeysUrl);
  await signIn(bobPage, passkeysUrl, "bob-token");
  check(await bobPage.locator("#none").count() === 1, "bob's /passkeys page does not say he has none");
  await bobPage.locator("#name").fill("bob's laptop");
  await post(bobPage, passkeysUrl, "#passkey");
  check(currentStatus === 200, `registering answered HTTP ${currentStatus}`);
  const listed = await bobPage.locator("#passkeys li").allInnerTexts();
  check(listed.length === 1 && listed[0].includes("bob's laptop"), () => `the page lists ${JSON.stringify(listed)}`);
  const { credentials } = await cdp.send("WebAuthn.getCredentials", { authenticatorId });
  check(credentials.length === 1, `the authenticator holds ${credentials.length} credentials`);
  done(`registered "${listed[0].replace(/\s*Remove$/, "")}"; the authenticator holds 1 credential`);

  // ---- 2 ask ----
  begin("2 ask: two notes titled Standup, then notes_shred");
  const created = [];
  for (const body of ["first", "second"]) {
    const message = await toolCall("notes_create", { workspaceUri, title: "Standup", body });
    const line = text(message.result ?? {});
    const match = /^Created (note-\d+)\.$/.exec(line);
    check(match, () => `notes_create answered ${JSON.stringify(message)}`);
    created.push(match[1]);
  }
  const before = notesOnDisk();
  const first = elicitation(await shred());
  done(`created ${created.join(", ")}; input_required, ${first.url}`);

  begin("2 ask: the signed webhook");
  const delivery = await nextDelivery(0);
  const secret = readFileSync(secretFile, "utf8");
  check(verifyWebhook(delivery, secret), () => `the webhook does not verify: ${JSON.stringify(delivery.headers)}`);
  const event = JSON.parse(delivery.body.toString("utf8"));
  check(event.type === "approval.requested" && event.data?.url === first.url && event.data?.tool === TOOL
    && event.data?.requested_by === "alice" && event.data?.passkey === true,
    () => `the webhook's event is ${delivery.body}`);
  const forged = { headers: { ...delivery.headers }, body: Buffer.from(delivery.body.toString().replace("alice", "mallory")) };
  check(!verifyWebhook(forged, secret), "a body changed after signing still verifies");
  const wrongKey = Buffer.alloc(32, 7).toString("base64");
  check(!verifyWebhook(delivery, wrongKey), "the webhook verifies under another secret");
  done(`webhook-id ${delivery.headers["webhook-id"]} verified; a forged body and another secret fail`);

  begin("2 ask: alice's retry before anyone decided");
  const pending = elicitation(await shred(first));
  check(pending.url === first.url, `the pending retry points to ${pending.url}, not ${first.url}`);
  expectNotes(before, "after the pending retry");
  check(/0 of 1/.test(pending.message), `the pending message does not say how far it got: ${pending.message}`);
  done(`input_required again, same page: "${pending.message}"`);

  // ---- 3 not alice ----
  begin("3 not alice: alice on her own request's page");
  const alice = await newContext();
  const alicePage = await alice.newPage();
  await visit(alicePage, first.url);
  await signIn(alicePage, first.url, "alice-token");
  check(await alicePage.locator("#approve").count() === 0, "alice is offered an Approve button on her own four-eyes request");
  const forgedPost = await alicePage.request.post(first.url, {
    form: { decision: "approve", choice: created[1] },
    headers: { Origin: origin },
    failOnStatusCode: false,
  });
  check(forgedPost.status() === 403 || forgedPost.status() === 400,
    `alice's own approval POST answered ${forgedPost.status()}`);
  expectNotes(before, "after alice's own approval attempt");
  done(`"${await h1(alicePage)}", no Approve button; her POST answered ${forgedPost.status()}`);

  // ---- 4 approve ----
  begin("4 approve: bob's inbox");
  await visit(bobPage, `${origin}/inbox`);
  check(currentStatus === 200, `/inbox answered ${currentStatus}`);
  const id = new URL(first.url).pathname.split("/").pop();
  const entry = bobPage.locator(`#approval-${id}`);
  check(await entry.count() === 1, `bob's inbox does not list ${id}`);
  const inboxLine = (await bobPage.locator("#inbox li").first().innerText()).trim();
  await Promise.all([bobPage.waitForURL(first.url), entry.click()]);
  await bobPage.waitForLoadState("load");
  done(`"${inboxLine}"`);

  begin("4 approve: pick the second Standup, approve, passkey");
  const radios = bobPage.locator("input[type=radio][name=choice]");
  const values = await radios.evaluateAll((els) => els.map((e) => e.value).sort());
  check(JSON.stringify(values) === JSON.stringify([...created].sort()), `the candidates are ${JSON.stringify(values)}`);
  await bobPage.locator(`input[name=choice][value="${created[1]}"]`).check();
  await post(bobPage, first.url, "#approve");
  const step = await h1(bobPage);
  check(currentStatus === 200 && step === "Confirm with your passkey", `approving answered ${currentStatus}: ${step}`);
  await post(bobPage, first.url, "#passkey");
  const decided = await bobPage.locator("body").innerText();
  check(currentStatus === 200 && decided.includes("Approved"), `the passkey POST answered ${currentStatus}: ${decided}`);
  expectNotes(before, "after bob approved (nothing runs before the retry)");
  done(`${created[1]} approved with the passkey`);

  // ---- 5 retry ----
  begin("5 retry: alice's retry runs");
  const ran = await shred(first);
  check(ran.resultType !== "input_required" && !ran.isError && text(ran) === `Deleted ${created[1]} (Standup) from team.`,
    () => `the retry answered ${JSON.stringify(ran)}`);
  const after = before.filter((f) => f !== `team/${created[1]}.md`);
  check(after.length === before.length - 1, `team/${created[1]}.md was not on disk`);
  expectNotes(after, "after the retry");
  done(text(ran));

  begin("5 retry: the same retry again");
  const again = await toolCall(TOOL, shredArgs, {
    requestState: first.state,
    inputResponses: { [INPUT_KEY]: { action: "accept" } },
  });
  check(again.error || again.result?.isError || again.result?.resultType === "input_required",
    () => `the replayed retry answered ${JSON.stringify(again)}`);
  expectNotes(after, "after the replayed retry");
  done(`refused: ${JSON.stringify(again.error ?? again.result?.resultType ?? text(again.result)).slice(0, 100)}`);

  // ---- 6 removed ----
  begin("6 removed: bob removes his passkey; the next approval needs one");
  await visit(bobPage, passkeysUrl);
  await post(bobPage, passkeysUrl, "#passkeys li button");
  check(await bobPage.locator("#none").count() === 1, "the passkey is still listed after removing it");
  const second = elicitation(await shred());
  await visit(bobPage, second.url);
  await bobPage.locator(`input[name=choice][value="${created[0]}"]`).check();
  await post(bobPage, second.url, "#approve");
  const refused = await h1(bobPage);
  check(currentStatus === 403 && refused === "Passkey required", `approving without a passkey answered ${currentStatus}: ${refused}`);
  const still = elicitation(await shred(second));
  check(still.url === second.url, "the approval is no longer pending");
  expectNotes(after, "after the refused approval");
  done(`${currentStatus} "${refused}"; the retry is still pending`);

  await browser.close();
  receiver.close();
  console.log(`[passkeys] all steps passed in ${seconds(Date.now() - started)}`);
} catch (error) {
  await fail(error);
}
