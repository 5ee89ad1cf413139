// Types of the package entry (pkg/payonce.d.ts). The SDK's own types (PayonceClient,
// PayonceError, ClientOptions, outcomes) are the glue's, documented in payonce_glue.d.ts.
export * from "./payonce_glue.js";
import type { InitInput, InitOutput, NextAction, SyncInitInput } from "./payonce_glue.js";

/**
 * Loads and instantiates the module; await it once before anything else (calling the SDK
 * first throws a `PayonceError` with code `NOT_INITIALIZED`). Calling it again returns the
 * same promise. With no argument it fetches `payonce_bg.wasm` next to this file (in Node it
 * reads it from disk); a bundler that moves the file hands its URL in:
 * `init({ module_or_path: wasmUrl })`.
 */
export default function init(
  options?: { module_or_path: InitInput | Promise<InitInput> },
): Promise<InitOutput>;

/** Instantiates the module synchronously from its bytes or a compiled `WebAssembly.Module`. */
export function initSync(options: { module: SyncInitInput }): InitOutput;

/** The SDK version (the Cargo crate's and the npm package's). */
export function version(): string;

/**
 * True when `next` (of an `actionRequired` outcome) is one of the companion server's shapes:
 * `{ type: "redirect", url }` or `{ type: "stripe", clientSecret }`, narrowed to `NextAction`.
 * False for anything else another backend may send (the SDK passes `next` on untouched).
 */
export function isNextAction(next: unknown): next is NextAction;
