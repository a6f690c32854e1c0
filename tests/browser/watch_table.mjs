// Watches the workbench dashboard page without reloading it: every 250 ms reads the header
// (run id, iterations) and the "Groups, replicas and workers" table (Bokeh renders both
// into shadow DOMs), until the file STOP_FILE exists or TIMEOUT_MS passes. Prints one
// JSON line (STOP_FILE.ready is written once the page has loaded):
//   node watch_table.mjs URL STOP_FILE SCREENSHOT TIMEOUT_MS
// {"ok", "samples": [{"t", "run", "iterations", "rows": [[cell, ...], ...], "columns"}],
//  "console_errors", "page_errors", "error"}
import { existsSync, writeFileSync } from "node:fs";
import { launch, watchedPage } from "./lab.mjs";

const [url, stopFile, screenshot, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 120000);
const result = { ok: false, samples: [], console_errors: [], page_errors: [] };

// the header's run id and iteration count, and the table's rows, from every shadow root
function read() {
  const roots = [];
  const walk = (root) => {
    roots.push(root);
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  let run = null, iterations = null, columns = 0;
  const rows = [];
  for (const root of roots) {
    for (const h of root.querySelectorAll("h2")) {
      const code = h.querySelector("code");
      if (code && h.textContent.includes("workbench run")) run = code.textContent;
    }
    for (const div of root.querySelectorAll("div")) {
      if (iterations === null && div.children.length === 1 && div.children[0].tagName === "B"
          && / iterations$/.test(div.textContent)) iterations = Number(div.children[0].textContent);
    }
    columns += root.querySelectorAll(".slick-header-column").length;
    for (const row of root.querySelectorAll(".slick-row")) {
      rows.push([...row.querySelectorAll(".slick-cell")].map((c) => c.textContent.trim()));
    }
  }
  return { run, iterations, rows, columns };
}

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1400, height: 1000 });
  await page.goto(url, { waitUntil: "load", timeout });
  // "load" comes before Bokeh has drawn the document: wait for the table's columns (a
  // cold first page took seconds more, and a short first run went by unseen)
  const drawn = Date.now();
  while ((await page.evaluate(read)).columns === 0 && Date.now() - drawn < 60000) await page.waitForTimeout(100);
  writeFileSync(`${stopFile}.ready`, "");  // the page is drawn: the test may start its runs
  const start = Date.now();
  while (!existsSync(stopFile) && Date.now() - start < timeout) {
    result.samples.push({ t: (Date.now() - start) / 1000, ...(await page.evaluate(read)) });
    await page.waitForTimeout(250);
  }
  await page.screenshot({ path: screenshot, fullPage: true });
  result.ok = true;
} catch (err) {
  result.error = String((err && err.stack) || err);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
