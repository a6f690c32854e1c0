// Screenshot of a notebook's live view: opens a JupyterLab page, runs all cells, waits,
// saves a PNG. Used to make docs/live_view.png (see docs/make_live_screenshot.sh).
import { chromium } from "playwright-core";

const [url, out, waitSeconds] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));
await page.goto(url, { waitUntil: "domcontentloaded", timeout: 120000 });
await page.waitForSelector(".jp-Notebook", { timeout: 120000 });
await page.waitForTimeout(4000);
await page.click("text=Run", { timeout: 30000 });
await page.click("text=Run All Cells", { timeout: 30000 });
await page.waitForTimeout(Number(waitSeconds || 40) * 1000);
try { await page.click("button:has-text('No')", { timeout: 3000 }); } catch (e) { /* no news prompt */ }
// bring the training cell (its code, progress bar and plots) to the top of the view
const cell = page.locator(".jp-CodeCell", { hasText: "%fdg run" }).first();
try {
  await cell.evaluate((el) => el.scrollIntoView({ block: "start" }));
} catch (e) { /* fall back to the page as is */ }
await page.waitForTimeout(1500);
try { await page.click("button:has-text('No')", { timeout: 2000 }); } catch (e) { /* the prompt came late, or never */ }
await page.screenshot({ path: out });
console.log(JSON.stringify({ errors }));
await browser.close();
