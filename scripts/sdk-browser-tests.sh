#!/usr/bin/env bash
# SDK browser tests (wasm-bindgen-test in headless Chromium) against the real companion server:
# builds and starts `payonce-server --dev` on port 0 with a throwaway SQLite file, passes the API
# and provider URLs to the tests at compile time (PAYONCE_TEST_API / PAYONCE_TEST_PROVIDER), runs
# every test binary in tests/, and stops the server however the run ends.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

for tool in wasm-pack chromedriver; do
  command -v "$tool" >/dev/null || { echo "sdk-browser-tests: $tool is missing; run scripts/bootstrap.sh" >&2; exit 1; }
done

# PAYONCE_SERVER_BIN: an already built server binary (e.g. shared with the rest of CI).
server=${PAYONCE_SERVER_BIN:-}
if [ -z "$server" ]; then
  cargo build -q -p payonce-server
  target_dir=$(cargo metadata --format-version 1 --no-deps | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')
  server="$target_dir/debug/payonce-server"
fi

work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# --no-provider-webhooks: these tests drive the SDK through unknown outcomes (202, 409 polls,
# take-over after a provider timeout). With webhooks on, the provider's event settles a slow
# charge within milliseconds and the server answers the first request 200, so the polling
# path would never run. Webhooks are covered by the server's and the demo's suites.
"$server" --dev --addr 127.0.0.1:0 --provider-addr 127.0.0.1:0 --no-provider-webhooks \
  --database-url "sqlite://$work/payonce.db" >"$work/stdout" 2>"$work/stderr" &
server_pid=$!

# The server prints one "listening on" line per listener once it is ready.
api= provider=
for _ in $(seq 1 300); do
  api=$(sed -n 's/^payonce: api listening on \(http:[^ ]*\)$/\1/p' "$work/stdout")
  provider=$(sed -n 's/^payonce: provider listening on \(http:[^ ]*\)$/\1/p' "$work/stdout")
  [ -n "$api" ] && [ -n "$provider" ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "sdk-browser-tests: server exited:" >&2; cat "$work/stderr" >&2; exit 1; }
  sleep 0.1
done
[ -n "$api" ] && [ -n "$provider" ] || { echo "sdk-browser-tests: server did not start" >&2; cat "$work/stderr" >&2; exit 1; }
echo "sdk-browser-tests: api $api, provider $provider"

# Compile-time URLs: a changed value rebuilds the test binaries (option_env! tracks them).
export PAYONCE_TEST_API="$api" PAYONCE_TEST_PROVIDER="$provider"
wasm-pack test --headless --chrome --mode no-install "$@"
