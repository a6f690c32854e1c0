// What the JupyterLab browser scripts share: Debian's chromium launched headless, a page
// that records its errors (and requests leaving the server), and a notebook opened with
// its kernel idle. Each script drives its own scenario on top.
import { chromium } from "playwright-core";

/** chromium from Debian (CHROMIUM overrides the path), headless, nothing fetched on its own. */
export function launch(timeout) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    timeout,
  });
}

/** A new page that records into `result`: page errors always; console errors when
 * `result.console_errors` exists; requests to anywhere but `url`'s server when
 * `result.external_requests` exists. */
export async function watchedPage(browser, result, url, viewport) {
  const page = await browser.newPage({ viewport });
  const origin = new URL(url).origin;
  if (result.console_errors) {
    page.on("console", (msg) => { if (msg.type() === "error") result.console_errors.push(msg.text()); });
  }
  page.on("pageerror", (err) => result.page_errors.push(String((err && err.stack) || err)));
  if (result.external_requests) {
    page.on("request", (req) => {
      const u = req.url();
      if (!u.startsWith(origin) && !u.startsWith("ws://" + new URL(url).host) && !u.startsWith("data:")
          && !u.startsWith("blob:")) result.external_requests.push(u);
    });
  }
  return page;
}

/** Open the notebook at `url` and wait until its kernel is idle (taking the notebook's own
 * kernel, should JupyterLab ask). */
export async function openNotebook(page, url, timeout) {
  await page.goto(url, { waitUntil: "domcontentloaded", timeout });
  await page.waitForSelector(".jp-Notebook .jp-CodeCell", { timeout });
  const select = page.locator(".jp-Dialog .jp-mod-accept");
  if (await select.isVisible().catch(() => false)) await select.click();
  await page.locator(".jp-StatusBar-Widget", { hasText: /\| Idle/ }).first().waitFor({ timeout });
}

/** After a failure: the error (with its stack) in `result`, and a picture of the page as
 * it was, when there is one, for whoever reads the failed test. */
export async function recordFailure(browser, result, err, shotPath) {
  result.error = String((err && err.stack) || err);
  try {
    const pages = browser ? browser.contexts().flatMap((c) => c.pages()) : [];
    if (pages.length) await pages[0].screenshot({ path: shotPath });
  } catch (e) { /* the picture is a bonus */ }
}
