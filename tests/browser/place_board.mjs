// Drives the placement board in a real JupyterLab (headless Debian chromium through
// playwright-core): runs the notebook, drags the learner onto worker 1's CPU, imports
// malformed JSON (refused on the board), re-runs the cell that prints the kernel's
// board.policy, and saves screenshots. Prints one JSON line:
//   node place_board.mjs NOTEBOOK_URL BOARD_PNG PAGE_PNG TIMEOUT_MS
// {"ok", "before", "after", "drag", "refusal", "message", "page_errors", "console_errors",
//  "external_requests", "error"}
import { launch, openNotebook, recordFailure, watchedPage } from "./lab.mjs";

const [url, boardShot, pageShot, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 60000);
const result = { ok: false, page_errors: [], console_errors: [], external_requests: [] };

const FRAGMENT = "learner";
const WORKER = "1";
const chipOf = `.wb-board .wb-card[data-card="${FRAGMENT}"] .wb-chip`;
const slotOf = `.wb-board .wb-slot[data-worker="${WORKER}"][data-device="cpu"]`;
const placed = `${slotOf} .wb-frag[data-fragment="${FRAGMENT}"]`;

// The kernel prints "BOARD <n>: <policy JSON>" each time the check cell runs.
async function boardOutput(page, n) {
  const out = page.locator(".jp-OutputArea-output", { hasText: `BOARD ${n}:` }).first();
  await out.waitFor({ timeout });
  const text = await out.innerText();
  return JSON.parse(text.slice(text.indexOf(":") + 1).trim());
}

// HTML5 drag and drop as the browser does it for a mouse drag, for when the synthetic
// mouse drag does not start one (the events, with a shared DataTransfer)
async function dispatchDrag(page, source, target) {
  await page.evaluate(([src, dst]) => {
    const from = document.querySelector(src);
    const to = document.querySelector(dst);
    const dataTransfer = new DataTransfer();
    const fire = (el, type) => el.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer }));
    fire(from, "dragstart");
    fire(to, "dragenter");
    fire(to, "dragover");
    fire(to, "drop");
    fire(from, "dragend");
  }, [source, target]);
}

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1500, height: 1100 });
  await openNotebook(page, url, timeout);  // then Run ▸ Run All Cells
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Run$/ }).click({ timeout });
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Cells$/ }).click({ timeout });

  await page.locator(chipOf).waitFor({ timeout });
  await page.locator(slotOf).waitFor({ timeout });
  result.before = await boardOutput(page, 1);

  // drag the learner's name onto worker 1's CPU
  await page.locator(chipOf).scrollIntoViewIfNeeded();
  await page.dragAndDrop(chipOf, slotOf, { timeout });
  result.drag = "mouse";
  try {
    await page.locator(placed).waitFor({ timeout: 5000 });
  } catch (err) {
    result.drag = "events";
    await dispatchDrag(page, chipOf, slotOf);
    await page.locator(placed).waitFor({ timeout: 10000 });
  }
  result.message = await page.locator(".wb-board .wb-message").innerText();
  await page.mouse.move(0, 0);
  await page.locator(".wb-board").screenshot({ path: boardShot });

  // malformed JSON through Import: refused on the board, with the reason
  await page.click('.wb-board [data-action="import"]');
  await page.fill(".wb-board textarea.wb-json", '{"name": "broken", "groups": [');
  await page.click('.wb-board [data-action="apply-import"]');
  const refusal = page.locator(".wb-board .wb-message.wb-error");
  await refusal.waitFor({ timeout: 15000 });
  result.refusal = await refusal.innerText();

  // ask the kernel what the board's policy is now
  const check = page.locator(".jp-CodeCell", { hasText: "# the kernel's view of the board" }).first();
  await check.locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Shift+Enter");
  result.after = await boardOutput(page, 2);

  // the Pipelined preset: the kernel places it and the board says the actors lag
  await page.click('.wb-board [data-preset="pipelined"]');
  const piped = page.locator(".wb-board .wb-policy", { hasText: "pipelined, lag 1" });
  await piped.waitFor({ timeout: 15000 });
  result.pipelined = await piped.innerText();
  await page.screenshot({ path: pageShot, fullPage: false });
  result.ok = true;
} catch (err) {
  await recordFailure(browser, result, err, pageShot);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
