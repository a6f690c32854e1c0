#!/usr/bin/env bash
# Regenerate a live-view picture: a notebook in a real JupyterLab (headless chromium via
# playwright-core, see .ci/browser-setup.sh), run top to bottom, live view on screen.
#   docs/make_live_screenshot.sh                       # docs/live_view.png: the quickstart, 120 iterations
#   docs/make_live_screenshot.sh grpo docs/live_view_grpo.png 60 40    # NOTEBOOK OUT ITERATIONS WAIT_S
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-quickstart}
out=${2:-docs/live_view.png}
iterations=${3:-120}
wait_s=${4:-35}
work=$(mktemp -d)
python - "$work" "$name" "$iterations" <<'PY'
import json, sys
work, name, iterations = sys.argv[1:]
nb = json.load(open(f"notebooks/{name}.ipynb"))
for cell in nb["cells"]:
    if cell["cell_type"] == "code":
        cell["source"] = "".join(cell["source"]).replace("--iterations {cfg.iterations}", f"--iterations {iterations}")
json.dump(nb, open(f"{work}/{name}.ipynb", "w"))
PY
# no "notified about Jupyter news?" toast over the picture: a private settings dir (outside
# the notebook's folder, which the file browser shows) says no
settings=$(mktemp -d)
mkdir -p "$settings/@jupyterlab/apputils-extension"
echo '{"fetchNews": "false", "checkForUpdates": false}' \
    > "$settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings"
JUPYTERLAB_SETTINGS_DIR="$settings" jupyter lab --allow-root --no-browser --port 8899 --ip 127.0.0.1 --ServerApp.token='' \
    --ServerApp.password='' --ServerApp.root_dir="$work" > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server; rm -rf "$work" "$settings"' EXIT
sleep 10
(cd tests/browser && node shoot_notebook.mjs "http://127.0.0.1:8899/lab/tree/$name.ipynb" \
    "$(pwd)/../../$out" "$wait_s")
