// Drives the MCP Inspector web UI (the Inspector's own React app, in headless Chromium through
// playwright-core) through notes_delete's form confirmation against the notes server, the way a
// person would: connect, open the tool, fill its arguments, execute, pick the second note in the
// elicitation form, tick the confirmation, choose the standing option, submit, read the result;
// then a call in the same workspace runs with no form, and one in another workspace is asked.
//
// Run by .ci/inspector.sh, which starts both servers and checks the note files on disk afterwards.
// Environment: INSPECTOR_URL (the web UI, with its API token), NOTES_SERVER (the card's name in the
// UI), WORKSPACE_URI, TEAM_URI (another workspace of alice's), CHROMIUM (executable), PLAYWRIGHT_FROM (a directory whose node_modules has
// playwright-core), OUT (screenshots and the traffic log). Prints one JSON line on success; on any
// step that does not behave, prints the step, the error, the page's text and the MCP traffic seen so
// far, saves OUT/inspector-failure.png and exits 1.
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const inspectorUrl = env("INSPECTOR_URL");
const serverName = env("NOTES_SERVER");
const workspaceUri = env("WORKSPACE_URI");
const teamUri = env("TEAM_URI");
const out = env("OUT");
const { chromium } = createRequire(join(env("PLAYWRIGHT_FROM"), "package.json"))("playwright-core");

const STEP_TIMEOUT = 30_000;
const started = Date.now();
const traffic = []; // every MCP message the UI sent through the Inspector's backend, and each it got back
const problems = []; // uncaught page errors and unhandled rejections
let step = "launch Chromium";
let browser;
let page;

function log(message) {
  console.log(`[inspector ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);
}

async function fail(error) {
  console.error(`\nFAILED at step "${step}": ${error instanceof Error ? error.message : error}`);
  if (page) {
    try {
      await page.screenshot({ path: join(out, "inspector-failure.png"), fullPage: true });
      console.error(`screenshot: ${join(out, "inspector-failure.png")}`);
    } catch (e) {
      console.error(`(no screenshot: ${e.message})`);
    }
    try {
      console.error(`--- page text ---\n${await page.locator("body").innerText({ timeout: 5000 })}\n---`);
    } catch (e) {
      console.error(`(no page text: ${e.message})`);
    }
  }
  if (problems.length) console.error(`--- page errors ---\n${problems.join("\n")}`);
  console.error("--- MCP traffic through the Inspector (ui→ sent by the UI, →ui received) ---");
  for (const line of traffic.slice(-12)) console.error(line.length > 3000 ? `${line.slice(0, 3000)}…` : line);
  writeFileSync(join(out, "inspector-traffic.log"), traffic.join("\n") + "\n");
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}

async function run() {
  browser = await chromium.launch({
    executablePath: env("CHROMIUM"),
    headless: true,
    // playwright-core already passes --no-sandbox (we run as root); /dev/shm may be small.
    args: ["--disable-dev-shm-usage"],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(STEP_TIMEOUT);
  // Everything the test needs is on this machine; the page's only outside request (Google Fonts,
  // a render-blocking stylesheet) is refused at once rather than left to a resolver that may hang.
  await page.route((url) => !["127.0.0.1", "localhost"].includes(url.hostname), (route) => route.abort());
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (/^Uncaught\b|Failed to fetch dynamically imported module/.test(m.text())) {
      problems.push(`console: ${m.text()}`);
    }
  });
  // Outgoing MCP messages: the browser-side client posts each one to the backend's /api/mcp/send.
  const sent = [];
  page.on("request", (r) => {
    if (!r.url().includes("/api/mcp/send")) return;
    try {
      const { message } = JSON.parse(r.postData() ?? "{}");
      sent.push(message);
      traffic.push(`ui→ ${JSON.stringify(message)}`);
    } catch {
      traffic.push(`ui→ (unparsed) ${r.postData()}`);
    }
  });
  // Incoming ones arrive on the backend's event stream (a streamed fetch of /api/mcp/events);
  // Chromium streams its bytes to us through the DevTools protocol. Diagnostics only.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  const streams = new Set();
  const decode = (data) => Buffer.from(data ?? "", "base64").toString("utf8");
  let pending = "";
  const received = (text) => {
    // Server-sent events: keep the MCP messages, skip the backend's own fetch records.
    pending += text;
    const lines = pending.split("\n");
    pending = lines.pop();
    for (const line of lines) {
      if (!line.startsWith("data:")) continue;
      try {
        const event = JSON.parse(line.slice(5));
        if (event.type === "message") traffic.push(`→ui ${JSON.stringify(event.data)}`);
      } catch {
        traffic.push(`→ui (unparsed) ${line.slice(5)}`);
      }
    }
  };
  cdp.on("Network.responseReceived", async ({ requestId, response }) => {
    if (!response.url.includes("/api/mcp/events")) return;
    streams.add(requestId);
    try {
      const { bufferedData } = await cdp.send("Network.streamResourceContent", { requestId });
      received(decode(bufferedData));
    } catch (e) {
      traffic.push(`(event stream not observable: ${e.message})`);
    }
  });
  cdp.on("Network.dataReceived", ({ requestId, data }) => {
    if (streams.has(requestId) && data) received(decode(data));
  });

  step = "open the Inspector";
  await page.goto(inspectorUrl, { waitUntil: "domcontentloaded" });
  const connect = page.getByRole("switch", { name: `Connect or disconnect "${serverName}"` });
  await connect.waitFor();
  log(`web UI loaded, server card "${serverName}" shown`);

  step = "connect to the notes server (Streamable HTTP, modern era)";
  // Mantine draws its track over the real checkbox, so the click goes to the input directly.
  await connect.check({ force: true });
  const connected = page.getByText("Connected", { exact: true });
  await connected.or(page.getByText("Failed", { exact: true })).waitFor();
  if (!(await connected.isVisible())) throw new Error("the server card says the connection failed");
  await page.getByText("MCP 2026-07-28", { exact: true }).waitFor({ timeout: 5000 });
  log("connected; the card shows MCP 2026-07-28");

  step = "open notes_delete in the Tools tab";
  await page.getByText("Tools", { exact: true }).first().click();
  await page.getByText("notes_delete", { exact: true }).first().click();
  const title = page.getByRole("textbox", { name: "title", exact: true });
  const workspace = page.getByRole("textbox", { name: "workspaceUri", exact: true });
  await title.waitFor();

  step = "fill the arguments and execute the tool";
  await title.fill("Groceries");
  await workspace.fill(workspaceUri);
  await page.getByRole("button", { name: "Execute Tool" }).click();
  log(`executed notes_delete {title: "Groceries", workspaceUri: "${workspaceUri}"}`);

  step = "the elicitation form appears (input_required, MRTR)";
  const dialog = page.getByRole("dialog", { name: "Elicitation Request" });
  await dialog.waitFor();
  await dialog.getByText("Choose one matching note and confirm deletion", { exact: false }).waitFor();
  // The Inspector labels an input_required result's form with this badge; a legacy
  // elicitation/create request would not carry it.
  await dialog.getByText("input_required", { exact: true }).waitFor();
  const choice = dialog.getByRole("textbox", { name: "Note to delete" });
  const confirm = dialog.getByRole("checkbox", { name: "Yes, delete this note" });
  await choice.waitFor();
  await confirm.waitFor();
  log("form shown: 'Note to delete' (single-select) and 'Yes, delete this note' (checkbox)");

  step = "pick the second note offered";
  await choice.click();
  const options = page.getByRole("listbox").getByRole("option");
  await options.first().waitFor();
  const offered = await options.allInnerTexts();
  const ids = offered.map((text) => text.split(" ")[0]);
  log(`offered: ${JSON.stringify(offered)}`);
  if (JSON.stringify(ids) !== JSON.stringify(["note-3", "note-7", "note-14"])) {
    throw new Error(`expected the notes note-3, note-7, note-14 in that order, the form offers ${JSON.stringify(ids)}`);
  }
  await options.nth(1).click();
  const picked = await choice.inputValue();
  if (!picked.startsWith("note-7 ")) throw new Error(`the select shows ${JSON.stringify(picked)}, not note-7`);

  step = "tick the confirmation";
  const submit = dialog.getByRole("button", { name: "Submit" });
  // The schema's default for confirm is false: the box starts unticked.
  if (await confirm.isChecked()) throw new Error("the confirmation box is ticked before the user ticks it");
  await confirm.check();
  if (!(await submit.isEnabled())) throw new Error("Submit stays disabled with a note picked and the box ticked");

  step = "choose the standing option";
  const howLong = dialog.getByRole("textbox", { name: "How long" });
  await howLong.click();
  const spans = page.getByRole("listbox").getByRole("option");
  await spans.first().waitFor();
  const spanTexts = await spans.allInnerTexts();
  log(`"How long" offers: ${JSON.stringify(spanTexts)}`);
  const wider = spanTexts.findIndex((t) => t.startsWith("Also allow notes_delete on workspace personal for the next 10 minutes"));
  if (spanTexts[0] !== "Only this time" || wider !== 1) {
    throw new Error(`expected "Only this time" then the standing option, the form offers ${JSON.stringify(spanTexts)}`);
  }
  await spans.nth(1).click();
  await page.screenshot({ path: join(out, "inspector-form.png") });
  log(`picked ${JSON.stringify(picked)}, confirmation ticked; screenshot ${join(out, "inspector-form.png")}`);

  step = "submit the form and get the tool's result";
  await submit.click();
  await dialog.waitFor({ state: "hidden" });
  // The Results panel shows whatever the call ended with (a result or an error); then its text
  // must be the deletion of note-7.
  await page.getByText("Results", { exact: true }).waitFor();
  const result = page.getByText(/^Deleted note-7 \(Groceries\) from personal\.$/);
  await result.waitFor({ timeout: 5000 });
  const resultText = await result.innerText();
  await page.screenshot({ path: join(out, "inspector-done.png") });
  log(`result: ${JSON.stringify(resultText)}; screenshot ${join(out, "inspector-done.png")}`);

  step = "the retry carried the answer and the request state (MRTR)";
  const calls = sent.filter((m) => m?.method === "tools/call" && m.params?.name === "notes_delete");
  if (calls.length !== 2) throw new Error(`expected 2 notes_delete tools/call requests, saw ${calls.length}`);
  const [first, retry] = calls.map((m) => m.params);
  if (first.inputResponses || first.requestState) throw new Error("the first call already carries an answer");
  const answer = retry.inputResponses?.delete_choice;
  if (answer?.action !== "accept" || answer.content?.note_id !== "note-7" || answer.content?.confirm !== true
      || answer.content?.remember !== "standing") {
    throw new Error(`the retry's inputResponses are ${JSON.stringify(retry.inputResponses)}`);
  }
  if (typeof retry.requestState !== "string" || !retry.requestState) throw new Error("the retry has no requestState");
  if (retry._meta?.["io.modelcontextprotocol/protocolVersion"] !== "2026-07-28") {
    throw new Error(`the retry's _meta protocol version is ${retry._meta?.["io.modelcontextprotocol/protocolVersion"]}`);
  }
  if (JSON.stringify(retry.arguments) !== JSON.stringify(first.arguments)) {
    throw new Error("the retry's arguments differ from the first call's");
  }
  log(`retry: inputResponses ${JSON.stringify(retry.inputResponses)} with a ${retry.requestState.length}-character requestState`);

  step = "the next call in the same workspace runs under the standing approval, with no form";
  // The Results panel stands where the tool's form was: close it to get the form back.
  const reopen = async () => {
    await page.getByRole("button", { name: "Close results" }).click();
    await title.waitFor();
  };
  await reopen();
  await title.fill("Taxes 2026");
  await workspace.fill(workspaceUri);
  await page.getByRole("button", { name: "Execute Tool" }).click();
  const taxes = page.getByText(/^Deleted note-1 \(Taxes 2026\) from personal\.$/);
  await taxes.waitFor({ timeout: 10_000 });
  if (await dialog.isVisible()) throw new Error("a form was shown for a call the standing approval covers");
  const taxesCalls = sent.filter((m) => m?.method === "tools/call" && m.params?.arguments?.title === "Taxes 2026");
  if (taxesCalls.length !== 1 || taxesCalls[0].params.requestState) {
    throw new Error(`expected one Taxes 2026 call and no retry, saw ${JSON.stringify(taxesCalls)}`);
  }
  log(`under the standing approval: ${JSON.stringify(await taxes.innerText())}, one request, no form`);

  step = "a call in another workspace is asked again";
  await reopen();
  await title.fill("Sprint plan");
  await workspace.fill(teamUri);
  await page.getByRole("button", { name: "Execute Tool" }).click();
  await dialog.waitFor();
  await choice.click();
  await options.first().waitFor();
  const teamOffered = (await options.allInnerTexts()).map((text) => text.split(" ")[0]);
  if (JSON.stringify(teamOffered) !== JSON.stringify(["note-5"])) {
    throw new Error(`expected note-5 in the team form, it offers ${JSON.stringify(teamOffered)}`);
  }
  await options.first().click();
  await confirm.check();
  await page.screenshot({ path: join(out, "inspector-standing.png") });
  await submit.click();
  await dialog.waitFor({ state: "hidden" });
  await page.getByText(/^Deleted note-5 \(Sprint plan\) from team\.$/).waitFor({ timeout: 10_000 });
  log("out of scope: the form was shown again; note-5 deleted once confirmed");
  if (problems.length) throw new Error(`the page logged errors:\n${problems.join("\n")}`);

  writeFileSync(join(out, "inspector-traffic.log"), traffic.join("\n") + "\n");
  await browser.close();
  console.log(JSON.stringify({ chosen: "note-7", result: resultText, seconds: (Date.now() - started) / 1000 }));
}

const watchdog = setTimeout(() => fail(new Error("the whole drive took over 180 s")), 180_000);
run().then(() => clearTimeout(watchdog), fail);
