#!/usr/bin/env bash
# Installs what payonce needs and is missing; safe to re-run (each step checks first and is
# skipped when its tool is already there). Prints each install and how long it took.
# Tools come only from crates.io, Debian and npm: nothing downloads a prebuilt binary.
#   - wasm32 target (rustup), wasm-pack and wasm-bindgen-cli (cargo install, crates.io)
#   - chromium + chromium-driver (Debian apt; needs root)
#   - wasm-opt (npm `binaryen`), terser, playwright-core, typescript: `npm ci --prefix tools`
#   - www/ npm dependencies, when www/package.json exists and pkg/ is built
#   - localstripe (PyPI, a Stripe emulator for the Stripe tests; GPL-3, a test tool we run,
#     never ship) in .venv-localstripe/ (python3 -m venv; Debian refuses a global pip)
#   - aiosmtpd (PyPI, the SMTP server of the receipt tests, tools/smtp-sink.py) in .venv-smtp/
# usage: scripts/bootstrap.sh [--no-browser] [--no-localstripe]
#   --no-browser: skip Chromium (the demo); --no-localstripe: skip localstripe and aiosmtpd,
#   and so python3 (the demo on the mock provider)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

fail() { echo "bootstrap: ERROR: $*" >&2; exit 1; }

browser=true
localstripe=true
for arg in "$@"; do
  case $arg in
    --no-browser) browser=false ;;
    --no-localstripe) localstripe=false ;;
    *) fail "unknown option $arg (usage: scripts/bootstrap.sh [--no-browser] [--no-localstripe])" ;;
  esac
done

# The wasm-bindgen CLI must equal the crate pinned in Cargo.lock, or wasm-pack tries to
# download one (which fails here). Read the pin from the lockfile, never from a constant.
wb_version=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
[ -n "$wb_version" ] || fail "no wasm-bindgen entry in Cargo.lock"

step() { # step NAME CHECK-FUNCTION INSTALL-FUNCTION
  local name=$1 check=$2 install=$3 t0=$SECONDS
  if "$check" >/dev/null 2>&1; then echo "bootstrap: $name: present"; return 0; fi
  echo "bootstrap: $name: installing ..."
  "$install"
  "$check" >/dev/null 2>&1 || fail "$name: still missing after installing"
  echo "bootstrap: $name: installed in $((SECONDS - t0)) s"
}

# Prerequisites this script does not install: say what to do instead of failing obscurely.
command -v cargo >/dev/null && command -v rustup >/dev/null \
  || fail "cargo/rustup not found; install Rust with rustup (https://rustup.rs)"
command -v node >/dev/null && command -v npm >/dev/null \
  || fail "node/npm not found; install Node.js 20 or newer"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || fail "Node.js $(node --version) is too old; playwright-core needs 20 or newer"

has_wasm_target() { rustup target list --installed | grep -qx wasm32-unknown-unknown; }
add_wasm_target() { rustup target add wasm32-unknown-unknown; }
step "wasm32-unknown-unknown target" has_wasm_target add_wasm_target

has_bindgen() { wasm-bindgen --version | grep -qx "wasm-bindgen $wb_version"; }
# No --locked: the CLI's own lockfile names a crate version the registry lacks (docs/toolchain.md).
install_bindgen() { cargo install --force wasm-bindgen-cli --version "$wb_version"; }
step "wasm-bindgen-cli $wb_version (= Cargo.lock)" has_bindgen install_bindgen

has_wasm_pack() { command -v wasm-pack; }
install_wasm_pack() { cargo install --locked wasm-pack; }
step "wasm-pack" has_wasm_pack install_wasm_pack

has_chromium() { command -v chromium && command -v chromedriver; }
install_chromium() {
  local sudo=
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null \
      || fail "chromium and chromedriver are missing and installing them needs root; run as root:
    apt-get update && apt-get install -y chromium chromium-driver"
    sudo="sudo -n"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver
}
if $browser; then
  step "chromium + chromium-driver (Debian)" has_chromium install_chromium
fi

# wasm-opt comes from npm's binaryen: Debian's binaryen (wasm-opt 108) silently breaks the
# module (docs/toolchain.md, rule 3). `npm ci` installs exactly tools/package-lock.json; the
# marker npm writes is newer than the lockfile only when that install finished.
has_tools() {
  test -x tools/node_modules/.bin/wasm-opt && test -x tools/node_modules/.bin/tsc \
    && test -x tools/node_modules/.bin/terser \
    && test -d tools/node_modules/playwright-core \
    && test tools/node_modules/.package-lock.json -nt tools/package-lock.json
}
install_tools() { npm ci --prefix tools --no-audit --no-fund; }
step "npm tools (binaryen wasm-opt, terser, playwright-core, typescript)" has_tools install_tools

# The Stripe suites start it per test (crates/testkit/src/localstripe.rs finds it here).
localstripe_version=1.15.10
has_localstripe() {
  # Not `| grep -q`: under pipefail its early exit fails pip with SIGPIPE, and a present
  # localstripe reads as missing.
  [ "$(.venv-localstripe/bin/pip show localstripe 2>/dev/null | sed -n 's/^Version: //p')" = "$localstripe_version" ] \
    && test -x .venv-localstripe/bin/localstripe
}
install_localstripe() {
  command -v python3 >/dev/null || fail "python3 not found; install it (apt-get install python3 python3-venv)"
  python3 -m venv .venv-localstripe \
    || fail "python3 -m venv failed; install the venv module (apt-get install python3-venv)"
  .venv-localstripe/bin/pip install --quiet --disable-pip-version-check "localstripe==$localstripe_version"
}
if $localstripe; then
  step "localstripe $localstripe_version (PyPI, .venv-localstripe)" has_localstripe install_localstripe
fi

# The receipt tests start it per test (crates/testkit/src/smtp.rs runs tools/smtp-sink.py
# with this venv's Python).
aiosmtpd_version=1.4.6
has_aiosmtpd() {
  [ "$(.venv-smtp/bin/pip show aiosmtpd 2>/dev/null | sed -n 's/^Version: //p')" = "$aiosmtpd_version" ]
}
install_aiosmtpd() {
  command -v python3 >/dev/null || fail "python3 not found; install it (apt-get install python3 python3-venv)"
  python3 -m venv .venv-smtp \
    || fail "python3 -m venv failed; install the venv module (apt-get install python3-venv)"
  .venv-smtp/bin/pip install --quiet --disable-pip-version-check "aiosmtpd==$aiosmtpd_version"
}
if $localstripe; then
  step "aiosmtpd $aiosmtpd_version (PyPI, .venv-smtp)" has_aiosmtpd install_aiosmtpd
fi

# www/ installs the SDK from ../pkg (a `file:` dependency), so its npm install needs the built
# package; before scripts/build-pkg.sh has run it is left for later (test.sh and demo.sh call
# this script again after building).
if [ -f www/package.json ] && [ ! -f pkg/package.json ]; then
  echo "bootstrap: npm dependencies of www/: later (they need pkg/, built by scripts/build-pkg.sh)"
elif [ -f www/package.json ]; then
  has_www() {
    test -e www/node_modules/payonce/package.json && test www/node_modules/.package-lock.json -nt www/package.json \
      && { [ ! -f www/package-lock.json ] || test www/node_modules/.package-lock.json -nt www/package-lock.json; }
  }
  install_www() {
    if [ -f www/package-lock.json ]; then npm ci --prefix www --no-audit --no-fund
    else npm install --prefix www --no-audit --no-fund; fi
  }
  step "npm dependencies of www/" has_www install_www
fi
echo "bootstrap: ready"
