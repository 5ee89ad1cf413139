// The payonce SDK, installed from ../pkg like any npm package (`"payonce": "file:../pkg"`).
// This file only adapts what the page needs from it; the payment logic lives in the package.
import * as payonce from "payonce";

let ready;

/** Loads the Wasm module once (the web-target glue exports an async `default` initialiser). */
export function loadSdk() {
  ready ??= (async () => {
    if (typeof payonce.default === "function") await payonce.default();
    return payonce;
  })();
  return ready;
}

/** onStatus may hand over a bare string or an event object; the page wants the name. */
export function statusName(ev) {
  if (typeof ev === "string") return ev;
  return ev?.kind ?? ev?.status ?? ev?.type ?? String(ev);
}

/**
 * The most specific code of a PayonceError: the server's problem code when the SDK passes a
 * refusal on (SDK code `SERVER_REJECTED` + e.g. `PAYMENT_ALREADY_ACTIVE`), else the SDK's code.
 */
export function errorCode(err) {
  return err?.problemCode ?? err?.serverCode ?? err?.problem?.code ?? err?.code ?? null;
}
