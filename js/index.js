// @ts-self-types="./payonce.d.ts"
// The package entry (pkg/payonce.js, the "." export). It wraps the glue wasm-bindgen
// generates (pkg/payonce_glue.js) for three reasons:
// - Importing the package must never touch `window`, so server-side rendering can import
//   it; the glue is only loaded and run by `init()`.
// - Calling the SDK before `await init()` gives a PayonceError (code NOT_INITIALIZED) that
//   says so, instead of the glue's "Cannot read properties of undefined".
// - In Node (test runners, SSR) `init()` with no argument reads payonce_bg.wasm from disk:
//   Node's fetch cannot load a file: URL.
// Everything else is the glue's own API, re-exported unchanged.
import initGlue, * as glue from "./payonce_glue.js";

export * from "./payonce_glue.js";

let loading = null;
let ready = false;

/**
 * Loads and instantiates the module; call it once and await it before anything else.
 * Calling it again returns the same promise. `options.module_or_path` may be a URL, a
 * Response, bytes or a `WebAssembly.Module` (for bundlers that hand out the module's URL:
 * `import wasmUrl from "payonce/payonce_bg.wasm"`).
 */
export default function init(options) {
  loading ??= load(options).then(
    (exports) => {
      ready = true;
      return exports;
    },
    (err) => {
      loading = null; // a failed load (offline, 404) may be retried
      throw loadError(err);
    },
  );
  return loading;
}

/** Instantiates the module from bytes or a `WebAssembly.Module`, synchronously. */
export function initSync(options) {
  const exports = glue.initSync(options);
  ready = true;
  loading ??= Promise.resolve(exports);
  return exports;
}

async function load(options) {
  if (options === undefined && inNode()) {
    // process.getBuiltinModule, not import("node:fs"): bundlers leave it alone, so a browser
    // bundle never tries to resolve a Node module (Node 20.16 and later have it).
    const fs = process.getBuiltinModule?.("node:fs");
    if (!fs) throw new Error("this Node has no process.getBuiltinModule; pass the bytes: init({ module_or_path })");
    options = { module_or_path: await fs.promises.readFile(new URL("./payonce_bg.wasm", import.meta.url)) };
  }
  return initGlue(options);
}

function inNode() {
  return typeof process === "object" && typeof process.versions?.node === "string"
    && typeof window === "undefined" && import.meta.url.startsWith("file:");
}

/** A PayonceError raised here, before the module runs (the class is plain JS). */
function entryError(message, cause) {
  const err = new glue.PayonceError("NOT_INITIALIZED", message);
  if (cause !== undefined) err.cause = cause;
  return err;
}

function loadError(err) {
  if (err instanceof glue.PayonceError) return err;
  const why = err instanceof Error ? err.message : String(err);
  return entryError(
    `payonce: init() could not load payonce_bg.wasm (${why}); if a bundler moved the file, ` +
      "pass its URL: init({ module_or_path: wasmUrl })",
    err,
  );
}

function notReady(what) {
  return entryError(
    `payonce: ${what} was called before the module was loaded; ` +
      "`await init()` (the package's default export) once first",
  );
}

// The glue's entry points, guarded. Methods of a created client need no guard: a client
// only exists once the module is loaded. The guarded class is this module's own export (not
// a patch applied on the side), so a bundler that skips side-effect-free modules keeps it.
export const PayonceClient = guardCreate(glue.PayonceClient);

function guardCreate(cls) {
  const create = cls.create;
  cls.create = function (options) {
    if (!ready) throw notReady("PayonceClient.create()");
    return create.call(this, options);
  };
  return cls;
}

export function version() {
  if (!ready) throw notReady("version()");
  return glue.version();
}

// The companion server's `next` shapes (docs/protocol.md, section 4): plain JS, no module needed.
export function isNextAction(next) {
  const s = (k) => typeof next[k] === "string";
  return typeof next === "object" && next !== null
    && ((next.type === "redirect" && s("url")) || (next.type === "stripe" && s("clientSecret")));
}
