#!/usr/bin/env bash
# README demo command: builds and starts the payonce server in dev mode (--dev) on an embedded
# SQLite file, so it needs neither PostgreSQL nor Redis, and prints the URL to open. When the
# demo page exists it is built first (the release package, then www/) and served by the same
# server through --static-dir. Ctrl-C stops it. Set PAYONCE_DEMO_ADDR to use another address.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$root/tools/node_modules/.bin:$HOME/.cargo/bin:$PATH"
addr=${PAYONCE_DEMO_ADDR:-127.0.0.1:8080}
mkdir -p .data
args=(--addr "$addr" --dev --database-url "sqlite://.data/payonce.db")
# One session secret kept beside the demo database, so a restarted demo server (e.g. after the
# page's "Crash after charge") still accepts the page's session and the page can finish checking.
# Passed through the environment, not argv, so it is not printed or visible in `ps`.
if [ -z "${PAYONCE_SESSION_SECRET:-}" ]; then
  [ -s .data/session-secret ] || (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >.data/session-secret)
  PAYONCE_SESSION_SECRET=$(cat .data/session-secret)
  export PAYONCE_SESSION_SECRET
fi

if [ -f www/package.json ]; then
  # The page imports the built package as a user would: build the package, then the page.
  bash scripts/bootstrap.sh --no-browser
  bash scripts/build-pkg.sh
  bash scripts/bootstrap.sh --no-browser # again: www/'s npm dependencies need pkg/
  npm --prefix www run build
  args+=(--static-dir "$root/www/dist")
elif [ -f www/index.html ]; then
  args+=(--static-dir "$root/www")
fi

echo "demo: starting payonce-server ${args[*]}"
# The server prints one `payonce: api listening on URL` line per listener (README, CLI contract);
# echo everything and point at the API URL once it is up.
cargo run -p payonce-server -- "${args[@]}" | while IFS= read -r line; do
  printf '%s\n' "$line"
  case $line in
    "payonce: api listening on "*) echo "demo: open ${line#payonce: api listening on } (Ctrl-C stops the server)" ;;
  esac
done
echo "demo: the server exited" >&2
exit 1
