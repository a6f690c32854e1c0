// Changes a background run while it trains, in a real JupyterLab (headless Debian chromium
// through playwright-core): runs every cell above the edited learner cell (the last of them
// starts `%fdg run --background`), and as the run's metrics CSV grows re-runs the edited
// learner cell, then the cell that sets a new learning rate and sends it (`%fdg update
// cfg`), then the cell that stops the run and shows where the changes landed; keeps a
// picture of the live view, the notices and that table; then runs the check cell. Prints
// one JSON line:
//   node hot_edit.mjs NOTEBOOK_URL METRICS_CSV PAGE_PNG TIMEOUT_MS
// {"ok", "edit_notice", "update_notice", "check", "page_errors", "external_requests", "error"}
import { existsSync, readFileSync } from "node:fs";
import { launch, openNotebook, recordFailure, watchedPage } from "./lab.mjs";

const [url, csv, pageShot, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 120000);
const result = { ok: false, page_errors: [], external_requests: [] };

const RUN_CELL = "# train in the background";
const EDIT_CELL = 'wb.log("edited", 1.0)';
const UPDATE_CELL = "%fdg update cfg";
const STOP_CELL = "# stop it";
const CHECK_CELL = "# for the test";
const EDIT_AFTER = 12;   // iterations before the edit
const KEEP_GOING = 12;   // iterations after each change lands

// the metrics CSV as rows of {column: text} (the logger rewrites it when a column is new)
function rows() {
  if (!existsSync(csv)) return [];
  const lines = readFileSync(csv, "utf8").split(/\r?\n/).filter((l) => l.trim());
  if (lines.length < 2) return [];
  const head = lines[0].split(",");
  return lines.slice(1).map((l) => Object.fromEntries(l.split(",").map((v, i) => [head[i], v])));
}

async function until(what, test, ms) {
  const deadline = Date.now() + ms;
  while (!test(rows())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms / 1000} s (${rows().length} rows)`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function runCell(page, cell, expect) {
  await cell.locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Shift+Enter");
  const out = cell.locator(".jp-OutputArea-output", { hasText: expect }).first();
  await out.waitFor({ timeout });
  return out.innerText();
}

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1280, height: 1240 });
  await openNotebook(page, url, timeout);
  // the notebook gets the width: close the file browser
  await page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").first().click().catch(() => {});

  const cell = (text) => page.locator(".jp-CodeCell", { hasText: text }).first();
  await cell(EDIT_CELL).locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Escape");
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Run$/ }).click({ timeout });
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Above Selected Cell$/ }).click({ timeout });
  await cell(RUN_CELL).locator(".jp-OutputArea-output", { hasText: "training in the background" }).waitFor({ timeout: timeout * 3 });

  await until("the run's first iterations", (r) => r.length >= EDIT_AFTER, timeout * 3);
  result.edit_notice = await runCell(page, cell(EDIT_CELL), "applies from iteration");
  await until("the edit's landing", (r) => r.filter((row) => row.edited === "1.0").length >= KEEP_GOING, timeout * 3);
  result.update_notice = await runCell(page, cell(UPDATE_CELL), "applies from iteration");
  const asked = rows().length;
  await until("the update's landing", (r) => r.length >= asked + KEEP_GOING, timeout * 3);

  await runCell(page, cell(STOP_CELL), "charts/learning_rate");
  // the picture: the live view at the top, the changes and what they did below it, down
  // to the stop cell's table
  await cell(RUN_CELL).evaluate((el) => el.scrollIntoView({ block: "start" }));
  await page.mouse.move(0, 0);
  await page.waitForTimeout(1500);
  const bottom = await cell(STOP_CELL).evaluate((el) => el.getBoundingClientRect().bottom);
  const { width, height } = page.viewportSize();
  await page.screenshot({ path: pageShot, clip: { x: 0, y: 0, width, height: Math.min(height, Math.ceil(bottom) + 4) } });

  const text = await runCell(page, cell(CHECK_CELL), "CHECK ");
  result.check = JSON.parse(text.slice(text.indexOf("CHECK ") + 6).trim().split("\n")[0]);
  result.ok = true;
} catch (err) {
  await recordFailure(browser, result, err, pageShot);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
