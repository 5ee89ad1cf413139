#!/usr/bin/env bash
# The conformance suite: payonce-conformance (crates/conformance) against three backends, each
# of which must pass every rule of docs/protocol.md:
#   1. examples/express (Node + better-sqlite3), the reference backend in another stack;
#   2. the companion server on SQLite (one process, embedded provider);
#   3. the companion server on PostgreSQL: three processes on one fresh database, one
#      standalone mock provider, requests rotating over the three (races cross processes);
#   4. the production build (no `dev` feature, no --dev) on SQLite, with the flags
#      docs/deploy.md requires, users authenticated by HS256 JWTs, a standalone mock provider.
# Usage: scripts/conformance.sh [express|sqlite|postgres|production]...   (default: all four)
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
targets=("$@"); [ ${#targets[@]} -eq 0 ] && targets=(express sqlite postgres production)
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
  start production "payonce: api listening on" "$run_dir/payonce-server-prod" \
    --addr 127.0.0.1:0 --provider-url "$provider" --database-url "sqlite://$run_dir/prod.db" \
    --webhook-secret "conformance-webhook-secret-0123456789abcdef" \
    --session-secret "conformance-session-secret-0123456789abcdef" \
    --jwt-hs256-secret "$secret" --jwt-issuer $iss --jwt-audience $aud || return 1
  companion_config "$run_dir/production.toml" "$url" "[]" "$provider"
  # Static bearer tokens instead of the dev login, which this build does not have.
  sed -i "s|^login = .*conformance-a.*|value = \"Bearer $ta\"|; s|^login = .*conformance-b.*|value = \"Bearer $tb\"|" \
    "$run_dir/production.toml"
  kit "companion server, production build (no dev feature), SQLite, JWT users" \
    "$run_dir/production.toml"
}

# The production binary first (the `dev` feature off), kept aside; then the dev build that
# every target runs and that puts target/debug/payonce-server back to the dev binary.
cargo build "${locked[@]}" -q -p payonce-server --no-default-features || exit 1
cp "$bin/payonce-server" "$run_dir/payonce-server-prod" || exit 1
cargo build "${locked[@]}" -q -p payonce-server -p payonce-conformance || exit 1
status=0
for t in "${targets[@]}"; do
  case $t in
    express | sqlite | postgres | production) "$t" || status=1 ;;
    *) echo "conformance: unknown target $t (express, sqlite, postgres, production)" >&2; status=1 ;;
  esac
done
exit $status
