#!/usr/bin/env bash
# Sets up the browser tests (tests/browser): Debian's chromium and playwright-core (which
# drives an existing browser and downloads none). Idempotent: re-running skips what is there.
# Usage: .ci/browser-setup.sh        (as root, or with sudo available for apt-get)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

if [ ! -x /usr/bin/chromium ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
fi

# iproute2's `ip`: tests/hosts builds hosts in network namespaces (skipped without it)
if ! command -v ip >/dev/null; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends iproute2
fi

command -v node >/dev/null || { echo "browser-setup: node (18+) is required" >&2; exit 1; }
cd tests/browser
want=$(node -p "require('./package-lock.json').packages['node_modules/playwright-core'].version")
have=$(node -p "try { require('playwright-core/package.json').version } catch (e) { '' }")
if [ "$want" != "$have" ]; then
    npm ci --no-audit --no-fund
fi
echo "browser-setup: chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), playwright-core $(node -p "require('playwright-core/package.json').version") ready in $(( $(date +%s) - start )) s"
