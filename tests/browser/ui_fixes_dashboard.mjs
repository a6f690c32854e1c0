// Opens the workbench page on the Dask dashboard (headless Debian chromium through
// playwright-core) and reads what it shows of the runs: the Run menu's entries and the
// header's numbers (Bokeh renders into shadow DOMs: every root is walked). Waits until the
// header says WANT (a text) or TIMEOUT_MS passes. Prints one JSON line:
//   node ui_fixes_dashboard.mjs URL SCREENSHOT TIMEOUT_MS WANT
// {"ok", "runs": [option text…], "header": text, "console_errors", "page_errors", "error"}
import { launch, recordFailure, watchedPage } from "./lab.mjs";

const [url, screenshot, timeoutArg, want] = process.argv.slice(2);
const timeout = Number(timeoutArg || 60000);
const result = { ok: false, runs: [], header: "", console_errors: [], page_errors: [] };

function read() {
  const roots = [];
  const walk = (root) => {
    roots.push(root);
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  let header = "";
  const runs = [];
  for (const root of roots) {
    for (const h of root.querySelectorAll("h2")) {
      if (h.textContent.includes("workbench run")) header = h.parentElement.textContent;
    }
    for (const option of root.querySelectorAll("select option")) runs.push(option.textContent);
  }
  return { header, runs };
}

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1400, height: 1000 });
  await page.goto(url, { waitUntil: "load", timeout });
  const deadline = Date.now() + timeout;
  for (;;) {
    Object.assign(result, await page.evaluate(read));
    if (result.header.includes(want) || Date.now() > deadline) break;
    await page.waitForTimeout(250);
  }
  await page.waitForTimeout(1000);  // the canvases paint the latest data
  await page.screenshot({ path: screenshot, fullPage: true });
  result.ok = result.header.includes(want);
} catch (err) {
  await recordFailure(browser, result, err, screenshot);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
