// The notebook fixes of issue 57 item 5, in a real JupyterLab (headless Debian chromium
// through playwright-core). Runs the quickstart's cells, then: draws the FDG (%fdg) and
// measures its boxes, labels and arrows; starts a background run without --steps and reads
// its notice, its handle and its progress line (bar and label measured, at a narrow width
// too); stops it; shows the placement board, has it refuse a policy naming a worker by a
// long path (the notice measured word by word in a narrow board); restarts the kernel and
// reads the board again, then tries a drag on it. Prints one JSON line:
//   node ui_fixes_lab.mjs NOTEBOOK_URL PAGE_PNG BOARD_PNG TIMEOUT_MS
// {"ok", "graph", "steps_notice", "handle", "live", "same", "progress", "progress_narrow",
//  "notice", "board_before", "board_after", "drag_after", "page_errors", "console_errors", "error"}
import { launch, openNotebook, recordFailure, watchedPage } from "./lab.mjs";

const [url, pageShot, boardShot, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 120000);
const result = { ok: false, page_errors: [], console_errors: [] };

const cell = (page, text) => page.locator(".jp-CodeCell", { hasText: text }).first();

async function runCell(page, text, expect, ms = timeout) {
  const c = cell(page, text);
  await c.locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Shift+Enter");
  const out = c.locator(".jp-OutputArea-output", { hasText: expect }).first();
  await out.waitFor({ timeout: ms });
  return out.innerText();
}

// every fragment box holds its texts; no arrow passes through an edge label
function measureGraph() {
  const svg = document.querySelector(".workbench-fdg svg");
  const inside = (inner, outer) => inner.x >= outer.x - 0.5 && inner.y >= outer.y - 0.5
    && inner.x + inner.width <= outer.x + outer.width + 0.5 && inner.y + inner.height <= outer.y + outer.height + 0.5;
  const boxes = [...svg.querySelectorAll("g.wb-fragment")].map((g) => {
    const rect = g.querySelector("rect").getBBox();
    const texts = [...g.querySelectorAll("text")].filter((t) => t.textContent.trim());
    return { name: texts[0].textContent, spills: texts.filter((t) => !inside(t.getBBox(), rect)).map((t) => t.textContent) };
  });
  const labels = [...svg.querySelectorAll("text.wb-edge-label")].map((t) => ({ text: t.textContent, box: t.getBBox() }));
  const arrows = [...svg.querySelectorAll("path[marker-end]")];
  const crossings = [];
  for (const label of labels) {
    const b = label.box;
    for (const path of arrows) {
      const length = path.getTotalLength();
      for (let l = 0; l <= length; l += 1) {
        const p = path.getPointAtLength(l);
        if (p.x > b.x + 1 && p.x < b.x + b.width - 1 && p.y > b.y + 1 && p.y < b.y + b.height - 1) {
          crossings.push({ label: label.text, at: [Math.round(p.x), Math.round(p.y)] });
          break;
        }
      }
    }
  }
  return { boxes, labels: labels.map((l) => l.text), arrows: arrows.length, crossings };
}

// the live view's progress line: the bar's and the label's boxes, and the label's text
function measureProgress(runCellNode) {
  const bar = runCellNode.querySelector(".widget-hprogress");
  const label = runCellNode.querySelector(".wb-progress-label");
  if (!bar || !label) return { found: { bar: !!bar, label: !!label }, text: "" };
  const widget = label.closest(".widget-html");  // the label's widget, beside the bar's
  const b = bar.getBoundingClientRect(), w = widget.getBoundingClientRect(), l = label.getBoundingClientRect();
  const style = getComputedStyle(label);
  return { bar_top: b.top, bar_bottom: b.bottom, bar_right: b.right, label_top: w.top, label_left: w.left,
           text_top: l.top, text_bottom: l.bottom,
           label_height: l.height, line_height: parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.4,
           text: label.textContent, title: label.title, truncated: label.scrollWidth > label.clientWidth,
           text_overflow: style.textOverflow, white_space: style.whiteSpace };
}

// words broken across lines in a notice (a word that fits a line is never split), and
// whether the notice fits its box (a token longer than a line is broken to fit)
function measureNotice(node) {
  const broken = [];
  let lines = new Set();
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  for (let text = walker.nextNode(); text; text = walker.nextNode()) {
    const re = /\S+/g;
    let m;
    while ((m = re.exec(text.data))) {
      const range = document.createRange();
      range.setStart(text, m.index);
      range.setEnd(text, m.index + m[0].length);
      const rects = [...range.getClientRects()].filter((r) => r.width > 0);
      const tops = new Set(rects.map((r) => Math.round(r.top)));
      tops.forEach((t) => lines.add(t));
      const probe = document.createElement("span");  // the word's width on one line
      probe.style.cssText = "position:absolute;visibility:hidden;white-space:nowrap";
      probe.textContent = m[0];
      text.parentElement.append(probe);
      const fitsALine = probe.getBoundingClientRect().width <= node.clientWidth;
      probe.remove();
      if (tops.size > 1 && fitsALine) broken.push(m[0]);
    }
  }
  const style = getComputedStyle(node);
  return { text: node.textContent, broken, fits: node.scrollWidth <= node.clientWidth + 1, lines: lines.size,
           word_break: style.wordBreak, overflow_wrap: style.overflowWrap };
}

function readBoard() {
  const board = document.querySelector(".wb-board");
  return {
    status: board.querySelector(".wb-status-text").textContent,
    cluster: board.querySelector(".wb-cluster h3").textContent,
    gone: board.classList.contains("wb-gone"),
    draggable: [...board.querySelectorAll(".wb-chip, .wb-frag")].map((n) => n.draggable),
    presets_disabled: [...board.querySelectorAll(".wb-presets button")].every((b) => b.disabled),
    message: board.querySelector(".wb-message").hidden ? "" : board.querySelector(".wb-message").textContent,
    policy: board.querySelector(".wb-policy").textContent,
  };
}

let browser;
try {
  browser = await launch(timeout);
  const page = await watchedPage(browser, result, url, { width: 1280, height: 1100 });
  await openNotebook(page, url, timeout);
  await page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").first().click().catch(() => {});

  // the quickstart's cells, up to the graph
  await cell(page, "%fdg  # the graph").locator(".jp-InputArea-editor").click();
  await page.keyboard.press("Escape");
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Run$/ }).click({ timeout });
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Run All Above Selected Cell$/ }).click({ timeout });
  await cell(page, "%%fragment actor --every iteration").locator(".jp-OutputArea-output").first().waitFor({ timeout: timeout * 2 });

  // 5: the graph
  await runCell(page, "%fdg  # the graph", "interfaces");
  await page.locator(".workbench-fdg svg").waitFor({ timeout });
  result.graph = await page.evaluate(measureGraph);

  // 7 and 4: a background run without --steps; its notice and its handle
  const started = await runCell(page, "# background", "HANDLE", timeout * 3);
  result.steps_notice = started.split("\n").find((l) => l.startsWith("steps:")) || started;
  result.handle = started.split("\n").find((l) => l.startsWith("HANDLE")) || started;
  // 3: the progress line, once a few iterations are in
  const runNode = await cell(page, "# background").elementHandle();
  const deadline = Date.now() + timeout * 3;
  for (;;) {
    result.progress = await runNode.evaluate(measureProgress);
    if (/ (\d{2,}) it /.test(result.progress.text) && result.progress.text.includes("return")) break;
    if (Date.now() > deadline) {
      // whether the run stalled or only the page stopped hearing of it: the kernel says
      const said = await runCell(page, "# diagnose", "DIAGNOSIS").catch((e) => `no diagnosis: ${e}`);
      throw new Error(`no progress: ${JSON.stringify(result.progress)}\nthe kernel: ${said}`);
    }
    await page.waitForTimeout(500);
  }
  await runNode.evaluate((node) => { node.style.width = "560px"; });  // a narrow notebook
  await page.waitForTimeout(500);
  result.progress_narrow = await runNode.evaluate(measureProgress);
  await runNode.evaluate((node) => { node.style.width = ""; });
  // 6: the run's printed notices (a URL among them) in a narrow notebook
  const printed = (text) => cell(page, "# background")
    .locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"] pre', { hasText: text }).first();
  await cell(page, "# background").evaluate((node) => { node.style.width = "520px"; });
  result.printed = [await printed("training in the background").evaluate(measureNotice),
                    await printed("dashboard:").evaluate(measureNotice)];
  await cell(page, "# background").evaluate((node) => { node.style.width = ""; });
  result.live = (await runCell(page, "# live handle", "LIVE")).split("\n").find((l) => l.startsWith("LIVE"));
  result.same = (await runCell(page, "# stop", "SAME", timeout * 2)).split("\n").find((l) => l.startsWith("SAME"));

  // 6: the board refuses a policy naming a worker by a long path; the notice in a narrow board
  await runCell(page, "%fdg place", "Placement board");
  await page.locator(".wb-board .wb-chip").first().waitFor({ timeout });
  result.board_before = await page.evaluate(readBoard);
  result.output_style = await page.evaluate(() => getComputedStyle(document.querySelector(".wb-board").parentElement).wordBreak);
  await page.click('.wb-board [data-action="import"]');
  await page.fill(".wb-board textarea.wb-json", JSON.stringify({ name: "mine", groups: [
    { fragments: ["actor", "env"], replicas: 1, workers: ["/home/someone/projects/reinforcement-learning/clusters/workers/node-0042.internal"] },
    { fragments: ["learner"], replicas: 1, workers: ["0"] }] }));
  await page.click('.wb-board [data-action="apply-import"]');
  await page.locator(".wb-board .wb-message.wb-error").waitFor({ timeout: 30000 });
  await page.evaluate(() => { document.querySelector(".wb-board").style.width = "380px"; });
  result.notice = await page.locator(".wb-board .wb-message").evaluate(measureNotice);
  await page.evaluate(() => { document.querySelector(".wb-board").style.width = ""; });
  await page.click('.wb-board [data-action="import"]');  // close the panel

  // 2: restart the kernel; the board says so and takes no drags
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Kernel$/ }).click({ timeout });
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Restart Kernel…$/ }).click({ timeout });
  await page.locator(".jp-Dialog .jp-mod-accept", { hasText: "Restart" }).click({ timeout });
  await page.locator(".wb-board.wb-gone").waitFor({ timeout: 60000 });
  await page.locator(".jp-StatusBar-Widget", { hasText: /\| Idle/ }).first().waitFor({ timeout });
  result.board_after = await page.evaluate(readBoard);
  const chip = ".wb-board .wb-card .wb-chip";
  const slot = '.wb-board .wb-slot[data-worker="1"][data-device="cpu"]';
  await page.locator(chip).first().scrollIntoViewIfNeeded();
  await page.dragAndDrop(chip, slot, { timeout: 10000, force: true }).catch((e) => { result.drag_error = String(e); });
  await page.evaluate(([src, dst]) => {  // and the events a drag fires, should the mouse not start one
    const from = document.querySelector(src), to = document.querySelector(dst);
    const dataTransfer = new DataTransfer();
    const fire = (el, type) => el.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer }));
    fire(from, "dragstart"); fire(to, "dragenter"); fire(to, "dragover"); fire(to, "drop"); fire(from, "dragend");
  }, [chip, slot]);
  await page.waitForTimeout(1500);
  result.drag_after = await page.evaluate(readBoard);
  await page.locator(".wb-board").screenshot({ path: boardShot });
  await page.screenshot({ path: pageShot });
  result.ok = true;
} catch (err) {
  await recordFailure(browser, result, err, pageShot);
} finally {
  if (browser) await browser.close();
}
console.log(JSON.stringify(result));
