#!/usr/bin/env bash
# Release smoke test: loads a built package (default pkg/, or $1) in headless Chromium and checks
# that version() answers the Cargo version. Build the package first with scripts/build-pkg.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib.sh"
pkg=$(realpath -m "${1:-$root/pkg}")
[ -f "$pkg/payonce.js" ] || { echo "smoke: no package at $pkg; run scripts/build-pkg.sh" >&2; exit 1; }
expected=$(cd "$root" && payonce_version)
node "$root/tools/smoke.mjs" "$pkg" "$expected"
