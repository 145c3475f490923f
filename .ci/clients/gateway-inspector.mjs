// Drives the MCP Inspector web UI through the confirmation gateway (.ci/gateway-inspector.sh):
// notes_delete "Groceries" asks the gateway's yes/no form three times, answered Decline, Cancel,
// then the box ticked and Submit; the upstream's log of deletions is read after each answer.
// Then notes_list, which passes the gateway with no form, shows every note but the deleted one.
//
// Environment: INSPECTOR_URL (the web UI, with its API token), GATEWAY_SERVER (the card's name in
// the UI), WORKSPACE_URI, UPSTREAM_LOG (the upstream's output: a `deleted <id>` line each), and
// CHROMIUM, PLAYWRIGHT_FROM, OUT (.ci/clients/inspector-ui.mjs). Prints one JSON line on success;
// on failure, what .ci/clients/inspector-ui.mjs prints, and OUT/gateway-inspector-failure.png.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { drive, env } from "./inspector-ui.mjs";

const inspectorUrl = env("INSPECTOR_URL");
const serverName = env("GATEWAY_SERVER");
const workspaceUri = env("WORKSPACE_URI");
const upstreamLog = env("UPSTREAM_LOG");
const KEY = "mcp-confirm-gateway/confirmation"; // the gateway's own form's inputRequests key

const deletions = () => readFileSync(upstreamLog, "utf8").split("\n").filter((l) => l.startsWith("deleted "));

drive("gateway-inspector", 120_000, async (ui) => {
  const { page, sent, out } = ui;
  await ui.connect(inspectorUrl, serverName);
  if (deletions().length) throw new Error(`the upstream deleted before any call: ${deletions()}`);

  await ui.openTool("notes_delete");
  const title = page.getByRole("textbox", { name: "title", exact: true });
  const workspace = page.getByRole("textbox", { name: "workspaceUri", exact: true });
  const dialog = page.getByRole("dialog", { name: "Elicitation Request" });
  const deleteCalls = () => sent.filter((m) => m?.method === "tools/call" && m.params?.name === "notes_delete");

  // Executes notes_delete Groceries, waits for the gateway's form; returns its checkbox.
  const ask = async (round) => {
    ui.step = `${round}: execute notes_delete and get the gateway's form`;
    await title.waitFor();
    await title.fill("Groceries");
    await workspace.fill(workspaceUri);
    await page.getByRole("button", { name: "Execute Tool" }).click();
    await dialog.waitFor();
    // The Inspector labels an input_required result's form with this badge (MRTR).
    await dialog.getByText("input_required", { exact: true }).waitFor();
    // One field: the `confirm` box, which names the tool and starts unticked.
    const boxes = dialog.getByRole("checkbox");
    await boxes.first().waitFor();
    if ((await boxes.count()) !== 1) throw new Error(`the form has ${await boxes.count()} checkboxes, not one`);
    const box = boxes.first();
    await dialog.getByRole("checkbox", { name: /notes_delete/ }).waitFor({ timeout: 5000 });
    // The message names the tool and its arguments.
    const message = await dialog.innerText();
    if (!/notes_delete[\s\S]*Groceries[\s\S]*file:\/\/\/notes\/personal/.test(message)) {
      throw new Error(`the form does not name the call: ${JSON.stringify(message)}`);
    }
    if (await box.isChecked()) throw new Error("the confirmation box is ticked before the user ticks it");
    return box;
  };
  // After the form closed: the call's first request and its retry, which answers under KEY.
  const retried = (round, action) => {
    const calls = deleteCalls();
    const [first, retry] = calls.slice(-2).map((m) => m.params);
    if (calls.length !== 2 * round) throw new Error(`expected ${2 * round} notes_delete requests by now, saw ${calls.length}`);
    if (first.inputResponses || first.requestState) throw new Error("the first call already carries an answer");
    const answer = retry.inputResponses?.[KEY];
    if (answer?.action !== action) throw new Error(`the retry's inputResponses are ${JSON.stringify(retry.inputResponses)}`);
    if (typeof retry.requestState !== "string" || !retry.requestState) throw new Error("the retry has no requestState");
    return answer;
  };

  // Declined, then cancelled: the gateway answers the retry itself, and the upstream deletes nothing.
  const outcomes = {};
  for (const [round, action, button, said] of [
    [1, "decline", "Decline", /declined; nothing was changed\.$/],
    [2, "cancel", "Cancel", /cancelled; nothing was changed\.$/],
  ]) {
    await ask(action);
    const form = await dialog.innerText();
    ui.log(`${action}: the gateway's form: ${JSON.stringify(form.split("\n").filter((l) => l).slice(1, 4).join(" | "))}`);
    ui.step = `${action}: answer the form with ${button}`;
    await dialog.getByRole("button", { name: button, exact: true }).click();
    await dialog.waitFor({ state: "hidden" });
    const result = page.getByText(said);
    await result.waitFor({ timeout: 10_000 });
    outcomes[action] = await result.innerText();
    const answer = retried(round, action);
    if (deletions().length) throw new Error(`${action}: the upstream deleted ${deletions()}`);
    ui.log(`${action}: the retry answered ${JSON.stringify({ [KEY]: answer })}; the gateway said ` +
      `${JSON.stringify(outcomes[action])}; the upstream deleted nothing`);
    await ui.closeResults();
  }

  // Accepted: the box ticked, Submit; the retry reaches the upstream, which deletes note-1 once.
  const box = await ask("accept");
  ui.step = "accept: tick the box and submit";
  const submit = dialog.getByRole("button", { name: "Submit" });
  await box.check();
  if (!(await submit.isEnabled())) throw new Error("Submit stays disabled with the box ticked");
  await page.screenshot({ path: join(out, "gateway-inspector-form.png") });
  await submit.click();
  await dialog.waitFor({ state: "hidden" });
  const deleted = page.getByText(/^Deleted note-1 \(Groceries\)\.$/);
  await deleted.waitFor({ timeout: 10_000 });
  const accepted = await deleted.innerText();
  const answer = retried(3, "accept");
  if (answer.content?.confirm !== true) throw new Error(`the accepted answer is ${JSON.stringify(answer)}`);
  if (JSON.stringify(deletions()) !== JSON.stringify(["deleted note-1"])) {
    throw new Error(`accept: the upstream's deletions are ${JSON.stringify(deletions())}, not exactly note-1`);
  }
  await page.screenshot({ path: join(out, "gateway-inspector-done.png") });
  ui.log(`accept: the retry answered ${JSON.stringify({ [KEY]: answer })}; the result is ` +
    `${JSON.stringify(accepted)}; the upstream deleted note-1, once`);

  await ui.closeResults();
  await ui.openTool("notes_list");
  ui.step = "notes_list through the gateway, no form";
  await workspace.waitFor();
  await workspace.fill(workspaceUri);
  await page.getByRole("button", { name: "Execute Tool" }).click();
  const listed = page.getByText(/^note-2: Standup/);
  await listed.waitFor({ timeout: 10_000 });
  const list = await listed.innerText();
  if (list !== "note-2: Standup\nnote-3: Ideas\nnote-4: Taxes") throw new Error(`notes_list says ${JSON.stringify(list)}`);
  if (await dialog.isVisible()) throw new Error("a form was shown for notes_list");
  const lists = sent.filter((m) => m?.method === "tools/call" && m.params?.name === "notes_list");
  if (lists.length !== 1 || lists[0].params.requestState) throw new Error(`expected one notes_list request, saw ${JSON.stringify(lists)}`);
  ui.log(`notes_list: ${JSON.stringify(list)} (one request, no form): Groceries is gone, the rest remain`);
  if (deleteCalls().length !== 6) throw new Error(`expected 6 notes_delete requests in all, saw ${deleteCalls().length}`);
  return { declined: outcomes.decline, cancelled: outcomes.cancel, accepted, list };
});
