"""Regenerate docs/compare_runs.png and docs/compare_iqm.png: wb.compare's plots of real runs.

python docs/make_compare_pictures.py

Trains the quickstart (PPO on CartPole, inline) for seeds 1-3 into a temporary run store and
draws them with ``wb.compare`` (a line per run); then sweeps two learning rates × 4 seeds with
``wb.sweep`` and draws ``result.plot()`` (the IQM per learning rate, in its 95 % stratified-
bootstrap band). Each plot is saved with ``Comparison.save`` (one HTML file, Bokeh inline: no
network) and photographed by headless chromium through playwright-core (tests/browser,
see .ci/browser-setup.sh). About 2-2.5 minutes on a 2-core machine, the sweep most of it.
"""

import subprocess
import tempfile
import time
from pathlib import Path

import workbench as wb
from workbench.algorithms import ppo

HERE = Path(__file__).parent
BROWSER = HERE.parent / "tests" / "browser"  # where playwright-core is installed
SEEDS = (1, 2, 3)
LEARNING_RATES = [1e-3, 3e-3]
SWEEP_SEEDS = 4
SWEEP_ITERATIONS = 200  # no target: every trial runs as long, so each band spans the whole plot

# open the saved page, wait for Bokeh to draw, photograph the plot (its root element) only
SHOOT = """
const { chromium } = require("playwright-core");
const [page_url, out] = process.argv.slice(1);
(async () => {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--headless", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 900, height: 500 }, deviceScaleFactor: 1.5 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(page_url, { waitUntil: "load" });
  const plot = page.locator(".bk-Figure").first();
  await plot.waitFor({ state: "visible", timeout: 30000 });
  await page.waitForTimeout(1500);  // the canvas is painted after the element appears
  await plot.screenshot({ path: out });
  await browser.close();
  if (errors.length) { console.error(errors.join("\\n")); process.exit(1); }
})();
"""


def shoot(html: Path, png: Path) -> None:
    subprocess.run(["node", "-e", SHOOT, html.resolve().as_uri(), str(png.resolve())], cwd=BROWSER, check=True)
    print(f"wrote {png} ({png.stat().st_size // 1024} KB)")


def main() -> None:
    started = time.perf_counter()
    cfg = ppo.PPOConfig()
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})  # the quickstart's cells, as after_training.ipynb
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        store = work / "runs"
        for seed in SEEDS:  # as the notebook's "Compare seeds": each run kept in the store
            cfg.seed = seed
            run = fdg.run(
                iterations=300,
                steps=cfg.num_steps,
                target_return=475,
                progress=False,
                run_store=str(store),
                run_name=f"seed-{seed}",
            )
            print(f"seed {seed}: {run.status} after {run.completed_iterations} iterations")
        cfg.seed = 1
        per_run = wb.compare(store=str(store), title="charts/episodic_return: the quickstart, seeds 1-3")
        # the lines climb through compare's top-left legend here; the bottom right is empty
        per_run.figure.legend.location = "bottom_right"
        per_run.save(work / "runs.html")
        shoot(work / "runs.html", HERE / "compare_runs.png")

        swept = wb.sweep(
            fdg,
            over={"cfg.learning_rate": LEARNING_RATES},
            seeds=SWEEP_SEEDS,
            iterations=SWEEP_ITERATIONS,
            steps=cfg.num_steps,
            progress=False,
        )
        print(swept.summary())
        grouped = swept.plot()  # by the swept setting: IQM across seeds, 95 % stratified-bootstrap band
        grouped.save(work / "iqm.html")
        shoot(work / "iqm.html", HERE / "compare_iqm.png")
    print(f"done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
