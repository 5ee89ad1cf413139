#!/usr/bin/env bash
# Size ratchet: prints the gzip sizes of the built package's wasm and JS (the entry payonce.js,
# the generated glue payonce_glue.js and any wasm-bindgen snippets) and fails when
# their sum is above the ceiling in tools/size-ceiling.txt. The ceiling is kept just above the
# current size, so it can only move down unless someone raises it in a commit that says why.
# usage: scripts/size-check.sh [PKG_DIR]   (default pkg/, built by scripts/build-pkg.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=${1:-$root/pkg}
ceiling_file=$root/tools/size-ceiling.txt

gz() { gzip -9 -n -c "$1" | wc -c; }
total=0
files=(payonce_bg.wasm payonce_glue.js payonce.js)
# Snippets are JS the module imports (wasm-bindgen `module = "/js/..."`); they ship too.
if [ -d "$pkg/snippets" ]; then
  while IFS= read -r f; do files+=("${f#"$pkg"/}"); done < <(find "$pkg/snippets" -name '*.js' | sort)
fi
for f in "${files[@]}"; do
  [ -f "$pkg/$f" ] || { echo "size: $pkg/$f is missing; run scripts/build-pkg.sh" >&2; exit 1; }
  n=$(gz "$pkg/$f")
  printf 'size: %-16s %7d B raw  %7d B gzip\n' "$f" "$(wc -c <"$pkg/$f")" "$n"
  total=$((total + n))
done
# The ceiling file holds one number of bytes; lines starting with # are comments.
ceiling=$(grep -v '^[[:space:]]*#' "$ceiling_file" | tr -d '[:space:]')
printf 'size: %-16s %7s    %7d B gzip (ceiling %d B)\n' "sum" "" "$total" "$ceiling"
if [ "$total" -gt "$ceiling" ]; then
  echo "size: FAILED: $total B gzip is above the ceiling of $ceiling B in tools/size-ceiling.txt." >&2
  echo "size: what grew: scripts/size-report.sh on this branch and on main (docs/size.md, \"When the size suite fails\")." >&2
  echo "size: shrink the package, or raise the ceiling in a commit that says what the bytes buy." >&2
  exit 1
fi
# Slack invites regressions: ask for the ratchet to follow a shrink.
if [ $((ceiling - total)) -gt 1024 ]; then
  echo "size: note: $((ceiling - total)) B under the ceiling; lower tools/size-ceiling.txt to about $((total + 256))."
fi
