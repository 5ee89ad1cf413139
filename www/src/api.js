// Calls to the companion server that are not payments (the SDK owns paying and cancelling).
// Every call sends credentials: the session is the HttpOnly cookie set by POST /dev/sessions.

/** An RFC 9457 problem answered by the server, with its stable `code`. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = problem?.code ?? `HTTP_${status}`;
    this.problem = problem ?? null;
  }
}

export function createApi(baseUrl) {
  const base = baseUrl.replace(/\/+$/, "");

  async function call(method, path, body) {
    const init = { method, credentials: "include", headers: {} };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(base + path, init);
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (!res.ok) throw new ApiError(res.status, json);
    return json;
  }

  const enc = encodeURIComponent;
  return {
    base,
    signIn: (userId) => call("POST", "/dev/sessions", { userId }),
    catalog: () => call("GET", "/catalog"),
    createOrder: (items) => call("POST", "/orders", { items }),
    getOrder: (id) => call("GET", `/orders/${enc(id)}`),
    updateCart: (id, patch) => call("PATCH", `/orders/${enc(id)}/cart`, patch),
    openapi: () => call("GET", "/openapi.json"),
    /** Dev-only: the mails the server "sent" about an order (the long-wait message's promise). */
    mailbox: (orderId) => call("GET", `/dev/mailbox?orderId=${enc(orderId)}`),
    /** Dev-only configuration (provider URL, available faults); null when the server has none. */
    devConfig: async () => {
      try {
        return await call("GET", "/dev/config");
      } catch {
        return null;
      }
    },
  };
}

/** The catalog answer may be a bare array or `{items: [...]}`. */
export function catalogItems(catalog) {
  if (Array.isArray(catalog)) return catalog;
  return catalog?.items ?? catalog?.catalog ?? [];
}

/** GET <provider>/ledger?orderId=: every charge the provider made for the order. */
export async function fetchLedger(providerUrl, orderId) {
  const res = await fetch(`${providerUrl.replace(/\/+$/, "")}/ledger?orderId=${encodeURIComponent(orderId)}`);
  if (!res.ok) throw new Error(`ledger: HTTP ${res.status}`);
  const body = await res.json();
  return body.charges ?? [];
}

/**
 * POST <provider>/dev/webhooks/redeliver?orderId=: the provider sends the order's webhook
 * events again (deliberate duplicates). Answers the number of events, or throws.
 */
export async function redeliverWebhooks(providerUrl, orderId) {
  const url = `${providerUrl.replace(/\/+$/, "")}/dev/webhooks/redeliver?orderId=${encodeURIComponent(orderId)}`;
  const res = await fetch(url, { method: "POST" });
  const body = await res.json().catch(() => null);
  if (res.status !== 202) throw new Error(body?.detail ?? `HTTP ${res.status}`);
  return body?.redelivered ?? 0;
}
