#!/usr/bin/env bash
# Builds the demo checkout into www/dist (served by `payonce-server --static-dir www/dist`).
# The page installs the SDK from ../pkg like a user installs it from npm, so pkg/ must exist:
# it is built here (scripts/build-pkg.sh) when missing, or when PAYONCE_REBUILD_PKG=1.
set -euo pipefail
www=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$www")
cd "$www"

if [ "${PAYONCE_REBUILD_PKG:-0}" = 1 ] || [ ! -f "$root/pkg/package.json" ]; then
  [ -x "$root/scripts/build-pkg.sh" ] || { echo "www/build.sh: pkg/ is missing and scripts/build-pkg.sh is not there" >&2; exit 1; }
  "$root/scripts/build-pkg.sh"
fi

# npm install only when node_modules is missing or older than the manifest/lockfile. The SDK
# is a `file:` dependency, i.e. a symlink to ../pkg, so a rebuilt pkg/ needs no reinstall.
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package.json -nt "$stamp" ] || { [ -f package-lock.json ] && [ package-lock.json -nt "$stamp" ]; } \
   || [ ! -e node_modules/payonce/package.json ]; then
  npm install --no-audit --no-fund
fi

npx --no-install vite build --logLevel warn
echo "www/build.sh: built $www/dist"
