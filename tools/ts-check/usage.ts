// Compiles only if the published types (pkg/payonce.d.ts) are precise: discriminated unions
// narrow, every outcome kind is handled (the `never` checks), errors are a class with a code.
// Run by scripts/test.sh as `tsc --strict --noEmit -p tools/ts-check` after build-pkg.
import init, {
  PayonceClient,
  PayonceError,
  version,
  type CancelOutcome,
  type Checkout,
  type PayOutcome,
  type PayStatus,
  type PayonceErrorCode,
  type PayonceEvent,
} from "../../pkg/payonce.js";

function unreachable(x: never): never {
  throw new Error(`unhandled: ${JSON.stringify(x)}`);
}

function describe(o: PayOutcome): string {
  switch (o.kind) {
    case "paid":
      return `paid ${o.payment.amount} ${o.payment.currency} (${o.payment.id})${o.byThisAttempt ? "" : ", elsewhere"}`;
    case "busy":
      return "another attempt is paying this order";
    case "actionRequired":
      return `the customer must act: ${JSON.stringify(o.next satisfies unknown)}`;
    case "declined":
      return o.code === "PAYMENT_DECLINED" ? "declined" : "failed, not charged";
    case "orderChanged":
      return `order changed to v${o.currentVersion ?? "?"}`;
    case "cancelled":
      return "cancelled";
    case "expired":
      return "the customer did not finish 3-D Secure in time; not charged";
    case "pending":
      return `still confirming (${o.reason})`;
    default:
      return unreachable(o);
  }
}

function afterCancel(c: CancelOutcome): boolean {
  switch (c.kind) {
    case "notFound":
      return c.problemCode === "ORDER_NOT_FOUND";
    case "none":
    case "cancelled":
    case "declined":
    case "failed":
    case "expired":
      return true; // the cart may change
    case "paid":
      return c.payment?.status === "succeeded";
    case "processing":
    case "unknown":
      return false; // keep the cart locked
    default:
      return unreachable(c);
  }
}

/** A support log line: every event has `at`; each kind narrows to its own members. */
function logLine(e: PayonceEvent): string {
  const at: number = e.at;
  switch (e.type) {
    case "request":
      return `${at} ${e.requestId} -> ${e.url}`;
    case "answer":
      return `${at} ${e.requestId} <- ${e.status ?? e.failure ?? ""} ${e.retryAfter ?? ""} ${e.serverRequestId ?? ""} ${e.error ?? ""}`;
    case "requestFailed":
      return `${at} ${e.requestId} not sent: ${e.reason satisfies "headers" | "fetch" | "aborted" | "unsupported"} ${e.error ?? ""}`;
    case "wait":
      return `${at} ${e.endpoint} ${e.key} waits ${e.ms} (${e.why})`;
    case "warning":
      return `${at} ${e.code}: ${e.message}`;
    case "outcome":
      return `${at} ${e.orderId} ${e.outcome?.kind ?? e.error?.code ?? ""}`;
    case "tabWait":
      return `${at} ${e.orderId} waits for another tab`;
    case "tabAdopt":
      return `${at} ${e.orderId} adopts ${e.key}`;
    default:
      return unreachable(e);
  }
}

export async function checkout(apiUrl: string): Promise<string> {
  await init();
  const client = PayonceClient.create({
    baseUrl: apiUrl,
    requestTimeoutMs: 15_000,
    retry: { baseDelayMs: 500, maxDelayMs: 5_000, maxAttempts: 8, budget: { capacity: 500 } },
    deadlineMs: 60_000,
    longWaitMs: 10_000,
    storage: "session",
    onWarning: (code, message: string) =>
      console.warn(code satisfies "STORAGE_UNAVAILABLE" | "UNREADABLE_ENTRY" | "DUPLICATED_TAB" | "NETWORK_OR_CORS", message),
    // A Bearer-token backend on its own paths (the transport options).
    credentials: "omit",
    headers: async () => ({ Authorization: `Bearer ${await Promise.resolve("token")}` }),
    endpoints: {
      pay: (orderId) => `${apiUrl}/api/checkout/${encodeURIComponent(orderId)}/pay`,
      cancel: (orderId) => `${apiUrl}/api/checkout/${encodeURIComponent(orderId)}/payment-attempts/cancel`,
    },
    onEvent: (event: PayonceEvent) => console.debug(logLine(event)),
    debug: false,
  });
  const mode: "session" | "memory" = client.storageMode;
  const cart: Checkout = { orderId: "ord_1", orderVersion: 3, paymentMethodId: "pm_card_approve" };
  const controller = new AbortController();
  const seen: PayStatus[] = [];
  try {
    const outcome = await client.pay(cart, { signal: controller.signal, onStatus: (s) => seen.push(s) });
    const again = await client.pay(cart); // options are optional
    const resumed = await client.resume("ord_1");
    if (resumed !== undefined) describe(resumed);
    const pending = client.pendingAttempt("ord_1");
    if (pending?.state === "unreadable") {
      const key: string | undefined = pending.key;
      void key;
    } else if (pending) {
      const version: number = pending.orderVersion;
      void version;
    }
    afterCancel(await client.cancel("ord_1"));
    const removed: number = client.clearAll();
    return `${describe(outcome)} ${describe(again)} ${mode} ${removed} ${version()} ${seen.join(",")}`;
  } catch (e) {
    if (e instanceof PayonceError) {
      const code: PayonceErrorCode = e.code;
      if (code === "NOT_INITIALIZED") return "call init() first";
      if (code === "TRANSPORT_FAILED") return `not sent: ${String(e.cause satisfies unknown)}`;
      const status: number | undefined = e.status;
      const problem: string | undefined = e.problemCode;
      return `${code} ${status ?? ""} ${problem ?? ""} ${e.message}`;
    }
    throw e;
  }
}
