// Opens a Dask dashboard page in headless Debian chromium (playwright-core, no browser
// download), waits for the given texts, saves a screenshot and prints one JSON line:
//   node check_page.mjs URL SCREENSHOT TIMEOUT_MS TEXT...
// {"ok": bool, "missing": [...], "console_errors": [...], "page_errors": [...],
//  "external_requests": [...], "failed_requests": [...]}
import { chromium } from 'playwright-core';

const [url, screenshot, timeoutArg, ...texts] = process.argv.slice(2);
const timeout = Number(timeoutArg || 60000);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const origin = new URL(url).origin;

const result = { ok: false, missing: [...texts], console_errors: [], page_errors: [],
                 external_requests: [], failed_requests: [] };
let browser;
try {
  browser = await chromium.launch({
    executablePath,
    args: ['--no-sandbox', '--headless', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout,
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on('console', (msg) => { if (msg.type() === 'error') result.console_errors.push(msg.text()); });
  page.on('pageerror', (err) => result.page_errors.push(String(err && err.stack || err)));
  page.on('request', (req) => {
    const u = req.url();
    if (!u.startsWith(origin) && !u.startsWith('ws://' + new URL(url).host) && !u.startsWith('data:')
        && !u.startsWith('blob:')) result.external_requests.push(u);
  });
  page.on('requestfailed', (req) => result.failed_requests.push(req.url() + ' ' + (req.failure()?.errorText || '')));
  await page.goto(url, { waitUntil: 'load', timeout });
  // Poll the rendered page (Bokeh renders into shadow DOMs: innerText of the body misses
  // them, so walk every shadow root's text) until every text is there.
  const deadline = Date.now() + timeout;
  for (;;) {
    result.missing = await page.evaluate((wanted) => {
      const parts = [];
      const walk = (root) => {
        for (const el of root.querySelectorAll('*')) {
          if (el.shadowRoot) walk(el.shadowRoot);
        }
        parts.push(root.textContent || '');
      };
      walk(document);
      const text = parts.join('\n');
      return wanted.filter((t) => !text.includes(t));
    }, texts);
    if (result.missing.length === 0 || Date.now() > deadline) break;
    await page.waitForTimeout(250);
  }
  // let the canvases paint the latest data before the picture
  await page.waitForTimeout(1500);
  await page.screenshot({ path: screenshot, fullPage: true });
  result.ok = result.missing.length === 0;
} catch (err) {
  result.error = String(err && err.stack || err);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
