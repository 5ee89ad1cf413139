#!/usr/bin/env bash
# The conformance suite: payonce-conformance (crates/conformance) against three backends, each
# of which must pass every rule of docs/protocol.md:
#   1. examples/express (Node + better-sqlite3), the reference backend in another stack;
#   2. the companion server on SQLite (one process, embedded provider);
#   3. the companion server on PostgreSQL: three processes on one fresh database, one
#      standalone mock provider, requests rotating over the three (races cross processes);
#   4. the production build (no `dev` feature, no --dev) on SQLite, with the flags
#      docs/deploy.md requires, users authenticated by HS256 JWTs only (--no-session-tokens),
#      a standalone mock provider on loopback (plain http:// is allowed there);
#   5. the companion server on SQLite with --provider stripe against localstripe (the Stripe
#      emulator bootstrap.sh installs in .venv-localstripe/), its payment methods made through
#      localstripe's API, the ledger its own list of PaymentIntents
#      (scripts/localstripe-ledger.py). No localstripe card stays processing, so the five
#      pending-method rules say NOT CHECKED with that reason.
# Usage: scripts/conformance.sh [express|sqlite|postgres|production|stripe]...   (default: all five)
#
# The companion server runs with --no-provider-webhooks: its mock provider records a slow
# charge at once and would settle it by webhook at once, so nothing would stay processing
# long enough for the kit to probe. Under CI=true a missing PostgreSQL or Node fails the
# suite; outside CI that target is skipped with a warning.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
ci() { [ "${CI:-}" = true ]; }
locked=(); ci && locked=(--locked)
targets=("$@"); [ ${#targets[@]} -eq 0 ] && targets=(express sqlite postgres production stripe)
pg_admin=${PAYONCE_TEST_PG_URL:-postgres://root@127.0.0.1:5432/test}
bin=${CARGO_TARGET_DIR:-$root/target}/debug
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/payonce-conformance.XXXXXX")
pids=()
pg_db=""
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  if [ -n "$pg_db" ]; then
    psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1
  fi
  rm -rf "$run_dir"
}
trap cleanup EXIT

# start NAME PATTERN CMD...: starts CMD in the background (stdout to NAME.out, stderr to
# NAME.err) and sets `url` from its first stdout line matching "PATTERN http://…". Not in a
# subshell, so its pid lands in `pids` for the cleanup.
url=""
start() {
  local name=$1 pattern=$2
  shift 2
  "$@" >"$run_dir/$name.out" 2>"$run_dir/$name.err" &
  pids+=($!)
  for _ in $(seq 300); do
    url=$(sed -n "s|^$pattern \(http://[0-9.:]*\).*|\1|p" "$run_dir/$name.out" | head -n1)
    if [ -n "$url" ]; then return 0; fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "conformance: $name did not start; its stderr:" >&2
  tail -n 20 "$run_dir/$name.err" >&2
  return 1
}

# The parts of a configuration the companion server's targets share.
companion_config() { # companion_config FILE BASE_URL ALSO_TOML_ARRAY PROVIDER_URL
  cat >"$1" <<EOF
base_url = "$2"
also = $3
[users.a]
login = { path = "/dev/sessions", body = '{"userId":"conformance-a-{run}"}', pointer = "/token", prefix = "Bearer " }
[users.b]
login = { path = "/dev/sessions", body = '{"userId":"conformance-b-{run}"}', pointer = "/token", prefix = "Bearer " }
[order]
path = "/orders"
body = '{"items":[{"sku":"sticker-pack","quantity":1}]}'
[cart]
method = "PATCH"
path = "/orders/{order}/cart"
body = '{"address":"1 Conformance Road"}'
[methods]
approve = "pm_card_approve"
decline = "pm_card_decline"
pending = "pm_card_slow"
[ledger]
url = "$4/ledger?orderId={order}"
EOF
}

kit() { # kit NAME CONFIG
  echo "--- conformance: $1"
  "$bin/payonce-conformance" --config "$2"
}

express() {
  if ! command -v node >/dev/null; then
    ci && { echo "conformance: node is required (CI=true)" >&2; return 1; }
    echo "conformance: WARNING: node not found; examples/express skipped" >&2
    return 0
  fi
  if [ ! -d examples/express/node_modules/better-sqlite3 ]; then
    npm ci --prefix examples/express --no-audit --no-fund || return 1
  fi
  start express "payonce-example: listening on" \
    node examples/express/server.js --port 0 --db "$run_dir/express.db" || return 1
  cat >"$run_dir/express.toml" <<EOF
base_url = "$url"
[users.a]
value = "Bearer conformance-a"
[users.b]
value = "Bearer conformance-b"
[order]
path = "/orders"
body = '{"items":[{"sku":"sticker-pack","quantity":1}]}'
[cart]
method = "PATCH"
path = "/orders/{order}/cart"
body = '{"address":"1 Conformance Road"}'
[methods]
approve = "pm_approve"
decline = "pm_decline"
pending = "pm_pending"
[ledger]
url = "$url/ledger?orderId={order}"
EOF
  kit "examples/express (SQLite)" "$run_dir/express.toml"
}

sqlite() {
  local api provider
  start sqlite "payonce: api listening on" "$bin/payonce-server" --dev --no-provider-webhooks \
    --addr 127.0.0.1:0 --provider-addr 127.0.0.1:0 --database-url "sqlite://$run_dir/companion.db" \
    --session-secret "conformance-session-secret-$RANDOM$RANDOM" || return 1
  api=$(sed -n 's|^payonce: api listening on \(http://[0-9.:]*\).*|\1|p' "$run_dir/sqlite.out")
  provider=$(sed -n 's|^payonce: provider listening on \(http://[0-9.:]*\).*|\1|p' "$run_dir/sqlite.out")
  companion_config "$run_dir/sqlite.toml" "$api" "[]" "$provider"
  kit "companion server, SQLite" "$run_dir/sqlite.toml"
}

postgres() {
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    ci && { echo "conformance: PostgreSQL on 127.0.0.1:5432 is required (CI=true)" >&2; return 1; }
    echo "conformance: WARNING: PostgreSQL not reachable; the three-instance target skipped" >&2
    return 0
  fi
  pg_db="payonce_conformance_$(date +%s)_$$"
  psql "$pg_admin" -qc "CREATE DATABASE $pg_db" >/dev/null || return 1
  local db_url=${pg_admin%/*}/$pg_db secret="conformance-session-secret-$RANDOM$RANDOM" provider apis=()
  start provider "payonce: provider listening on" \
    "$bin/payonce-server" mock-provider --addr 127.0.0.1:0 || return 1
  provider=$url
  # One at a time: the first runs the migrations.
  for i in 0 1 2; do
    start "api$i" "payonce: api listening on" "$bin/payonce-server" --dev \
      --addr 127.0.0.1:0 --provider-url "$provider" --database-url "$db_url" \
      --session-secret "$secret" || return 1
    apis+=("$url")
  done
  companion_config "$run_dir/postgres.toml" "${apis[0]}" "[\"${apis[1]}\", \"${apis[2]}\"]" "$provider"
  kit "companion server, PostgreSQL, 3 instances" "$run_dir/postgres.toml"
}

production() {
  local secret iss=https://id.conformance.test aud=payonce-conformance provider ta tb
  secret="conformance-jwt-secret-$RANDOM$RANDOM-0123456789abcdef"
  start provider "payonce: provider listening on" \
    "$bin/payonce-server" mock-provider --addr 127.0.0.1:0 || return 1
  provider=$url
  ta=$("$bin/payonce-server" mint-jwt --secret "$secret" --issuer $iss --audience $aud \
    --user "conformance-a-$RANDOM" --ttl-secs 600) || return 1
  tb=$("$bin/payonce-server" mint-jwt --secret "$secret" --issuer $iss --audience $aud \
    --user "conformance-b-$RANDOM" --ttl-secs 600) || return 1
  # As a deployment does (docs/deploy.md, "Upgrading"): migrate as a step, then start; the
  # start only checks the schema.
  "$run_dir/payonce-server-prod" migrate --database-url "sqlite://$run_dir/prod.db" || return 1
  start production "payonce: api listening on" "$run_dir/payonce-server-prod" \
    --addr 127.0.0.1:0 --provider mock --provider-url "$provider" --database-url "sqlite://$run_dir/prod.db" \
    --webhook-secret "conformance-webhook-secret-0123456789abcdef" --no-session-tokens --mailer none \
    --jwt-hs256-secret "$secret" --jwt-issuer $iss --jwt-audience $aud || return 1
  companion_config "$run_dir/production.toml" "$url" "[]" "$provider"
  # Static bearer tokens instead of the dev login, which this build does not have.
  sed -i "s|^login = .*conformance-a.*|value = \"Bearer $ta\"|; s|^login = .*conformance-b.*|value = \"Bearer $tb\"|" \
    "$run_dir/production.toml"
  kit "companion server, production build (no dev feature), SQLite, JWT users" \
    "$run_dir/production.toml"
}

stripe() {
  local ls=${PAYONCE_TEST_LOCALSTRIPE:-$root/.venv-localstripe/bin/localstripe} port base api
  local key=sk_test_payonce_conformance whsec="whsec_conformance_$RANDOM$RANDOM" approve decline
  if [ ! -x "$ls" ]; then
    ci && { echo "conformance: localstripe is required (CI=true): scripts/bootstrap.sh installs it" >&2; return 1; }
    echo "conformance: WARNING: localstripe not found at $ls; the Stripe target skipped" >&2
    return 0
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$ls" --port "$port" --from-scratch >"$run_dir/localstripe.out" 2>&1 &
  pids+=($!)
  base=http://127.0.0.1:$port
  for _ in $(seq 100); do curl -sf -u "$key:" "$base/v1/payment_intents?limit=1" >/dev/null && break; sleep 0.1; done
  # Payment methods are made at the provider (in a browser, Stripe.js does it): payonce
  # never sees a card number.
  pm() {
    curl -sf -u "$key:" "$base/v1/payment_methods" -d type=card -d "card[number]=$1" \
      -d "card[exp_month]=12" -d "card[exp_year]=2034" -d "card[cvc]=123" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
  }
  approve=$(pm 4242424242424242) && decline=$(pm 4000000000000341) || {
    echo "conformance: localstripe did not make payment methods; its log:" >&2
    tail -n 20 "$run_dir/localstripe.out" >&2
    return 1
  }
  start stripe "payonce: api listening on" "$bin/payonce-server" --dev --provider stripe \
    --provider-url "$base" --stripe-secret-key "$key" --stripe-webhook-secret "$whsec" \
    --addr 127.0.0.1:0 --database-url "sqlite://$run_dir/stripe.db" \
    --session-secret "conformance-session-secret-$RANDOM$RANDOM" || return 1
  api=$url
  companion_config "$run_dir/stripe.toml" "$api" "[]" "$base"
  # The ledger is localstripe's own list (no search by order: the script walks it); the
  # pending method is the approving card, which settles at once (hence NOT CHECKED).
  sed -i "s|^approve = .*|approve = \"$approve\"|; s|^decline = .*|decline = \"$decline\"|;
    s|^pending = .*|pending = \"$approve\"|; s|^url = .*|command = \"STRIPE_SECRET_KEY=$key python3 $root/scripts/localstripe-ledger.py $base {order}\"|" \
    "$run_dir/stripe.toml"
  kit "companion server, SQLite, --provider stripe against localstripe" "$run_dir/stripe.toml"
}

# The production binary first (the `dev` feature off), kept aside; then the dev build that
# every target runs and that puts target/debug/payonce-server back to the dev binary.
cargo build "${locked[@]}" -q -p payonce-server --no-default-features || exit 1
cp "$bin/payonce-server" "$run_dir/payonce-server-prod" || exit 1
cargo build "${locked[@]}" -q -p payonce-server -p payonce-conformance || exit 1
status=0
for t in "${targets[@]}"; do
  case $t in
    express | sqlite | postgres | production | stripe) "$t" || status=1 ;;
    *) echo "conformance: unknown target $t (express, sqlite, postgres, production, stripe)" >&2; status=1 ;;
  esac
done
exit $status
