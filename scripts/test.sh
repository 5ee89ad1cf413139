#!/usr/bin/env bash
# The README test command: runs every suite of payonce, then prints one summary line per suite
# and exits non-zero if any failed. It does NOT stop at the first failure: every suite runs, so
# one run reports them all (suites that need the release package are marked "not run" when its
# build failed). Suites whose folder does not exist are listed as "absent".
#
# usage: scripts/test.sh [SUITE...]   (no SUITE: all of them; `scripts/test.sh --list` names them)
# Naming suites runs only those, plus what they need: build-pkg for smoke, size, ts-check,
# fixtures and www-e2e; services for the suites that use PostgreSQL and Redis.
#
# Under CI=true (exported to every suite, including cargo tests) a missing service, browser or
# tool is a failure with a message, never a skip. Outside CI, missing PostgreSQL/Redis is a
# warning with instructions: the demo does not need them, and the server tests that do say
# SKIPPED outside CI.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# npm's wasm-opt and tsc first, so no system copy (Debian's broken wasm-opt 108) is ever used.
export PATH="$root/tools/node_modules/.bin:$HOME/.cargo/bin:$PATH"
[ -n "${CI+x}" ] && export CI
ci() { [ "${CI:-}" = true ]; }
# Under CI the lockfile must already say what is built.
locked=(); ci && locked=(--locked)

all_suites=(bootstrap services fmt rules-pure clippy clippy-wasm cargo-test prod-build cors-browser
  model chaos rolling-upgrade conformance sdk-browser build-pkg smoke size ts-check fixtures www-e2e)
case "${1:-}" in
  --list) printf '%s\n' "${all_suites[@]}"; exit 0 ;;
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
selected=()
for name in "$@"; do
  [[ " ${all_suites[*]} " == *" $name "* ]] \
    || { echo "test.sh: no suite named '$name'; the suites: ${all_suites[*]}" >&2; exit 2; }
  selected+=("$name")
  case $name in
    smoke|size|ts-check|fixtures|www-e2e) selected+=(build-pkg) ;;
    cargo-test|model|chaos|rolling-upgrade|conformance) selected+=(services) ;;
  esac
done
wanted() { # wanted NAME: true when NAME runs (every suite, unless some were named)
  [ ${#selected[@]} -eq 0 ] && return 0
  [[ " ${selected[*]} " == *" $1 "* ]]
}

summary=()
failed=0
suite() { # suite NAME COMMAND...: runs one suite and records its outcome and duration
  local name=$1 t0=$SECONDS status
  shift
  wanted "$name" || return 0
  printf '\n=== suite %s: %s\n' "$name" "$*"
  if "$@"; then status=ok; else status=FAILED; failed=1; fi
  summary+=("suite $name: $status ($((SECONDS - t0)) s)")
  [ "$status" = ok ]
}
note() { summary+=("suite $1: $2"); } # a suite that did not run, and why
not_run() { note "$1" "FAILED (not run: $2)"; failed=1; }

# --- services --------------------------------------------------------------------------------
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }
start_pg() { pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start; }
start_redis() {
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
}
ensure() { # ensure NAME CHECK START HOW-TO: checks a service, tries to start it once, waits 10 s
  local name=$1 check=$2 start=$3 howto=$4
  if "$check" 2>/dev/null; then echo "services: $name is up"; return 0; fi
  echo "services: $name is down; trying to start it"
  "$start" || true
  for _ in $(seq 20); do "$check" 2>/dev/null && { echo "services: $name started"; return 0; }; sleep 0.5; done
  if ci; then
    echo "services: ERROR: $name is not reachable and CI=true; $howto" >&2
    return 1
  fi
  echo "services: WARNING: $name is not reachable; the server tests that need it skip (CI=true fails them). $howto" >&2
  return 0
}
services() {
  local ok=0
  ensure "PostgreSQL on 127.0.0.1:5432" pg_up start_pg \
    "install PostgreSQL (apt-get install postgresql) with trust auth for user root and a database 'test'" || ok=1
  ensure "Redis on 127.0.0.1:6379" redis_up start_redis \
    "install Redis (apt-get install redis-server) listening on 127.0.0.1:6379" || ok=1
  return $ok
}

# --- suites ----------------------------------------------------------------------------------
browser_tests() {
  if [ -f scripts/sdk-browser-tests.sh ]; then
    bash scripts/sdk-browser-tests.sh
  else
    # Host `cargo test` compiles the browser tests away; only the wasm32 run proves them.
    # An explicit --chromedriver keeps wasm-pack from trying to download one.
    local driver
    driver=$(command -v chromedriver) \
      || { echo "sdk-browser: chromedriver not found; run scripts/bootstrap.sh as root" >&2; return 1; }
    wasm-pack test --headless --chrome --chromedriver "$driver" --mode no-install
  fi
}
# The package's .d.ts with skipLibCheck false under our strict settings and under the
# compilerOptions of the Vite, Next.js and `tsc --init` templates (tools/ts-check/tsconfig.*.json).
ts_check() {
  local config
  for config in tools/ts-check/tsconfig*.json; do
    echo "ts-check: $config"
    tsc --noEmit -p "$config" || return 1
  done
}
rules_pure() {
  # crates/rules holds the server's decisions as pure code: no I/O crate may appear under it.
  local tree
  tree=$(cargo tree "${locked[@]}" -p payonce-rules -e normal --prefix none) || return 1
  if grep -E '^(sqlx|axum|tokio|hyper|reqwest|redis)[ -]' <<<"$tree"; then
    echo "rules-pure: crates/rules depends on the I/O crates above" >&2
    return 1
  fi
}
prod_build() {
  # The production build (no `dev` feature, crates/server/README.md "Dev and production
  # builds"), in release as docs/deploy.md builds it: it links no mock provider, refuses --dev
  # with one line, and starts from docs/deploy.md's environment file and unit against
  # PostgreSQL, Redis and localstripe (the blackbox test that reads the guide, run on it;
  # `--workspace` unifies features as the cargo-test suite does, so nothing is rebuilt).
  local tree out rc target=${CARGO_TARGET_DIR:-target}
  tree=$(cargo tree "${locked[@]}" -p payonce-server --no-default-features -e normal --prefix none) || return 1
  if grep -E '^payonce-mock-provider ' <<<"$tree"; then
    echo "prod-build: payonce-server without the dev feature depends on the mock provider" >&2
    return 1
  fi
  # The unit tests as a production build compiles them (the dev-only parts left out).
  cargo test "${locked[@]}" -q -p payonce-server --no-default-features --lib || return 1
  # target/release: the debug binary the other suites run stays as it is.
  cargo build "${locked[@]}" -q --release -p payonce-server --no-default-features || return 1
  local bin="$target/release/payonce-server"
  out=$("$bin" --dev 2>&1); rc=$?
  echo "prod-build: payonce-server --dev -> exit $rc: $out"
  [ "$rc" -ne 0 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q 'needs a dev build' <<<"$out" || return 1
  PAYONCE_TEST_DEPLOY_BIN="$(cd "$(dirname "$bin")" && pwd)/payonce-server" \
    cargo test "${locked[@]}" -q --workspace --test blackbox \
    startup::the_deploy_guides_environment_file_and_unit_start_a_server_on_stripe -- --exact
}
chaos() {
  # The chaos audit at its small size (docs/chaos.md has the large run): a fixed seed, so a
  # red run names a script and fault schedule that replay. Needs PostgreSQL and Redis.
  if ! { pg_up && redis_up; }; then
    ci && { echo "chaos: ERROR: PostgreSQL and Redis are needed and CI=true" >&2; return 1; }
    echo "chaos: PostgreSQL or Redis not reachable; skipped (CI=true fails instead)" >&2
    return 77 # "skipped", as automake's tests; payonce-chaos itself never exits with it
  fi
  cargo build "${locked[@]}" -p payonce-server -p payonce-chaos \
    && "${CARGO_TARGET_DIR:-target}/debug/payonce-chaos" --seed 1 --intents 600 \
    && chaos_stripe
}
chaos_stripe() {
  # The same audit with --provider stripe, smaller: localstripe (bootstrap.sh installs it)
  # behind the fault proxy, which plays the provider's slowness, lost answers, refusals and
  # outages (crates/chaos/src/stripe.rs).
  local ls=${PAYONCE_TEST_LOCALSTRIPE:-.venv-localstripe/bin/localstripe}
  if [ ! -x "$ls" ]; then
    ci && { echo "chaos: ERROR: localstripe is needed and CI=true: scripts/bootstrap.sh installs it" >&2; return 1; }
    echo "chaos: localstripe missing; the Stripe run skipped (CI=true fails instead)" >&2
    return 0
  fi
  "${CARGO_TARGET_DIR:-target}/debug/payonce-chaos" --provider stripe --seed 1 --intents 200
}
rolling_upgrade() {
  # The previous release (built from git, cached under target/rolling/) and this one serve one
  # PostgreSQL database at once, through this release's migration (scripts/rolling-upgrade.sh).
  if ! { pg_up && redis_up; }; then
    ci && { echo "rolling-upgrade: ERROR: PostgreSQL and Redis are needed and CI=true" >&2; return 1; }
    echo "rolling-upgrade: PostgreSQL or Redis not reachable; skipped (CI=true fails instead)" >&2
    return 77
  fi
  bash scripts/rolling-upgrade.sh
}
www_e2e() {
  # Contract with www/: its package.json has an `e2e` script that runs www/e2e.
  node -e 'process.exit(require("./www/package.json").scripts?.e2e ? 0 : 1)' 2>/dev/null \
    || { echo "www-e2e: www/e2e exists but www/package.json has no \"e2e\" script" >&2; return 1; }
  bash scripts/bootstrap.sh --no-browser # www/'s npm dependencies need pkg/, built by now
  npm --prefix www run e2e
}

t_start=$SECONDS
suite bootstrap bash scripts/bootstrap.sh
suite services services
suite fmt cargo fmt --all --check
suite rules-pure rules_pure
suite clippy cargo clippy "${locked[@]}" --workspace --all-targets -- -D warnings
suite clippy-wasm cargo clippy "${locked[@]}" -p payonce --target wasm32-unknown-unknown -- -D warnings
suite cargo-test cargo test "${locked[@]}" --workspace
suite prod-build prod_build
# A page on another origin pays through the production build (--cors-origin).
suite cors-browser bash scripts/cors-browser.sh
# The model check (docs/model.md), in release (about 10x faster than debug here): the flaw,
# finding and replay tests, then the scenario search with its states, depth and time.
model_check() {
  cargo build "${locked[@]}" -p payonce-server &&
    cargo test "${locked[@]}" --profile model -p payonce-model &&
    cargo run "${locked[@]}" --profile model -q -p payonce-model
}
suite model model_check
skippable_suite() { # skippable_suite NAME FUNCTION: as suite, and exit status 77 is "skipped"
  local name=$1 t0=$SECONDS rc
  wanted "$name" || return 0
  printf '\n=== suite %s\n' "$name"
  "$2"; rc=$?
  case $rc in
    0) summary+=("suite $name: ok ($((SECONDS - t0)) s)") ;;
    77) note "$name" "SKIPPED (PostgreSQL/Redis not reachable; CI=true fails instead)" ;;
    *) summary+=("suite $name: FAILED ($((SECONDS - t0)) s)"); failed=1 ;;
  esac
}
skippable_suite chaos chaos
skippable_suite rolling-upgrade rolling_upgrade
# payonce-conformance against examples/express and the companion server (SQLite; PostgreSQL
# with three instances): every rule of docs/protocol.md must pass on each.
suite conformance bash scripts/conformance.sh
suite sdk-browser browser_tests
pkg_built=false
if suite build-pkg bash scripts/build-pkg.sh; then
  pkg_built=true
  suite smoke bash scripts/smoke.sh pkg
  suite size bash scripts/size-check.sh pkg
  if [ -d tools/ts-check ]; then suite ts-check ts_check; elif wanted ts-check; then note ts-check "absent (no tools/ts-check)"; fi
  suite fixtures bash fixtures/run.sh pkg
else
  for s in smoke size ts-check fixtures; do
    [ "$s" = ts-check ] && [ ! -d tools/ts-check ] && continue
    wanted "$s" && not_run "$s" "build-pkg failed"
  done
fi
if ! wanted www-e2e; then :
elif [ ! -e www/e2e ]; then note www-e2e "absent (no www/e2e)"
elif $pkg_built; then suite www-e2e www_e2e
else not_run www-e2e "build-pkg failed"; fi

printf '\n=== summary (%d s)\n' "$((SECONDS - t_start))"
printf '%s\n' "${summary[@]}"
# One plain closing line, counted over the suites above ("not run" counts as failed: a suite
# that could not run proved nothing).
n_ok=$(printf '%s\n' "${summary[@]}" | grep -c ': ok (' || true)
n_bad=$(printf '%s\n' "${summary[@]}" | grep -cE ': (FAILED|not run)' || true)
printf 'suites: %d passed, %d failed\n' "$n_ok" "$n_bad"
exit $failed
