// Dev-panel fault injection at the network layer of the page.
//
// Why here and not inside the SDK: the SDK under test stays exactly the published package; the
// page only changes what its `fetch` sends or receives, like a flaky network would. The SDK's
// web layer calls the global `fetch`, so wrapping it reaches every payment request.
//
// ("Lose the next response" does not need this layer: the SDK has a `devFault` pay option.)
// - a server fault the SDK has no option for (e.g. a later "crash-after-charge"): the next pay
//   request carries `Payonce-Dev-Fault: <fault>`.
// - "network down": pay requests fail before leaving the browser, so they never reach the
//   server (the outcome is unknown to the SDK, exactly like a real network error).

export const DEV_FAULT_HEADER = "Payonce-Dev-Fault";

const PAY_PATH = /\/orders\/[^/]+\/pay$/;

export function installDevNetwork({ onEvent }) {
  // nextFault: the Payonce-Dev-Fault value for the next pay request (one shot), or null.
  const state = { nextFault: null, offline: false, listeners: new Set() };
  const realFetch = globalThis.fetch.bind(globalThis);

  function isPay(input, init) {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    const method = (init?.method ?? (typeof input === "object" && "method" in input ? input.method : "GET")).toUpperCase();
    let path;
    try {
      path = new URL(url, location.href).pathname;
    } catch {
      return false;
    }
    return method === "POST" && PAY_PATH.test(path);
  }

  globalThis.fetch = async function devFetch(input, init) {
    if (!isPay(input, init)) return realFetch(input, init);
    if (state.offline) {
      onEvent("dev: pay request blocked before reaching the server (network down)");
      throw new TypeError("Failed to fetch (dev: network down)");
    }
    if (state.nextFault) {
      const fault = state.nextFault;
      state.nextFault = null;
      for (const l of state.listeners) l();
      const req = new Request(input, init);
      const headers = new Headers(req.headers);
      headers.set(DEV_FAULT_HEADER, fault);
      onEvent(`dev: this pay request carries ${DEV_FAULT_HEADER}: ${fault}`);
      return realFetch(new Request(req, { headers }));
    }
    return realFetch(input, init);
  };

  return {
    get nextFault() {
      return state.nextFault;
    },
    set nextFault(v) {
      state.nextFault = v || null;
    },
    get offline() {
      return state.offline;
    },
    set offline(v) {
      state.offline = !!v;
    },
    /** Called when a one-shot fault has been used (so the panel can untick it). */
    onConsumed(fn) {
      state.listeners.add(fn);
    },
  };
}
