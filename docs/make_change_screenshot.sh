#!/usr/bin/env bash
# Regenerate docs/change_while_training.png: the browser test of live changes (a real
# JupyterLab, headless chromium via playwright-core, see .ci/browser-setup.sh) trains the
# quickstart in the background, re-runs the learner cell with one more wb.log, sends a new
# learning rate with %fdg update cfg, stops the run and keeps a picture; this copies it here.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$(stat -c %Y docs/change_while_training.png 2>/dev/null || echo 0)
WORKBENCH_UPDATE_SCREENSHOT=1 python -m pytest -q -p no:cacheprovider -rs tests/browser/test_hot_edit.py
after=$(stat -c %Y docs/change_while_training.png 2>/dev/null || echo 0)
[ "$after" != "$before" ] || { echo "docs/change_while_training.png was not written (test skipped?)" >&2; exit 1; }
echo "wrote docs/change_while_training.png"
