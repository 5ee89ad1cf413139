#!/usr/bin/env bash
# README demo command: builds and starts the payonce server in dev mode (--dev) on an embedded
# SQLite file, so it needs neither PostgreSQL nor Redis, and prints the URL to open. When the
# demo page exists it is built first (the release package, then www/) and served by the same
# server through --static-dir. Ctrl-C stops it. Set PAYONCE_DEMO_ADDR to use another address.
#
# `scripts/demo.sh --stripe`: the same page against Stripe's emulator instead of the mock
# provider: localstripe (.venv-localstripe/, installed by scripts/bootstrap.sh) on
# PAYONCE_DEMO_LOCALSTRIPE_PORT (8420), the server with --provider stripe, three cards made
# through localstripe's API (approve, decline, 3-D Secure; the numbers never reach payonce),
# its webhooks registered to the server, and the page in its Stripe mode (Stripe.js from
# localstripe's stand-in): docs/demo.md, "Stripe mode".
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

stripe=false
[ "${1:-}" = --stripe ] && stripe=true
page_query=""
if $stripe; then
  ls_bin=${PAYONCE_TEST_LOCALSTRIPE:-$root/.venv-localstripe/bin/localstripe}
  [ -x "$ls_bin" ] || bash scripts/bootstrap.sh --no-browser
  ls_url=http://127.0.0.1:${PAYONCE_DEMO_LOCALSTRIPE_PORT:-8420}
  "$ls_bin" --port "${ls_url##*:}" --from-scratch >.data/localstripe.log 2>&1 &
  ls_pid=$!
  trap 'kill $ls_pid 2>/dev/null' EXIT
  export PAYONCE_STRIPE_SECRET_KEY=sk_test_payonce_demo
  export PAYONCE_STRIPE_WEBHOOK_SECRET=whsec_payonce_demo_0123456789abcdef
  for _ in $(seq 100); do curl -sf -u "$PAYONCE_STRIPE_SECRET_KEY:" "$ls_url/v1/balance" >/dev/null && break; sleep 0.1; done
  pm() { # pm NUMBER LABEL: a card PaymentMethod made at localstripe, as "id:label"
    local id
    id=$(curl -sf -u "$PAYONCE_STRIPE_SECRET_KEY:" "$ls_url/v1/payment_methods" -d type=card \
      -d "card[number]=$1" -d "card[exp_month]=12" -d "card[exp_year]=2034" -d "card[cvc]=123" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
    printf '%s:%s' "$id" "$2"
  }
  methods="$(pm 4242424242424242 Approve),$(pm 4000000000000341 Decline),$(pm 4000002500003155 3-D%20Secure)"
  curl -sf -u "$PAYONCE_STRIPE_SECRET_KEY:" "$ls_url/_config/webhooks/demo" \
    -d "url=http://$addr/webhooks/stripe" -d "secret=$PAYONCE_STRIPE_WEBHOOK_SECRET" >/dev/null
  args+=(--provider stripe --provider-url "$ls_url")
  page_query="?stripe=$ls_url&methods=$methods"
fi

if [ -f www/package.json ]; then
  # The page imports the built package as a user would: build the package, then the page.
  # The mock provider needs no localstripe (nor python3); --stripe does.
  boot=(--no-browser)
  $stripe || boot+=(--no-localstripe)
  bash scripts/bootstrap.sh "${boot[@]}"
  bash scripts/build-pkg.sh
  bash scripts/bootstrap.sh "${boot[@]}" # again: www/'s npm dependencies need pkg/
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
    "payonce: api listening on "*) echo "demo: open ${line#payonce: api listening on }/$page_query (Ctrl-C stops the server)" ;;
  esac
done
echo "demo: the server exited" >&2
exit 1
