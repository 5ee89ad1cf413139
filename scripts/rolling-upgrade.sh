#!/usr/bin/env bash
# The rolling-upgrade suite (docs/deploy.md "Upgrading", docs/testing.md): the previous release
# and this one serve one PostgreSQL database at once, through this release's migration, under
# new-key pays spread over both and same-key storms; the chaos audit then counts double and
# lost charges, unresolved attempts, wrong customer views and every 5xx that is not a 503
# with Retry-After (crates/chaos, `--upgrade-from`).
#
# usage: scripts/rolling-upgrade.sh [--build-only] [payonce-chaos options...]
#
# "The previous release" is the parent of the newest commit that touched
# crates/server/migrations/, so the run always crosses a real migration; when the working tree
# changes that folder (a migration being written), it is HEAD; PAYONCE_ROLLING_FROM=COMMIT
# names another. Its payonce-server (dev build,
# debug) is built from `git archive` under target/rolling/ with a target directory of its own
# there, once per commit (target/rolling/<commit>/payonce-server), and reused after. Under CI=true a missing build is built,
# never skipped; the build time is printed (a first build is a full debug build of the server).
# Needs PostgreSQL and Redis (as the chaos suite).
set -euo pipefail

# All in a function, so that bash has read the whole script before running any of it.
main() {
  local root migrations old why newest target rolling old_bin t0 build_only=false locked=()
  root=$(cd "$(dirname "$0")/.." && pwd)
  cd "$root"
  [ "${CI:-}" = true ] && locked=(--locked)
  if [ "${1:-}" = --build-only ]; then build_only=true; shift; fi

  git rev-parse --git-dir >/dev/null 2>&1 \
    || { echo "rolling-upgrade: ERROR: needs the git history (the previous release is built from it)" >&2; exit 1; }
  migrations=crates/server/migrations
  if [ -n "${PAYONCE_ROLLING_FROM:-}" ]; then
    old=$(git rev-parse --verify "$PAYONCE_ROLLING_FROM^{commit}")
    why="PAYONCE_ROLLING_FROM=$PAYONCE_ROLLING_FROM"
  elif [ -n "$(git status --porcelain -- "$migrations")" ]; then
    old=$(git rev-parse HEAD)
    why="HEAD: the working tree changes $migrations"
  else
    newest=$(git log -1 --format=%H -- "$migrations")
    old=$(git rev-parse --verify -q "$newest^{commit}^") || {
      echo "rolling-upgrade: ERROR: the parent of $newest is not in this clone (shallow?); git fetch --unshallow" >&2
      exit 1
    }
    why="the parent of $(git log -1 --format='%h (%s)' "$newest"), the newest commit that touched $migrations"
  fi
  target=${CARGO_TARGET_DIR:-$root/target}
  # One source tree and one target directory for every previous release, so that building the
  # next one recompiles the workspace, not its dependencies; one binary per commit.
  rolling=${PAYONCE_ROLLING_CACHE:-$target/rolling}
  old_bin=$rolling/$old/payonce-server
  echo "rolling-upgrade: previous release $(git rev-parse --short "$old"): $why"

  if [ -x "$old_bin" ]; then
    echo "rolling-upgrade: reusing its build $old_bin"
  else
    t0=$SECONDS
    echo "rolling-upgrade: building it in $rolling (a first build compiles every dependency: minutes)"
    if [ "$(cat "$rolling/src.commit" 2>/dev/null)" != "$old" ]; then
      rm -rf "$rolling/src" "$rolling/src.commit"
      mkdir -p "$rolling/src"
      git archive "$old" | tar -x -C "$rolling/src"
      echo "$old" >"$rolling/src.commit"
    fi
    (cd "$rolling/src" && CARGO_TARGET_DIR="$rolling/target" cargo build "${locked[@]}" -p payonce-server)
    mkdir -p "$rolling/$old"
    cp "$rolling/target/debug/payonce-server" "$old_bin.part"
    mv "$old_bin.part" "$old_bin"
    echo "rolling-upgrade: built the previous release in $((SECONDS - t0)) s"
  fi
  $build_only && exit 0

  cargo build "${locked[@]}" -p payonce-server -p payonce-chaos
  exec "$target/debug/payonce-chaos" --upgrade-from "$old_bin" --no-faults --seed 1 --intents 600 "$@"
}

main "$@"
