#!/usr/bin/env bash
# Runs the demo checkout's end-to-end suite: builds the server (debug) unless PAYONCE_SERVER_BIN
# names one, builds pkg/ (if missing) and www/dist, then runs every scenario with node's test
# runner. One scenario at a time: each spawns its own server and Chromium, and the timing-based
# scenarios (a 4 s provider) stay honest on a 2-core machine.
set -euo pipefail
e2e=$(cd "$(dirname "$0")" && pwd)
www=$(dirname "$e2e")
root=$(dirname "$www")

if [ -z "${PAYONCE_SERVER_BIN:-}" ]; then
  locked=()
  [ "${CI:-}" = true ] && locked=(--locked) # under CI the lockfile must already say what is built
  (cd "$root" && cargo build --quiet "${locked[@]}" -p payonce-server)
fi
"$www/build.sh"

if [ "${CI:-}" = true ] && [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  echo "www/e2e: CI=true and Chromium is missing at ${CHROMIUM:-/usr/bin/chromium}; install it with: apt-get install -y chromium" >&2
  exit 1
fi

cd "$www"
exec node --test --test-concurrency=1 --test-reporter=spec "$@" e2e/*.test.mjs
