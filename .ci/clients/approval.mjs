// Approval in the browser, the way a person does it: headless Chromium (playwright-core, the system
// Chromium) on the notes server's approval page, and a plain JSON-RPC client (Node's fetch) for the
// MCP side. notes_destroy on the personal workspace's "Groceries" answers input_required with a
// URL-mode elicitation; the person opens the URL, signs in through the page's own link, decides.
//
//   1 approve     alice signs in, sees the candidates, chooses and types note-7, approves; the
//                 client's retry deletes exactly personal/note-7.md.
//   2 other user  bob, signed in, opens a fresh request of alice's: 403 "Not yours", no note shown;
//                 alice's retry is still input_required.
//   3 replay      the approve POST of step 1, captured as the browser sent it, is resent from the
//                 same context (same URL, body, session cookie and Origin): 409, before the client's
//                 retry and after it; nothing else changes.
//   4 decline     alice declines a fresh request in the browser; the retry's result is declined.
//   5 standing    alice confirms notes_delete of "Taxes 2026" through the form, choosing "also
//                 allow notes_delete on workspace personal for the next 10 minutes"; her
//                 /standing page lists it (bob's does not); she revokes it there; her next call
//                 in that workspace is asked again, and nothing more is deleted.
//
// Run by .ci/browser.sh, which starts the notes server and checks the note files on disk at the end
// too. Environment: MCP_URL, WORKSPACE_URI, DATA_DIR (the server's --data-dir), CHROMIUM
// (executable), PLAYWRIGHT_FROM (a directory whose node_modules has playwright-core), OUT (the
// screenshots). Prints one line per step with its time, then the total. On anything unexpected it
// prints the step, the error, the page's status and text, the last MCP exchange, saves
// OUT/approval-failure.png and exits 1.
import { createRequire } from "node:module";
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const mcpUrl = env("MCP_URL");
const workspaceUri = env("WORKSPACE_URI");
const dataDir = env("DATA_DIR");
const out = env("OUT");
const { chromium } = createRequire(join(env("PLAYWRIGHT_FROM"), "package.json"))("playwright-core");

const origin = new URL(mcpUrl).origin;
const TOOL = "notes_destroy";
const INPUT_KEY = "destroy_approval";
const OUTCOME = "io.github.mcp-confirm/outcome";
const CANDIDATES = ["note-3", "note-7", "note-14"];
const DELETED = "Deleted note-7 (Groceries) from personal.";
const SCREENSHOT = join(out, "approval-page.png");
const STEP_TIMEOUT = 15_000;

const started = Date.now();
const timings = [];
let step = "launch Chromium";
let stepStarted = Date.now();
let browser;
let current; // the page whose text and screenshot a failure shows
let currentStatus = null; // the HTTP status of that page's last main-frame response
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
  const took = Date.now() - stepStarted;
  timings.push([step, took]);
  console.log(`[approval] ${step}: ${detail} (${seconds(took)})`);
}

async function fail(error) {
  console.error(`\nFAILED at step "${step}" after ${seconds(Date.now() - started)}: ${
    error instanceof Failure ? error.message : error?.stack ?? error}`);
  if (current) {
    console.error(`--- page ${current.url()} (HTTP ${currentStatus ?? "?"}) ---`);
    try {
      console.error(await current.locator("body").innerText({ timeout: 3000 }));
    } catch (e) {
      console.error(`(no page text: ${e.message})`);
    }
    console.error("---");
    try {
      await current.screenshot({ path: join(out, "approval-failure.png"), fullPage: true, timeout: 5000 });
      console.error(`screenshot: ${join(out, "approval-failure.png")}`);
    } catch (e) {
      console.error(`(no screenshot: ${e.message})`);
    }
  }
  console.error(`--- last MCP exchange ---\n${lastExchange}\n---`);
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}

// ---- the MCP side: plain JSON-RPC over HTTP POST, stateless 2026-07-28 ----

async function destroyCall(retry) {
  const params = {
    _meta: {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientCapabilities": { elicitation: { url: {} } },
    },
    name: TOOL,
    arguments: { workspaceUri, title: "Groceries" },
  };
  if (retry) {
    params.requestState = retry.state;
    params.inputResponses = { [INPUT_KEY]: { action: "accept" } };
  }
  return toolCall(params);
}

/// notes_delete of `title` from a client that shows forms; `retry`: the state and the answer.
async function deleteCall(title, retry) {
  const params = {
    _meta: {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientCapabilities": { elicitation: { form: {} } },
    },
    name: "notes_delete",
    arguments: { workspaceUri, title },
  };
  if (retry) {
    params.requestState = retry.state;
    params.inputResponses = { delete_choice: retry.answer };
  }
  return toolCall(params);
}

/// One tools/call as alice; returns its result.
async function toolCall(params) {
  const id = nextId++;
  const request = { jsonrpc: "2.0", id, method: "tools/call", params };
  const response = await fetch(mcpUrl, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": "2026-07-28",
      "Mcp-Method": "tools/call",
      "Mcp-Name": params.name,
      Authorization: "Bearer alice-token",
    },
    body: JSON.stringify(request),
    signal: AbortSignal.timeout(STEP_TIMEOUT),
  });
  const type = response.headers.get("content-type") ?? "";
  const text = await response.text();
  lastExchange = `POST ${mcpUrl}\n→ ${JSON.stringify(request)}\n← HTTP ${response.status} ${type}\n${text}`;
  check(response.status === 200, `tools/call answered HTTP ${response.status}`);
  let message;
  if (type.startsWith("text/event-stream")) {
    // One SSE event per JSON-RPC message; the answer is the one with our id.
    for (const line of text.split("\n")) {
      if (!line.startsWith("data:")) continue;
      try {
        const parsed = JSON.parse(line.slice(5));
        if (parsed?.id === id) message = parsed;
      } catch {}
    }
  } else {
    try {
      message = JSON.parse(text);
    } catch {}
  }
  check(message?.id === id, `no JSON-RPC answer with id ${id}`);
  check(!message.error, () => `JSON-RPC error ${JSON.stringify(message.error)}`);
  check(message.result && typeof message.result === "object", "the answer has no result");
  return message.result;
}

/// The URL-mode elicitation of an input_required result.
function elicitation(result) {
  check(result.resultType === "input_required", `resultType is ${JSON.stringify(result.resultType)}, not input_required`);
  const ask = result.inputRequests?.[INPUT_KEY];
  check(ask?.method === "elicitation/create", `inputRequests.${INPUT_KEY} is not an elicitation/create`);
  const p = ask.params ?? {};
  check(p.mode === "url", `the elicitation's mode is ${JSON.stringify(p.mode)}, not url`);
  const match = /^\/confirm\/([0-9a-f]{32})$/.exec(new URL(p.url ?? "", origin).pathname);
  check(typeof p.url === "string" && new URL(p.url).origin === origin && match,
    `the approval URL ${JSON.stringify(p.url)} is not ${origin}/confirm/<32 hex>`);
  check(p.elicitationId === match[1], `elicitationId ${JSON.stringify(p.elicitationId)} is not the URL's id`);
  check(typeof p.message === "string" && p.message, "the elicitation has no message");
  check(typeof result.requestState === "string" && result.requestState, "no requestState");
  return { url: p.url, id: p.elicitationId, state: result.requestState, message: p.message };
}

function text(result) {
  return (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

// ---- the notes on disk ----

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
  const gone = expected.filter((f) => !now.includes(f));
  const added = now.filter((f) => !expected.includes(f));
  check(!gone.length && !added.length,
    `${what}: on disk ${gone.length ? `missing [${gone}]` : ""}${added.length ? ` unexpected [${added}]` : ""}`);
}

// ---- the browser side ----

/// Goes to `url` and returns the main-frame response's status.
async function visit(page, url) {
  current = page;
  const response = await page.goto(url, { waitUntil: "load" });
  currentStatus = response?.status() ?? null;
  return currentStatus;
}

/// On an approval page answered 401: follows its "Sign in" link, signs in with `token`, and
/// returns the status of the approval page the sign-in sends the browser back to.
async function signIn(page, approvalUrl, token) {
  const path = new URL(approvalUrl).pathname;
  check(currentStatus === 401, `the approval page answered ${currentStatus} before signing in, not 401`);
  const link = page.getByRole("link", { name: "Sign in", exact: true });
  check(await link.count() === 1, 'the 401 page has no "Sign in" link');
  const href = new URL(await link.getAttribute("href"), approvalUrl);
  check(href.origin === origin && href.pathname === "/signin" && href.searchParams.get("next") === path,
    `the "Sign in" link goes to ${href}, not /signin?next=${path}`);
  const form = await Promise.all([page.waitForResponse((r) => r.url() === href.href), link.click()]);
  currentStatus = form[0].status();
  await page.waitForLoadState("load");
  check(currentStatus === 200 && new URL(page.url()).pathname === "/signin",
    `the sign-in link led to ${page.url()} (HTTP ${currentStatus})`);
  await page.locator("#token").fill(token);
  // The form posts to /signin, which sets the session cookie and answers 303 back to the page.
  const [back] = await Promise.all([
    page.waitForResponse((r) => r.url() === approvalUrl && r.request().method() === "GET"),
    page.locator("#signin").click(),
  ]);
  await page.waitForLoadState("load");
  currentStatus = back.status();
  check(page.url() === approvalUrl, `after signing in the browser is at ${page.url()}, not back on ${approvalUrl}`);
  const cookies = await page.context().cookies(origin);
  const session = cookies.find((c) => c.name === "notes_session");
  check(session?.httpOnly && session.sameSite === "Strict",
    () => `no HttpOnly SameSite=Strict session cookie after signing in: ${JSON.stringify(cookies)}`);
  return currentStatus;
}

/// The open approval page, as alice sees it: checks what it shows; returns the candidates.
async function expectApprovalPage(page, ids) {
  check(currentStatus === 200, `the approval page answered HTTP ${currentStatus}`);
  const h1 = (await page.locator("h1").innerText()).trim();
  check(h1 === `Approve ${TOOL}?`, `the heading is ${JSON.stringify(h1)}`);
  check((await page.locator("#tool").innerText()).trim() === TOOL, "#tool does not name the tool");
  const body = await page.locator("body").innerText();
  check(/Requested by\s+alice\b/.test(body), 'the page does not say "Requested by alice"');
  const expires = (await page.locator("#expires").innerText()).trim();
  // An HTTP date (RFC 9110): unambiguous, in GMT.
  check(/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(expires),
    `the expiry ${JSON.stringify(expires)} is not an HTTP date`);
  const radios = page.locator("input[type=radio][name=choice]");
  const values = await radios.evaluateAll((els) => els.map((e) => e.value));
  check(JSON.stringify(values) === JSON.stringify(ids), `the candidates are ${JSON.stringify(values)}, not ${JSON.stringify(ids)}`);
  const checked = await radios.evaluateAll((els) => els.filter((e) => e.checked).map((e) => e.value));
  check(checked.length === 0, `${checked} is chosen before the person chooses`);
  const labels = [];
  for (const id of ids) {
    const label = (await page.locator("label", { has: page.locator(`input[name=choice][value="${id}"]`) }).innerText()).trim();
    check(label.includes(id) && label.includes("Groceries") && /version \S+/.test(label),
      `the label of ${id} is ${JSON.stringify(label)} (no id, title or version)`);
    labels.push(label);
  }
  check(await page.getByLabel("Type the id of the record to approve").count() === 1 && await page.locator("#typed").isVisible(),
    'no "Type the id of the record to approve" field (#typed)');
  check(await page.locator("#approve").isVisible() && await page.locator("#decline").isVisible(), "no Approve/Decline buttons");
  return { labels, expires };
}

/// Clicks `button` in the decision form; returns the POST's request and response.
async function submit(page, approvalUrl, button) {
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url() === approvalUrl && r.request().method() === "POST"),
    page.locator(button).click(),
  ]);
  await page.waitForLoadState("load");
  currentStatus = response.status();
  return { request: response.request(), response };
}

/// The exchange of a decision POST as the browser made it, for a failure message.
async function exchange({ request, response }) {
  const headers = await request.allHeaders();
  const shown = ["content-type", "origin", "sec-fetch-site", "sec-fetch-mode", "cookie", "host"]
    .filter((h) => h in headers).map((h) => `  ${h}: ${headers[h]}`).join("\n");
  let body = "";
  try {
    body = await response.text();
  } catch (e) {
    body = `(no body: ${e.message})`;
  }
  const answered = Object.entries(await response.allHeaders()).map(([h, v]) => `  ${h}: ${v}`).join("\n");
  return `${request.method()} ${request.url()}\n${shown}\n  body: ${request.postData()}\n` +
    `← HTTP ${response.status()}\n${answered}\n  body: ${body}`;
}

/// What a decision page says, as one line.
async function saying(page) {
  return (await page.locator("body").innerText()).replace(/\s+/g, " ").trim();
}

async function run() {
  browser = await chromium.launch({
    executablePath: env("CHROMIUM"),
    headless: true,
    // playwright-core already passes --no-sandbox (we run as root); /dev/shm may be small.
    args: ["--disable-dev-shm-usage"],
  });
  const newContext = async () => {
    const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
    context.setDefaultTimeout(STEP_TIMEOUT);
    // Nothing outside this machine: any other host is refused at once.
    await context.route((url) => url.origin !== origin, (route) => route.abort());
    return context;
  };
  const before = notesOnDisk();
  check(before.includes("personal/note-7.md"), `no personal/note-7.md to start with: ${before}`);
  const afterDelete = before.filter((f) => f !== "personal/note-7.md");
  console.log(`[approval] notes on disk: ${before.join(" ")}`);

  // ---- 1 approve ----
  begin("1 approve: client call");
  const first = elicitation(await destroyCall());
  done(`input_required, URL-mode elicitation ${first.url}`);

  begin("1 approve: open the URL and sign in as alice");
  const alice = await newContext();
  const page = await alice.newPage();
  await visit(page, first.url);
  const status = await signIn(page, first.url, "alice-token");
  done(`401 "Sign in" → /signin → alice-token → 303 back to the page (HTTP ${status})`);

  begin("1 approve: the page");
  const { labels, expires } = await expectApprovalPage(page, CANDIDATES);
  await page.screenshot({ path: SCREENSHOT });
  done(`${labels.map((l) => JSON.stringify(l)).join(", ")}; Requested by alice; expires ${expires}; screenshot ${SCREENSHOT}`);

  begin("1 approve: choose note-7, type it, Approve");
  await page.locator('input[name=choice][value="note-7"]').check();
  await page.locator("#typed").fill("note-7");
  const approve = await submit(page, first.url, "#approve");
  if (approve.response.status() !== 200) {
    throw new Failure(`Approve answered HTTP ${approve.response.status()}, not 200:\n${await exchange(approve)}`);
  }
  const approved = await saying(page);
  check(/\bApproved\b/.test(approved), `the page after Approve does not say "Approved": ${JSON.stringify(approved)}`);
  const captured = {
    url: approve.request.url(),
    body: approve.request.postData() ?? "",
    headers: await approve.request.allHeaders(),
  };
  const form = new URLSearchParams(captured.body);
  check(form.get("decision") === "approve" && form.get("choice") === "note-7" && form.get("typed") === "note-7" &&
    /^[0-9a-f]{64}$/.test(form.get("csrf") ?? ""), `the approve POST's body is ${JSON.stringify(captured.body)}`);
  expectNotes(before, "approving in the browser (before the retry)");
  done(`POST ${new URL(captured.url).pathname} (Origin ${captured.headers.origin}) → HTTP 200 "${approved}"`);

  // The replay comes before the client's retry, the window in which a second decision would still
  // matter, and once more after it.
  const replay = async () => {
    // The same URL, body, content type and Origin, from the same context: its session cookie
    // must be the one the browser sent.
    const jar = (await alice.cookies(origin)).map((c) => `${c.name}=${c.value}`).sort().join("; ");
    const sent = (captured.headers.cookie ?? "").split(";").map((c) => c.trim()).filter(Boolean).sort().join("; ");
    check(jar === sent && sent, `the context's cookies (${jar}) are not the ones the approve POST carried (${sent})`);
    const response = await alice.request.post(captured.url, {
      headers: { "Content-Type": captured.headers["content-type"], Origin: captured.headers.origin },
      data: captured.body,
      maxRedirects: 0,
      failOnStatusCode: false,
    });
    const html = await response.text();
    const said = html.replace(/<head>[^]*?<\/head>/g, " ").replace(/<[^>]+>/g, " ").replace(/\s+/g, " ").trim();
    check(response.status() === 409,
      `the replayed approve POST (${captured.url}, body ${captured.body}, Origin ${captured.headers.origin}, ` +
      `cookie ${sent}) answered HTTP ${response.status()}, not 409: ${html}`);
    return said;
  };
  begin("3 replay: the captured approve POST again, before the retry");
  const refused = await replay();
  expectNotes(before, "the replayed approve POST");
  done(`HTTP 409 "${refused}"; nothing deleted`);

  begin("1 approve: the client's retry");
  const deleted = await destroyCall({ state: first.state });
  check(deleted.resultType !== "input_required", "the retry after approving is input_required again");
  check(!deleted.isError && text(deleted) === DELETED, `the retry's result is ${JSON.stringify(deleted)}, not "${DELETED}"`);
  expectNotes(afterDelete, "after the approved retry exactly personal/note-7.md must be gone");
  done(`"${text(deleted)}"; on disk exactly personal/note-7.md is gone`);

  begin("3 replay: the captured approve POST again, after the retry");
  const refusedAgain = await replay();
  expectNotes(afterDelete, "the replayed approve POST after the retry");
  done(`HTTP 409 "${refusedAgain}"; nothing else deleted`);

  // ---- 2 another user ----
  begin("2 another user: bob signs in and opens alice's fresh request");
  const second = elicitation(await destroyCall());
  const bob = await newContext();
  const bobPage = await bob.newPage();
  await visit(bobPage, second.url);
  const bobStatus = await signIn(bobPage, second.url, "bob-token");
  check(bobStatus === 403, `alice's approval page answered bob HTTP ${bobStatus}, not 403`);
  const bobH1 = (await bobPage.locator("h1").innerText()).trim();
  check(bobH1 === "Not yours", `bob's page is headed ${JSON.stringify(bobH1)}, not "Not yours"`);
  const bobText = await saying(bobPage);
  const leaked = ["Groceries", "note-3", "note-7", "note-14", "version"].filter((w) => bobText.includes(w));
  check(!leaked.length, `bob's page shows ${leaked}`);
  for (const selector of ["input[name=choice]", "input[name=csrf]", "#typed", "#approve", "#decline"]) {
    check(await bobPage.locator(selector).count() === 0, `bob's page has ${selector}`);
  }
  done(`HTTP 403 "${bobText}"`);

  begin("2 another user: alice's retry");
  const undecided = elicitation(await destroyCall({ state: second.state }));
  check(undecided.url === second.url && undecided.id === second.id,
    `the retry asks ${undecided.url}, not the same approval ${second.url}`);
  expectNotes(afterDelete, "after bob opened alice's request");
  done(`still input_required, same URL; nothing deleted`);
  current = page;

  // ---- 4 decline ----
  begin("4 decline: alice declines a fresh request in the browser");
  const third = elicitation(await destroyCall());
  await visit(page, third.url); // alice is still signed in: the page at once
  await expectApprovalPage(page, CANDIDATES.filter((id) => id !== "note-7"));
  const decline = await submit(page, third.url, "#decline");
  if (decline.response.status() !== 200) {
    throw new Failure(`Decline answered HTTP ${decline.response.status()}, not 200:\n${await exchange(decline)}`);
  }
  const declined = await saying(page);
  check(/\bDeclined\b/.test(declined), `the page after Decline does not say "Declined": ${JSON.stringify(declined)}`);
  expectNotes(afterDelete, "declining in the browser");
  done(`HTTP 200 "${declined}"`);

  begin("4 decline: the client's retry");
  const refusal = await destroyCall({ state: third.state });
  check(refusal.resultType !== "input_required", "the retry after declining is input_required again");
  check(refusal._meta?.[OUTCOME] === "declined",
    `the retry's _meta["${OUTCOME}"] is ${JSON.stringify(refusal._meta?.[OUTCOME])}, not "declined"`);
  expectNotes(afterDelete, "after the declined retry");
  done(`_meta["${OUTCOME}"] = "declined", "${text(refusal)}"; nothing deleted`);

  // ---- 5 standing ----
  begin("5 standing: alice confirms Taxes 2026 with the form, choosing the standing option");
  const asked = await deleteCall("Taxes 2026");
  check(asked.resultType === "input_required", `the first notes_delete is ${asked.resultType}, not input_required`);
  const schema = asked.inputRequests?.delete_choice?.params?.requestedSchema?.properties ?? {};
  const wider = schema.remember?.oneOf?.[1];
  check(wider?.const === "standing" && /^Also allow notes_delete on workspace personal for the next 10 minutes/.test(wider.title),
    `the form's standing option is ${JSON.stringify(schema.remember)}`);
  const granted = await deleteCall("Taxes 2026", {
    state: asked.requestState,
    answer: { action: "accept", content: { note_id: "note-1", confirm: true, remember: "standing" } },
  });
  check(!granted.isError && text(granted) === "Deleted note-1 (Taxes 2026) from personal.",
    `the accepted retry's result is ${JSON.stringify(granted)}`);
  const afterTaxes = afterDelete.filter((f) => f !== "personal/note-1.md");
  expectNotes(afterTaxes, "after the standing grant exactly personal/note-1.md more must be gone");
  done(`"${text(granted)}"; the standing option was "${wider.title}"`);

  begin("5 standing: her /standing page lists it; bob's does not");
  const standingUrl = `${origin}/standing`;
  check(await visit(page, standingUrl) === 200, `alice's /standing answered HTTP ${currentStatus}`);
  const rows = page.locator("#standing tbody tr");
  check(await rows.count() === 1, `alice's page lists ${await rows.count()} standing approvals, not 1`);
  const row = (await rows.first().innerText()).replace(/\s+/g, " ").trim();
  check(row.includes("notes_delete") && row.includes("workspace personal") && row.includes("20 of 20"),
    `the row reads ${JSON.stringify(row)}`);
  check(await visit(bobPage, standingUrl) === 200, `bob's /standing answered HTTP ${currentStatus}`);
  check(await bobPage.locator("#none").count() === 1 && !(await saying(bobPage)).includes("personal"),
    `bob's page shows ${JSON.stringify(await saying(bobPage))}`);
  current = page;
  done(`alice: "${row}"; bob: none`);

  begin("5 standing: alice revokes it on the page");
  const [revoked] = await Promise.all([
    page.waitForResponse((r) => r.url() === standingUrl && r.request().method() === "POST"),
    page.getByRole("button", { name: "Revoke", exact: true }).click(),
  ]);
  await page.waitForLoadState("load");
  currentStatus = revoked.status();
  check(currentStatus === 200, `the revoke POST answered HTTP ${currentStatus}`);
  const after = await saying(page);
  check(after.includes("Revoked one standing approval.") && await page.locator("#none").count() === 1,
    `the page after Revoke says ${JSON.stringify(after)}`);
  done(`HTTP 200 "${after}"`);

  begin("5 standing: her next call in the workspace is asked again");
  const again = await deleteCall("Holiday ideas");
  check(again.resultType === "input_required", `after the revocation notes_delete is ${again.resultType}, not asked`);
  expectNotes(afterTaxes, "after the revocation nothing more may be deleted");
  done("input_required: the form again; nothing deleted");

  await browser.close();
  browser = undefined;
  console.log(`[approval] notes on disk: ${notesOnDisk().join(" ")}`);
  console.log("[approval] timings:");
  for (const [name, took] of timings) console.log(`[approval]   ${seconds(took).padStart(7)}  ${name}`);
  console.log(`[approval]   ${seconds(Date.now() - started).padStart(7)}  total (with Chromium's start)`);
}

const watchdog = setTimeout(() => fail(new Error("the whole drive took over 150 s")), 150_000);
run().then(() => clearTimeout(watchdog), fail);
