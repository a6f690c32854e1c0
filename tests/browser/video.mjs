// Plays run.show()'s video in a real JupyterLab (headless Debian chromium through
// playwright-core): runs every cell, waits for the <video> the last one shows, and reads
// what the browser made of it as it plays. Prints one JSON line:
//   node video.mjs NOTEBOOK_URL PAGE_PNG TIMEOUT_MS
// {"ok", "ready_state", "played_s", "duration_s", "width", "height", "media_error", "page_errors", "error"}
import { launch, openNotebook, recordFailure, watchedPage } from "./lab.mjs";

const [url, pageShot, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 120000);
const result = { ok: false, page_errors: [], external_requests: [] };

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1280, height: 1000 });
  await openNotebook(page, url, timeout);
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Run$/ }).click({ timeout });
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Cells$/ }).click({ timeout });
  const video = page.locator(".jp-OutputArea-output video").first();
  await video.waitFor({ timeout: timeout * 3 });
  await video.scrollIntoViewIfNeeded();
  // autoplay (muted): the clip plays by itself once decoded; a second of it is enough
  await page.waitForFunction(
    () => { const v = document.querySelector(".jp-OutputArea-output video");
            return v && (v.error || (v.readyState >= 2 && v.currentTime > 1.0)); },
    null, { timeout });
  Object.assign(result, await video.evaluate((v) => ({
    ready_state: v.readyState, played_s: v.currentTime, duration_s: v.duration,
    width: v.videoWidth, height: v.videoHeight, media_error: v.error ? v.error.code : null })));
  await page.screenshot({ path: pageShot });
  result.ok = true;
} catch (err) {
  await recordFailure(browser, result, err, pageShot);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
