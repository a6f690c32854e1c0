// Kernel ▸ Interrupt during a coarse %fdg run, in a real JupyterLab (headless Debian
// chromium through playwright-core). Runs every cell above the check cell, waits until the
// run has written ITERATIONS rows to its metrics CSV, clicks Kernel ▸ Interrupt Kernel,
// times how long the run cell takes to return, reads its output, then runs the check cell
// (a second coarse run, on the same kernel and cluster). Prints one JSON line:
//   node interrupt.mjs NOTEBOOK_URL METRICS_CSV ITERATIONS PAGE_PNG TIMEOUT_MS
// {"ok", "returned_s", "rows_at_interrupt", "outputs": [{"mime", "text"}], "after",
//  "page_errors", "external_requests", "error"}
import { existsSync, readFileSync } from "node:fs";
import { launch, openNotebook, recordFailure, watchedPage } from "./lab.mjs";

const [url, csv, rowsArg, pageShot, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 120000);
const wantRows = Number(rowsArg || 3);
const result = { ok: false, page_errors: [], external_requests: [] };

const RUN_CELL = "# the run to interrupt";
const CHECK_CELL = "# after the interrupt";

function rowsWritten() {
  if (!existsSync(csv)) return 0;
  return Math.max(0, readFileSync(csv, "utf8").split("\n").filter((l) => l.trim()).length - 1);
}

async function menu(page, top, item) {
  await page.locator(".lm-MenuBar-itemLabel", { hasText: new RegExp(`^${top}$`) }).click({ timeout });
  await page.locator(".lm-Menu-itemLabel", { hasText: new RegExp(`^${item}$`) }).click({ timeout });
}

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1300, height: 1000 });
  await openNotebook(page, url, timeout);

  const runCell = page.locator(".jp-CodeCell", { hasText: RUN_CELL }).first();
  const checkCell = page.locator(".jp-CodeCell", { hasText: CHECK_CELL }).first();
  // select the check cell (command mode), then Run ▸ Run All Above Selected Cell
  await checkCell.locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Escape");
  await menu(page, "Run", "Run All Above Selected Cell");

  // the run is iterating once its metrics CSV has rows
  const deadline = Date.now() + timeout * 3;
  while (rowsWritten() < wantRows) {
    if (Date.now() > deadline) throw new Error(`the run wrote ${rowsWritten()} rows to ${csv} in time`);
    await page.waitForTimeout(100);
  }
  result.rows_at_interrupt = rowsWritten();
  const asked = Date.now();
  await menu(page, "Kernel", "Interrupt Kernel");
  // the cell has returned when its prompt shows an execution count instead of [*]
  await runCell.locator(".jp-InputPrompt").filter({ hasText: /\[\d+\]/ }).waitFor({ timeout });
  result.returned_s = (Date.now() - asked) / 1000;
  await page.waitForTimeout(1000); // the live view's last redraw
  result.outputs = await runCell.locator(".jp-OutputArea-output").evaluateAll((els) =>
    els.map((el) => ({ mime: el.getAttribute("data-mime-type") || "", text: el.innerText })));

  // the next coarse run, without a restart
  await checkCell.locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Shift+Enter");
  const after = checkCell.locator(".jp-OutputArea-output", { hasText: "AFTER " }).first();
  await after.waitFor({ timeout: timeout * 2 });
  const text = await after.innerText();
  result.after = JSON.parse(text.slice(text.indexOf("AFTER ") + 6).trim().split("\n")[0]);
  result.check_outputs = await checkCell.locator(".jp-OutputArea-output").evaluateAll((els) =>
    els.map((el) => ({ mime: el.getAttribute("data-mime-type") || "", text: el.innerText })));
  await page.screenshot({ path: pageShot });
  result.ok = true;
} catch (err) {
  await recordFailure(browser, result, err, pageShot);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
