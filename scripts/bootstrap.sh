#!/usr/bin/env bash
# Installs what payonce needs and is missing; safe to re-run (each step checks first).
# Tools come only from crates.io, Debian and npm: nothing downloads a prebuilt binary.
set -euo pipefail
cd "$(dirname "$0")/.."

# The wasm-bindgen CLI must equal the crate pinned in Cargo.lock, or wasm-pack tries to
# download one (which fails offline). Read the pin from the lockfile, not from a constant.
WB_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/,""); print; exit}' Cargo.lock 2>/dev/null || true)
WB_VERSION=${WB_VERSION:-0.2.130}

step() { # step NAME CHECK-CMD INSTALL-CMD
  local name=$1 check=$2 install=$3
  if eval "$check" >/dev/null 2>&1; then return 0; fi
  local t0=$SECONDS
  echo "bootstrap: installing $name ..."
  eval "$install"
  echo "bootstrap: installed $name in $((SECONDS - t0)) s"
}

step "wasm32 target" \
  "rustup target list --installed | grep -qx wasm32-unknown-unknown" \
  "rustup target add wasm32-unknown-unknown"
step "wasm-bindgen-cli $WB_VERSION" \
  "wasm-bindgen --version | grep -q ' $WB_VERSION\$'" \
  "cargo install --force wasm-bindgen-cli --version $WB_VERSION"
step "wasm-pack" \
  "command -v wasm-pack" \
  "cargo install --locked wasm-pack"
step "chromium + chromium-driver (Debian)" \
  "command -v chromium && command -v chromedriver" \
  "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver"
# wasm-opt from npm's binaryen: Debian's binaryen (wasm-opt 108) silently breaks the module.
step "npm dependencies (tools/, binaryen wasm-opt, playwright-core, typescript)" \
  "test -x tools/node_modules/.bin/wasm-opt && test -d tools/node_modules/playwright-core && test tools/node_modules/.package-lock.json -nt tools/package.json" \
  "npm ci --prefix tools --no-audit --no-fund"
if [ -f www/package.json ]; then
  step "npm dependencies of www" \
    "test -d www/node_modules/vite && test www/node_modules/.package-lock.json -nt www/package.json" \
    "npm install --prefix www --no-audit --no-fund"
fi
echo "bootstrap: ready"
