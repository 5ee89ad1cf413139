#!/usr/bin/env bash
# Builds the release npm package into pkg/ (or $1): wasm-pack (web target), npm's wasm-opt -Oz,
# then our own manifest pkg.json written over the package.json wasm-pack generates.
#
# Why `--target web`: its glue loads the module with `new URL('payonce_bg.wasm', import.meta.url)`,
# which Vite (and any ESM server) handles with no plugin; `bundler` needs a wasm plugin in Vite.
# Why wasm-opt is run here and not by wasm-pack: Debian's wasm-opt 108 silently breaks the module
# (docs/toolchain.md, rule 3). wasm-pack takes whatever wasm-opt is first on PATH; calling npm's
# binaryen by absolute path means a stray system wasm-opt can never be picked up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=$(realpath -m "${1:-pkg}")
wasm_opt="$root/tools/node_modules/.bin/wasm-opt"
terser="$root/tools/node_modules/.bin/terser"

for tool in "$wasm_opt" "$terser"; do
  [ -x "$tool" ] || { echo "build-pkg: $tool is missing; run scripts/bootstrap.sh" >&2; exit 1; }
done

# One version for the crate and the npm package: refuse to ship a manifest that disagrees.
. scripts/lib.sh
cargo_version=$(payonce_version)
manifest_version=$(node -p 'require("./pkg.json").version')
if [ "$cargo_version" != "$manifest_version" ]; then
  echo "build-pkg: pkg.json version $manifest_version differs from Cargo.toml version $cargo_version" >&2
  exit 1
fi

# --mode no-install: never let wasm-pack download a wasm-bindgen CLI (it cannot here).
# --profile wasm-release: the size-tuned profile of the root Cargo.toml (`--release` is the
# server's, tuned for speed); wasm-pack passes it to cargo as `--profile` and runs
# wasm-bindgen with its release settings (no debug glue) for a custom profile.
wasm-pack build --profile wasm-release --target web --mode no-install --no-opt --out-dir "$out" --out-name payonce

# The producers and target_features sections are read by tools (wasm-opt reads the features
# on load, so they are stripped only from its last output); browsers ignore them: 200 B gzip.
# The optimisation flags were picked by measuring the gzip size (docs/size.md): flatten +
# rereloop before -Os beat -Oz --converge by 0.9 KB. --low-memory-unused holds for Rust's
# wasm32 layout (the stack and data start at 1 MiB); --zero-filled-memory holds for a module
# that defines its own memory.
"$wasm_opt" --low-memory-unused --zero-filled-memory --flatten --rereloop -Os -Os --converge \
  "$out/payonce_bg.wasm" -o "$out/payonce_bg.wasm.opt"
# Imports and exports get short names (wasm-bindgen's carry 16-hex-digit hashes, which do not
# compress, spelled in both the module and the glue); tools/minify-names.mjs renames them in
# the glue from wasm-opt's report, and fails the build if the two do not match.
"$wasm_opt" --minify-imports-and-exports-and-modules --strip-producers --strip-target-features \
  "$out/payonce_bg.wasm.opt" -o "$out/payonce_bg.wasm" >"$out/names.json"
node tools/minify-names.mjs "$out/names.json" "$out/payonce_bg.wasm" "$out/payonce.js" "$out/payonce.d.ts"
rm "$out/payonce_bg.wasm.opt" "$out/names.json"

# The generated glue becomes payonce_glue.js; the package's entry payonce.js is our own
# js/index.js over it (no `window` on import, a PayonceError before init(), init() in Node).
mv "$out/payonce.js" "$out/payonce_glue.js"
sed 's|@ts-self-types="./payonce.d.ts"|@ts-self-types="./payonce_glue.d.ts"|' "$out/payonce.d.ts" >"$out/payonce_glue.d.ts"
# The generated classes declare `[Symbol.dispose]()`, which needs TypeScript's
# `esnext.disposable` lib; Vite's template has `lib: ["ES2023", "DOM"]`, without it, so with
# skipLibCheck false the package's own types would not compile. The reference brings that lib
# along (tools/ts-check compiles them under the Vite, Next.js and `tsc --init` settings).
sed -i '1i /// <reference lib="esnext.disposable" />' "$out/payonce_glue.d.ts"
sed -i '1s|@ts-self-types="./payonce.d.ts"|@ts-self-types="./payonce_glue.d.ts"|' "$out/payonce_glue.js"
cp js/index.js "$out/payonce.js"
cp js/index.d.ts "$out/payonce.d.ts"
# `payonce/payonce_bg.wasm` is imported as an asset URL; the generated declaration of the raw
# module exports describes nothing a user imports.
cp js/wasm-url.d.ts "$out/payonce_bg.wasm.d.ts"

# The JS is minified (2.5 KB gzip of the glue's 7 KB were JSDoc and long names). Its docs live
# in the .d.ts files, which editors and TypeScript read (`@ts-self-types`, kept); class names
# are kept so `err.constructor.name` still says PayonceError. Apps that bundle minify it anyway.
# wasm-bindgen's snippets (JS the module imports, e.g. the PayonceError class) ship too.
js_files=(payonce_glue.js payonce.js)
if [ -d "$out/snippets" ]; then
  while IFS= read -r f; do js_files+=("${f#"$out"/}"); done < <(find "$out/snippets" -name '*.js')
fi
for js in "${js_files[@]}"; do
  "$terser" "$out/$js" --module --compress passes=2 --mangle --keep-classnames \
    --comments '/@ts-self-types/' -o "$out/$js.min"
  mv "$out/$js.min" "$out/$js"
done

cp pkg.json "$out/package.json"
cp npm/README.md npm/LICENSE "$out/"
# wasm-pack writes a `*` .gitignore into the package; the `files` list in our manifest
# decides what ships, so drop it to keep the folder equal to the tarball.
rm -f "$out/.gitignore"
echo "build-pkg: built payonce $cargo_version into $out"
