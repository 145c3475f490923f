// Drives the MCP Inspector web UI (the Inspector's own React app, in headless Chromium through
// playwright-core) through notes_delete's form confirmation against the notes server, the way a
// person would: connect, open the tool, fill its arguments, execute, pick the second note in the
// elicitation form, tick the confirmation, choose the standing option, submit, read the result;
// then a call in the same workspace runs with no form, and one in another workspace is asked.
//
// Run by .ci/inspector.sh, which starts both servers and checks the note files on disk afterwards.
// Environment: INSPECTOR_URL (the web UI, with its API token), NOTES_SERVER (the card's name in the
// UI), WORKSPACE_URI, TEAM_URI (another workspace of alice's), and CHROMIUM, PLAYWRIGHT_FROM, OUT
// (.ci/clients/inspector-ui.mjs, the browser plumbing shared with the gateway's drive). Prints one
// JSON line on success; on any step that does not behave, prints the step, the error, the page's
// text and the MCP traffic seen so far, saves OUT/inspector-failure.png and exits 1.
import { join } from "node:path";
import { drive, env } from "./inspector-ui.mjs";

const inspectorUrl = env("INSPECTOR_URL");
const serverName = env("NOTES_SERVER");
const workspaceUri = env("WORKSPACE_URI");
const teamUri = env("TEAM_URI");

drive("inspector", 180_000, async (ui) => {
  const { page, sent, out } = ui;
  await ui.connect(inspectorUrl, serverName);

  await ui.openTool("notes_delete");
  const title = page.getByRole("textbox", { name: "title", exact: true });
  const workspace = page.getByRole("textbox", { name: "workspaceUri", exact: true });
  await title.waitFor();

  ui.step = "fill the arguments and execute the tool";
  await title.fill("Groceries");
  await workspace.fill(workspaceUri);
  await page.getByRole("button", { name: "Execute Tool" }).click();
  ui.log(`executed notes_delete {title: "Groceries", workspaceUri: "${workspaceUri}"}`);

  ui.step = "the elicitation form appears (input_required, MRTR)";
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
  ui.log("form shown: 'Note to delete' (single-select) and 'Yes, delete this note' (checkbox)");

  ui.step = "pick the second note offered";
  await choice.click();
  const options = page.getByRole("listbox").getByRole("option");
  await options.first().waitFor();
  const offered = await options.allInnerTexts();
  const ids = offered.map((text) => text.split(" ")[0]);
  ui.log(`offered: ${JSON.stringify(offered)}`);
  if (JSON.stringify(ids) !== JSON.stringify(["note-3", "note-7", "note-14"])) {
    throw new Error(`expected the notes note-3, note-7, note-14 in that order, the form offers ${JSON.stringify(ids)}`);
  }
  await options.nth(1).click();
  const picked = await choice.inputValue();
  if (!picked.startsWith("note-7 ")) throw new Error(`the select shows ${JSON.stringify(picked)}, not note-7`);

  ui.step = "tick the confirmation";
  const submit = dialog.getByRole("button", { name: "Submit" });
  // The schema's default for confirm is false: the box starts unticked.
  if (await confirm.isChecked()) throw new Error("the confirmation box is ticked before the user ticks it");
  await confirm.check();
  if (!(await submit.isEnabled())) throw new Error("Submit stays disabled with a note picked and the box ticked");

  ui.step = "choose the standing option";
  const howLong = dialog.getByRole("textbox", { name: "How long" });
  await howLong.click();
  const spans = page.getByRole("listbox").getByRole("option");
  await spans.first().waitFor();
  const spanTexts = await spans.allInnerTexts();
  ui.log(`"How long" offers: ${JSON.stringify(spanTexts)}`);
  const wider = spanTexts.findIndex((t) => t.startsWith("Also allow notes_delete on workspace personal for the next 10 minutes"));
  if (spanTexts[0] !== "Only this time" || wider !== 1) {
    throw new Error(`expected "Only this time" then the standing option, the form offers ${JSON.stringify(spanTexts)}`);
  }
  await spans.nth(1).click();
  await page.screenshot({ path: join(out, "inspector-form.png") });
  ui.log(`picked ${JSON.stringify(picked)}, confirmation ticked; screenshot ${join(out, "inspector-form.png")}`);

  ui.step = "submit the form and get the tool's result";
  await submit.click();
  await dialog.waitFor({ state: "hidden" });
  // The Results panel shows whatever the call ended with (a result or an error); then its text
  // must be the deletion of note-7.
  await page.getByText("Results", { exact: true }).waitFor();
  const result = page.getByText(/^Deleted note-7 \(Groceries\) from personal\.$/);
  await result.waitFor({ timeout: 5000 });
  const resultText = await result.innerText();
  await page.screenshot({ path: join(out, "inspector-done.png") });
  ui.log(`result: ${JSON.stringify(resultText)}; screenshot ${join(out, "inspector-done.png")}`);

  ui.step = "the retry carried the answer and the request state (MRTR)";
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
  ui.log(`retry: inputResponses ${JSON.stringify(retry.inputResponses)} with a ${retry.requestState.length}-character requestState`);

  ui.step = "the next call in the same workspace runs under the standing approval, with no form";
  // The Results panel stands where the tool's form was: close it to get the form back.
  const reopen = async () => {
    await ui.closeResults();
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
  ui.log(`under the standing approval: ${JSON.stringify(await taxes.innerText())}, one request, no form`);

  ui.step = "a call in another workspace is asked again";
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
  ui.log("out of scope: the form was shown again; note-5 deleted once confirmed");
  return { chosen: "note-7", result: resultText };
});
