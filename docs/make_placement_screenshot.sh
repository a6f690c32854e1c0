#!/usr/bin/env bash
# Regenerate docs/placement_board.png: the browser test of the placement board (a real
# JupyterLab, headless chromium via playwright-core, see .ci/browser-setup.sh) drags the PPO
# learner onto worker 1 and keeps a picture of the board; this copies it into docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
before=$(stat -c %Y docs/placement_board.png 2>/dev/null || echo 0)
WORKBENCH_UPDATE_SCREENSHOT=1 python -m pytest -q -p no:cacheprovider -rs tests/browser/test_placement_board.py
after=$(stat -c %Y docs/placement_board.png 2>/dev/null || echo 0)
[ "$after" != "$before" ] || { echo "docs/placement_board.png was not written (test skipped?)" >&2; exit 1; }
echo "wrote docs/placement_board.png"
