// Renames the module's imports and exports in the JS glue after wasm-opt
// --minify-imports-and-exports-and-modules has shortened them in the .wasm
// (scripts/build-pkg.sh).
// wasm-bindgen names them like `__wbg_headers_5fc0106c076eb731`: their hashes do not compress,
// and each name is spelled twice, once in the module and once in the glue.
//
// usage: node tools/minify-names.mjs MAP.json MODULE.wasm GLUE.js GLUE.d.ts
//   MAP.json: wasm-opt's report, {"imports": [[module, old, new]...], "exports": [[old, new]...]};
//   MODULE.wasm: the renamed module (its one import module name is read from it).
// The glue is the unminified wasm-bindgen output: imports are keys of its import object
// (`old: function`), exports are read as `wasm.old`; the .d.ts lists exports as `readonly old:`.
import { readFileSync, writeFileSync } from "node:fs";

const [mapPath, wasmPath, gluePath, dtsPath] = process.argv.slice(2);
const text = readFileSync(mapPath, "utf8");
// wasm-opt prints the report once per run of the pass; the first JSON object is the one used.
const map = JSON.parse(firstObject(text));
let glue = readFileSync(gluePath, "utf8");
let dts = readFileSync(dtsPath, "utf8");
const esc = (s) => s.replace(/[$]/g, "\\$");
const problems = [];

// The import object's module key: wasm-bindgen's glue provides one, "./payonce_bg.js".
const modules = new Set(WebAssembly.Module.imports(new WebAssembly.Module(readFileSync(wasmPath))).map((i) => i.module));
const oldModules = new Set(map.imports.map(([m]) => m));
if (modules.size !== 1 || oldModules.size !== 1) problems.push(`expected one import module, got ${[...oldModules]} -> ${[...modules]}`);
const [oldModule] = oldModules;
const [newModule] = modules;
const moduleKey = `${JSON.stringify(oldModule)}: import0`;
if (!glue.includes(moduleKey)) problems.push(`the glue has no ${moduleKey}`);
glue = glue.replace(moduleKey, () => `${JSON.stringify(newModule)}: import0`);

for (const [, from, to] of map.imports) {
  const key = new RegExp(`(^|[\\s{,])${esc(from)}(\\s*:\\s*function)`, "gm");
  const n = (glue.match(key) ?? []).length;
  if (n !== 1) problems.push(`import ${from}: ${n} definitions in the glue`);
  glue = glue.replace(key, (_, pre, post) => pre + to + post); // a function: `to` may be "$"
}
for (const [from, to] of map.exports) {
  const use = new RegExp(`\\bwasm\\.${esc(from)}\\b`, "g");
  glue = glue.replace(use, () => `wasm.${to}`);
  dts = dts.replace(new RegExp(`(readonly )${esc(from)}(:)`, "g"), (_, pre, post) => pre + to + post);
}
// Anything wasm-bindgen-named left over means the glue spells a name some other way.
const left = glue.match(/__wbg_\w+_[0-9a-f]{16}\b/g);
if (left) problems.push(`still in the glue: ${[...new Set(left)].join(", ")}`);
if (problems.length) {
  console.error(`minify-names: the glue does not match the module:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
writeFileSync(gluePath, glue);
writeFileSync(dtsPath, dts);
console.log(`minify-names: ${map.imports.length} imports, ${map.exports.length} exports renamed`);

function firstObject(s) {
  const start = s.indexOf("{");
  let depth = 0;
  for (let i = start; i < s.length; i++) {
    if (s[i] === "{") depth++;
    else if (s[i] === "}" && --depth === 0) return s.slice(start, i + 1);
  }
  throw new Error(`minify-names: no JSON object in ${mapPath}`);
}
