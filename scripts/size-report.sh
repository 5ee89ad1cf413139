#!/usr/bin/env bash
# Where the package's bytes are: the gzip figures of scripts/size-check.sh, then twiggy's
# breakdown of the module, by item, with what each item is for. docs/size.md's "Breakdown"
# section is this script's output; rerun it after a change and paste the result there.
#
# twiggy needs function names, which the shipped module does not carry: the module is rebuilt
# here from cargo's output exactly as scripts/build-pkg.sh builds it (wasm-bindgen, then
# wasm-opt with the same passes), but with `-g`, which keeps the names through wasm-opt. The
# figures are the items' sizes in that module (names section aside, the same code).
#
# usage: scripts/size-report.sh [PKG_DIR] [N]   (default pkg/, 25 rows)
#   PKG_DIR is built first unless SIZE_REPORT_NO_BUILD=1 (then it must be built already).
#   SIZE_REPORT_KEEP=FILE keeps the named module there, for `twiggy diff OLD NEW` (docs/size.md).
# twiggy is installed with `cargo install --locked twiggy` (crates.io) when it is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pkg=$(realpath -m "${1:-pkg}")
rows=${2:-25}
wasm_opt="$root/tools/node_modules/.bin/wasm-opt"
[ -x "$wasm_opt" ] || { echo "size-report: $wasm_opt is missing; run scripts/bootstrap.sh" >&2; exit 1; }
command -v twiggy >/dev/null || cargo install --locked twiggy
command -v wasm-bindgen >/dev/null || { echo "size-report: wasm-bindgen is missing; run scripts/bootstrap.sh" >&2; exit 1; }

if [ "${SIZE_REPORT_NO_BUILD:-0}" != 1 ]; then
  bash scripts/build-pkg.sh "$pkg" >/dev/null
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')
raw="$target_dir/wasm32-unknown-unknown/wasm-release/payonce.wasm"
[ -f "$raw" ] || { echo "size-report: $raw is missing; run scripts/build-pkg.sh" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wasm-bindgen --target web --out-dir "$work" --out-name payonce "$raw"
# The passes of scripts/build-pkg.sh, plus -g (names kept).
"$wasm_opt" -g --low-memory-unused --zero-filled-memory --flatten --rereloop -Os -Os --converge \
  "$work/payonce_bg.wasm" -o "$work/named.wasm"

[ -n "${SIZE_REPORT_KEEP:-}" ] && cp "$work/named.wasm" "$SIZE_REPORT_KEEP"

# What an item is for, by the first pattern its name matches (awk regexes, checked in order).
purpose() {
  awk -v rows="$1" '
    BEGIN {
      n = 0
      p[++n] = "function names";                         w[n] = "names (twiggy only; the shipped module has none)"
      p[++n] = "table\\[0\\]";                           w[n] = "everything reached only through function pointers: futures, closures, vtables"
      p[++n] = "spawn_promise|web::pay::|web::pay\\b";   w[n] = "a pay or cancel call (its future: the pay loop, waits, events)"
      p[++n] = "web::cancel";                            w[n] = "cancel(): the cancel request and its outcome"
      p[++n] = "start_pay|PayonceClient.*pay|payonceclient_pay"; w[n] = "pay(): checkout checks, double-click join"
      p[++n] = "payonceclient_create|PayonceClient::create|retry_policy"; w[n] = "create(): option checks and parsing"
      p[++n] = "payonceclient_pendingAttempt|pending_attempt"; w[n] = "pendingAttempt(): the stored attempt as a JS object"
      p[++n] = "payonceclient_clearAll|clear_all";       w[n] = "clearAll(): every stored attempt and receipt"
      p[++n] = "web::error|PayonceError";                w[n] = "PayonceError from an SdkError (code, message, problem members)"
      p[++n] = "web::send|web::io::exchange|web::io::post|request_headers"; w[n] = "one request: fetch, timeout, headers, answer, its events"
      p[++n] = "web::io::try_lock|web::io::lock|held_locks|order_lock"; w[n] = "Web Locks (tabs pay an order one at a time)"
      p[++n] = "web::tabs";                              w[n] = "tabs: BroadcastChannel receipts, claims, duplicate tabs"
      p[++n] = "web::store|Store::";                     w[n] = "sessionStorage / memory attempts"
      p[++n] = "web::value::from_js";                    w[n] = "the checkout read through serde-wasm-bindgen (the CheckoutSnapshot derive)"
      p[++n] = "web::value::(payment_in|pay_response|cancel_response)"; w[n] = "answers of the server, read member by member"
      p[++n] = "web::value|Kind::";                      w[n] = "JS values: option checks, messages"
      p[++n] = "Observer";                               w[n] = "onEvent / debug events"
      p[++n] = "core::flow|PayFlow";                     w[n] = "the pay loop (sans-IO core)"
      p[++n] = "core::classify";                         w[n] = "what an answer means"
      p[++n] = "core::retry|Schedule|Timings";           w[n] = "backoff, budget, deadline, timing bounds"
      p[++n] = "core::error|SdkError|Warning";           w[n] = "error and warning messages"
      p[++n] = "core::attempt|core::receipt";            w[n] = "stored attempts, receipts, claims"
      p[++n] = "serde_wasm_bindgen|serde::|_serde::|Deserialize|Serialize|Visitor"; w[n] = "serde + serde-wasm-bindgen (wire and stored types)"
      p[++n] = "talc|dlmalloc|alloc::|__rust_alloc|__rdl_|__rg_"; w[n] = "allocator (talc) and Vec/String growth"
      p[++n] = "core::fmt|panic|Display|Debug";          w[n] = "panic and formatting plumbing (std)"
      p[++n] = "str::count|char_indices|chars";          w[n] = "counting characters (texts cut to a length)"
      p[++n] = "uuid";                                   w[n] = "idempotency keys and request ids (uuid)"
      p[++n] = "wasm_bindgen|js_sys|web_sys|__wbg|externref|__wbindgen"; w[n] = "wasm-bindgen glue shims and JS bindings"
      p[++n] = "gloo_timers";                            w[n] = "timers (gloo-timers)"
      p[++n] = "data segment|rodata";                    w[n] = "static data: strings (messages, codes, the .d.ts-free names)"
      p[++n] = "elem|code section|type\\[|import |export "; w[n] = "module structure"
    }
    # twiggy rows: "  12345 ┊ 1.23% ┊ name"; the header and separators pass through.
    /┊/ && $1 ~ /^[0-9]+$/ {
      line = $0; name = $0; sub(/^([^┊]*┊){2}[ ]*/, "", name)
      what = "-"
      for (i = 1; i <= n; i++) if (name ~ p[i]) { what = w[i]; break }
      printf "%s  ⟵ %s\n", line, what
      next
    }
    { print }
  '
}

echo "## scripts/size-check.sh $(basename "$pkg")"
bash scripts/size-check.sh "$pkg" || true
echo
echo "## twiggy top -n $rows (shallow bytes: each item alone)"
twiggy top -n "$rows" "$work/named.wasm" | purpose "$rows"
echo
echo "## twiggy dominators -d 1 -r $rows (retained bytes: what would go with the item)"
twiggy dominators -d 1 -r "$rows" "$work/named.wasm" | purpose "$rows"
echo
echo "## twiggy dominators, under table[0] (the items reached only through function pointers)"
twiggy dominators -d 3 -r 200 "$work/named.wasm" | awk '/ table\[0\]/{on=1; print; next} on && /⤷ elem/{print; next} on && /⤷/{print; next} on{exit}' \
  | head -n $((rows + 2)) | purpose "$rows"
echo
echo "## twiggy garbage (bytes nothing references: should be none after wasm-opt)"
twiggy garbage -n 5 "$work/named.wasm" || true
echo
echo "(commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src Cargo.toml Cargo.lock js vendor || echo ', with uncommitted changes'))"
