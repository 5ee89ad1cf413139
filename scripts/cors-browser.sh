#!/usr/bin/env bash
# The CORS browser test (scripts/cors-browser.mjs): a page on another origin pays through the
# production build (no `dev` feature) started with --cors-origin, in headless Chromium. Builds
# the production binary and keeps it aside, then the dev build (for `mock-provider` and
# `mint-jwt`), which also puts target/debug/payonce-server back to the dev binary.
# Under CI=true a missing Chromium is a failure; elsewhere the test is skipped with the reason.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  [ "${CI:-}" = true ] && { echo "cors-browser: CI=true and no Chromium at $chromium" >&2; exit 1; }
  echo "cors-browser: no Chromium at $chromium (apt-get install chromium); skipped" >&2
  exit 0
fi
locked=(); [ "${CI:-}" = true ] && locked=(--locked)
bin=${CARGO_TARGET_DIR:-$root/target}/debug
dir=$(mktemp -d "${TMPDIR:-/tmp}/payonce-cors.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cargo build "${locked[@]}" -q -p payonce-server --no-default-features
cp "$bin/payonce-server" "$dir/payonce-server-prod"
cargo build "${locked[@]}" -q -p payonce-server
CHROMIUM=$chromium node scripts/cors-browser.mjs "$dir/payonce-server-prod" "$bin/payonce-server"
