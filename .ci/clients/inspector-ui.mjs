// What the MCP Inspector drives share (.ci/clients/inspector.mjs, .ci/clients/gateway-inspector.mjs):
// headless Chromium through playwright-core on the Inspector's web UI, every MCP message the UI
// sends (and, for diagnostics, each it gets back) recorded, and a failure report.
//
//   drive(name, limitMs, async (ui) => { ui.step = "…"; … return summary; })
//
// Environment: CHROMIUM (executable), PLAYWRIGHT_FROM (a directory whose node_modules has
// playwright-core), OUT (screenshots and the traffic log). `ui` carries page, sent (the MCP
// messages the UI sent, in order), log(message), step (set it before each step: a failure names
// it), out, and connect(serverName) / openTool(toolName) for the steps every drive starts with.
// On success prints the summary the body returns as one JSON line; on any step that does not
// behave (or after limitMs), prints the step, the error, the page's text and the last MCP traffic,
// saves OUT/<name>-failure.png and exits 1. OUT/<name>-traffic.log gets the traffic either way.
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const STEP_TIMEOUT = 30_000;

export function drive(name, limitMs, body) {
  const out = env("OUT");
  const { chromium } = createRequire(join(env("PLAYWRIGHT_FROM"), "package.json"))("playwright-core");
  const started = Date.now();
  const traffic = []; // every MCP message the UI sent through the Inspector's backend, and each it got back
  const problems = []; // uncaught page errors and unhandled rejections
  let browser;
  const ui = {
    out,
    step: "launch Chromium",
    page: undefined,
    sent: [],
    log(message) {
      console.log(`[${name} ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);
    },
    // Opens the web UI and connects the server card named serverName (Streamable HTTP, modern era).
    async connect(inspectorUrl, serverName) {
      const page = ui.page;
      ui.step = "open the Inspector";
      await page.goto(inspectorUrl, { waitUntil: "domcontentloaded" });
      const connect = page.getByRole("switch", { name: `Connect or disconnect "${serverName}"` });
      await connect.waitFor();
      ui.log(`web UI loaded, server card "${serverName}" shown`);

      ui.step = `connect to ${serverName} (Streamable HTTP, modern era)`;
      // Mantine draws its track over the real checkbox, so the click goes to the input directly.
      await connect.check({ force: true });
      const connected = page.getByText("Connected", { exact: true });
      await connected.or(page.getByText("Failed", { exact: true })).waitFor();
      if (!(await connected.isVisible())) throw new Error("the server card says the connection failed");
      await page.getByText("MCP 2026-07-28", { exact: true }).waitFor({ timeout: 5000 });
      ui.log("connected; the card shows MCP 2026-07-28");
    },
    // Opens a tool's form in the Tools tab.
    async openTool(toolName) {
      ui.step = `open ${toolName} in the Tools tab`;
      await ui.page.getByText("Tools", { exact: true }).first().click();
      await ui.page.getByText(toolName, { exact: true }).first().click();
    },
    // Closes the Results panel, which stands where the tool's form was, to get the form back.
    async closeResults() {
      await ui.page.getByRole("button", { name: "Close results" }).click();
    },
  };

  async function fail(error) {
    console.error(`\nFAILED at step "${ui.step}": ${error instanceof Error ? error.message : error}`);
    const page = ui.page;
    if (page) {
      try {
        await page.screenshot({ path: join(out, `${name}-failure.png`), fullPage: true });
        console.error(`screenshot: ${join(out, `${name}-failure.png`)}`);
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
    writeFileSync(join(out, `${name}-traffic.log`), traffic.join("\n") + "\n");
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
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    ui.page = page;
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
    page.on("request", (r) => {
      if (!r.url().includes("/api/mcp/send")) return;
      try {
        const { message } = JSON.parse(r.postData() ?? "{}");
        ui.sent.push(message);
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

    const summary = await body(ui);
    if (problems.length) throw new Error(`the page logged errors:\n${problems.join("\n")}`);
    writeFileSync(join(out, `${name}-traffic.log`), traffic.join("\n") + "\n");
    await browser.close();
    console.log(JSON.stringify({ ...summary, seconds: (Date.now() - started) / 1000 }));
  }

  const watchdog = setTimeout(() => fail(new Error(`the whole drive took over ${limitMs / 1000} s`)), limitMs);
  run().then(() => clearTimeout(watchdog), fail);
}
