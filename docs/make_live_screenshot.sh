#!/usr/bin/env bash
# Regenerate docs/live_view.png: the quickstart in a real JupyterLab (headless chromium via
# playwright-core, see .ci/browser-setup.sh), run to 120 iterations, live view on screen.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
python - "$work" <<'PY'
import json, sys
nb = json.load(open("notebooks/quickstart.ipynb"))
for cell in nb["cells"]:
    if cell["cell_type"] == "code":
        cell["source"] = "".join(cell["source"]).replace("--iterations {cfg.iterations}", "--iterations 120")
json.dump(nb, open(f"{sys.argv[1]}/quickstart.ipynb", "w"))
PY
jupyter lab --allow-root --no-browser --port 8899 --ip 127.0.0.1 --ServerApp.token='' \
    --ServerApp.password='' --ServerApp.root_dir="$work" > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server; rm -rf "$work"' EXIT
sleep 10
(cd tests/browser && node shoot_notebook.mjs "http://127.0.0.1:8899/lab/tree/quickstart.ipynb" \
    "$(pwd)/../../docs/live_view.png" 35)
