// The demo checkout. It owns no payment logic: keys, retries, "checking status" and cancel all
// come from the payonce SDK. The page signs in, shows the server's order and prices, and
// renders what the SDK reports. Query parameters (all optional):
//   ?user=ID          dev user to sign in as (default "demo")
//   ?order=ID         order to show (set by the page itself, so a refresh keeps the order)
//   ?provider=URL     mock provider URL for the ledger panel (else GET /dev/config)
//   ?longWaitMs= ?requestTimeoutMs= ?deadlineMs=   SDK timings (tests shorten them)
//   ?stripe=URL       Stripe mode (a server run with --provider stripe): Stripe.js is loaded from
//                     URL/js.stripe.com/v3/ (localstripe's stand-in; https://js.stripe.com/v3/
//                     is the real one) and finishes 3-D Secure with confirmCardPayment
//   ?stripeKey=pk_…   its publishable key (default pk_test_payonce)
//   ?methods=pm_1:Label,pm_2:Label   the payment methods offered instead of the mock's; in
//                     Stripe mode they were made at the provider (Stripe.js or its API), so no
//                     card number ever reaches this page's server
import "./style.css";
import { createApi, catalogItems, fetchLedger, redeliverWebhooks } from "./api.js";
import { installDevNetwork } from "./devnet.js";
import { formatMoney, shortId } from "./format.js";
import { loadSdk, statusName, errorCode } from "./sdk.js";
import * as integrate from "./integrate.js";

/** The mock provider's test payment methods (protocol::provider::methods). */
const MOCK_METHODS = [
  { id: "pm_card_approve", label: "Approve", hint: "approved at once" },
  { id: "pm_card_decline", label: "Decline", hint: "declined, nothing is charged" },
  { id: "pm_card_slow", label: "Slow provider", hint: "approves after 4 s, longer than the client timeout" },
  { id: "pm_card_timeout", label: "Provider timeout", hint: "charged, but the provider's answer never comes in time" },
  { id: "pm_card_transient", label: "Transient error", hint: "the provider answers 503 once, then approves" },
  { id: "pm_card_3ds", label: "3-D Secure", hint: "the bank asks you to confirm on its page first" },
];

const TEXT = {
  processing: "Processing…",
  checking: "Checking payment status…",
  longWait: "We're confirming your payment. We'll email you when it's done.",
  paid: "Paid. Your card was charged once.",
  declined: "Your payment was declined. Nothing was charged. Choose another method and try again.",
  failed: "The payment failed without a charge. Nothing was charged. You can try again.",
  changed: "The order changed — please review it and pay again.",
  cancelled: "The payment attempt was cancelled. Nothing was charged.",
  expired: "The bank's confirmation was not completed in time. Nothing was charged. You can pay again.",
  offline: "You are offline. Waiting for the network to check the payment status…",
  actionRequired: "Confirm the payment with your bank.",
  actionWaiting: "Waiting for your bank's confirmation…",
  otherTab: "This order is being paid in another tab. Waiting for it…",
  paidElsewhere: "This order was already paid (in another tab or device). It was charged once.",
};

const UNAVAILABLE = "not available in this server build";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

/** `?methods=pm_1:Label,…`, or the mock's. */
const METHODS = params.get("methods")
  ? params
      .get("methods")
      .split(",")
      .map((m) => {
        const [id, label = id] = m.split(":");
        return { id, label, hint: "a payment method made at the provider" };
      })
  : MOCK_METHODS;
const numParam = (k) => (params.has(k) && params.get(k) !== "" ? Number(params.get(k)) : undefined);

const state = {
  api: null,
  client: null,
  devnet: null,
  catalog: [],
  order: null,
  providerUrl: null,
  busy: false,
  editing: false,
  abort: null,
  running: null,
  userAbort: false,
  longWait: false,
  /** Stripe.js (`Stripe(key)`), in Stripe mode. */
  stripe: null,
};

// ---------------------------------------------------------------- small view helpers

function log(text) {
  const li = document.createElement("li");
  const t = new Date().toISOString().slice(11, 23);
  li.textContent = `${t} ${text}`;
  $("log").prepend(li);
}

function setStatus(text, kind = "info") {
  const el = $("status");
  if (el.textContent === text && el.dataset.state === kind) return;
  el.textContent = text;
  el.dataset.state = kind;
  log(`status: ${text}`);
}

function showNotice(text, actions = []) {
  $("notice-text").textContent = text;
  const box = $("notice-actions");
  box.replaceChildren();
  for (const [label, fn, id] of actions) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    if (id) b.id = id;
    b.addEventListener("click", fn);
    box.append(b);
  }
  $("notice").hidden = false;
}

function hideNotice() {
  $("notice").hidden = true;
  $("notice-actions").replaceChildren();
}

function showReceipt(payment) {
  if (!payment) return;
  $("r-amount").textContent = formatMoney(payment.amount, payment.currency);
  $("r-payment").textContent = payment.id;
  $("r-charge").textContent = payment.chargeId ?? "";
  $("r-method").textContent = payment.paymentMethodId ?? "";
  $("receipt").hidden = false;
}

function selectedMethod() {
  return document.querySelector('input[name="method"]:checked')?.value ?? METHODS[0].id;
}

function setBusy(busy) {
  state.busy = busy;
  updateControls();
}

function updateControls() {
  const o = state.order;
  const open = !!o && o.status === "unpaid";
  $("pay").disabled = state.busy || !open || state.editing;
  $("edit-cart").disabled = state.busy || !open || !!o?.paymentInProgress || state.editing;
  $("change-elsewhere").disabled = !open;
  for (const r of document.querySelectorAll('input[name="method"]')) r.disabled = state.busy || !open;
  $("cart-lock").hidden = !(open && (o.paymentInProgress || state.busy));
}

function renderMethods() {
  const fs = $("methods");
  for (const [i, m] of METHODS.entries()) {
    const label = document.createElement("label");
    label.className = "method";
    const input = document.createElement("input");
    Object.assign(input, { type: "radio", name: "method", value: m.id, checked: i === 0 });
    const name = document.createElement("span");
    name.textContent = m.label;
    const hint = document.createElement("span");
    hint.className = "hint muted small";
    hint.textContent = `${m.id} — ${m.hint}`;
    label.append(input, name, hint);
    fs.append(label);
  }
}

function renderOrder(order) {
  state.order = order;
  const idEl = $("order-id");
  idEl.textContent = shortId(order.id, 16);
  idEl.title = order.id;
  idEl.dataset.id = order.id;
  $("order-version").textContent = String(order.version);
  $("order-status").textContent = order.paymentInProgress && order.status === "unpaid" ? "payment in progress" : order.status;
  const rows = order.items.map((l) => {
    const tr = document.createElement("tr");
    for (const [v, cls] of [
      [l.name, ""],
      [String(l.quantity), "num"],
      [formatMoney(l.unitPrice, order.currency), "num"],
      [formatMoney(l.lineTotal, order.currency), "num"],
    ]) {
      const td = document.createElement("td");
      td.textContent = v;
      if (cls) td.className = cls;
      tr.append(td);
    }
    return tr;
  });
  $("lines").replaceChildren(...rows);
  $("discount-row").hidden = !order.discount;
  $("order-discount").textContent = order.discount ? `−${formatMoney(order.discount, order.currency)}` : "";
  $("order-amount").textContent = formatMoney(order.amount, order.currency);
  $("pay").textContent = order.status === "unpaid" ? `Pay ${formatMoney(order.amount, order.currency)}` : "Paid";
  if (order.status !== "unpaid" && order.payment) showReceipt(order.payment);
  updateControls();
}

async function reloadOrder() {
  const order = await state.api.getOrder(state.order.id);
  renderOrder(order);
  return order;
}

// ---------------------------------------------------------------- payments (through the SDK)

function onStatus(ev) {
  const name = statusName(ev);
  log(`sdk: ${name}`);
  // Once the wait is long, later polls ("processing" on each 202/IN_PROGRESS) must not put
  // "Processing…" back: the customer keeps the long-wait message until an outcome arrives.
  if (state.longWait && (name === "processing" || name === "checkingStatus")) return;
  if (name === "processing") {
    setStatus(TEXT.processing, "busy");
  } else if (name === "checkingStatus") {
    setStatus(TEXT.checking, "busy");
    refreshLedger();
    offerCancel("We don't know yet whether the payment went through. Retrying keeps the same key, so it cannot charge twice.");
  } else if (name === "takingLonger") {
    state.longWait = true;
    setStatus(TEXT.longWait, "busy");
    refreshLedger();
    offerCancel("You may keep this page open or come back later; refreshing is safe.");
  } else if (name === "waitingForNetwork") {
    setStatus(TEXT.offline, "busy");
  } else if (name === "waitingForOtherTab") {
    setStatus(TEXT.otherTab, "busy");
  }
}

function offerCancel(text) {
  showNotice(text, [["Change cart (cancel this attempt)", cancelAndEdit, "cancel-attempt"]]);
}

/** Runs one SDK call that ends in a PayOutcome (pay or resume), with the page locked. */
async function runAttempt(start) {
  if (state.busy) return; // a second click while in flight: the button is disabled anyway
  setBusy(true);
  hideNotice();
  state.userAbort = false;
  state.longWait = false;
  const abort = new AbortController();
  state.abort = abort;
  const run = (async () => {
    try {
      const outcome = await start({ signal: abort.signal, onStatus });
      if (!state.userAbort) {
        // The outcome is known: the controls follow the order from now on, so they are live
        // by the time the status line announces the outcome.
        state.busy = false;
        await showOutcome(outcome);
      }
    } catch (err) {
      if (!state.userAbort) await showError(err);
    } finally {
      state.abort = null;
      if (!state.userAbort) setBusy(false);
      showWhatHappened();
      refreshLedger();
      // Webhooks and the confirmation mail can trail the answer by a moment.
      setTimeout(refreshLedger, 1500);
    }
  })();
  state.running = run;
  await run;
}

async function onPay() {
  if (state.busy || !state.order) return;
  $("receipt").hidden = true;
  const snapshot = {
    orderId: state.order.id,
    orderVersion: state.order.version,
    paymentMethodId: selectedMethod(),
  };
  log(`pay: order ${shortId(snapshot.orderId)} v${snapshot.orderVersion} with ${snapshot.paymentMethodId}`);
  // Dev panel "lose the next response": the SDK's own dev hook puts the fault header on the
  // first request of this payment; the dev server charges, then drops the connection.
  const devFault = $("fault-drop").checked ? "drop-response" : undefined;
  if (devFault) {
    $("fault-drop").checked = false;
    log("dev: this payment's first request asks the server to drop its response");
  }
  setStatus(TEXT.processing, "busy");
  await runAttempt((opts) => state.client.pay(snapshot, devFault ? { ...opts, devFault } : opts));
}

async function resumeAttempt() {
  if (state.busy) return;
  setStatus(TEXT.checking, "busy");
  await runAttempt((opts) => state.client.resume(state.order.id, opts));
}

/**
 * After each pay, a link to the server's operator page for this order (`/admin/?order=ID`,
 * docs/demo.md): the timeline of requests, provider calls and state changes that led to the
 * outcome above. The page gets a dev operator token from the dev server itself (`GET
 * /dev/operator`, dev mode only); this page never holds one, and the customer's session
 * opens nothing there.
 */
function showWhatHappened() {
  const link = $("what-happened");
  if (!state.order) return;
  link.href = `${state.api.base}/admin/?order=${encodeURIComponent(state.order.id)}`;
  link.hidden = false;
}

async function showOutcome(outcome) {
  log(`outcome: ${outcome?.kind}`);
  hideNotice();
  if (outcome?.kind === "paid") {
    // Paid: lock Pay at once, before the order is fetched again.
    renderOrder({ ...state.order, status: "paid", paymentInProgress: false, payment: outcome.payment });
  } else {
    updateControls();
  }
  switch (outcome?.kind) {
    case "paid":
      showReceipt(outcome.payment);
      // byThisAttempt false: another key (another device) paid it; this tab charged nothing.
      setStatus(outcome.byThisAttempt === false ? TEXT.paidElsewhere : TEXT.paid, "ok");
      await reloadOrder();
      break;
    case "busy":
      // Another attempt runs (another device); the SDK already tombstoned this tab's key.
      await showPaidElsewhere();
      break;
    case "declined":
      setStatus(outcome.code === "PAYMENT_FAILED" ? TEXT.failed : TEXT.declined, "error");
      await reloadOrder();
      break;
    case "orderChanged": {
      const order = await reloadOrder();
      setStatus(TEXT.changed, "warn");
      showNotice(
        `Your order is now version ${order.version}, total ${formatMoney(order.amount, order.currency)}. ` +
          "Check the cart, then press Pay to confirm.",
        [["Edit cart", openEditor, "review-edit"]],
      );
      break;
    }
    case "cancelled":
      setStatus(TEXT.cancelled, "warn");
      await reloadOrder();
      break;
    case "expired":
      setStatus(TEXT.expired, "warn");
      await reloadOrder();
      break;
    case "actionRequired":
      askForAction(outcome.next);
      break;
    case "pending":
      log(`sdk stopped asking for now (${outcome.reason ?? "deadline"}); the key is kept`);
      setStatus(TEXT.longWait, "busy");
      showNotice("The payment is still being confirmed. Your attempt is kept: checking again is safe.", [
        ["Check again", resumeAttempt, "check-again"],
        ["Change cart (cancel this attempt)", cancelAndEdit, "cancel-attempt"],
      ]);
      break;
    case undefined:
      // resume() found no stored attempt (another tab of this browser finished it).
      await reloadOrder();
      if (state.order.status === "paid") setStatus("This order is paid. It was charged once.", "ok");
      else setStatus("Ready to pay.", "idle");
      break;
    default:
      setStatus(`Unexpected payment outcome: ${JSON.stringify(outcome)}`, "error");
  }
}

/**
 * The customer must act at the bank (3-D Secure). `next` is the server's opaque payload; the
 * companion server sends `{ type: "redirect", url }`. The bank's page opens in a popup; when
 * it closes, `resume` asks again with the same key (the SDK kept it) and shows the outcome.
 * A blocked popup falls back to the same tab with a `returnUrl`: back on this page, the
 * stored attempt is found and resumed the same way.
 */
function askForAction(next) {
  if (next?.type === "stripe" && typeof next.clientSecret === "string") {
    askForStripeAction(next.clientSecret);
    return;
  }
  const url = next?.type === "redirect" && typeof next.url === "string" ? next.url : null;
  if (!url) {
    setStatus(`The payment needs an action this page does not know: ${JSON.stringify(next)}`, "error");
    return;
  }
  log(`action required: ${url}`);
  setStatus(TEXT.actionRequired, "warn");
  showNotice("Your bank asks you to confirm this payment. Nothing is charged until you do.", [
    ["Confirm with your bank", () => openAction(url), "confirm-bank"],
    ["I confirmed it: check again", resumeAttempt, "check-again"],
  ]);
}

/**
 * Stripe (`--provider stripe`): the server created and confirmed the PaymentIntent; Stripe.js
 * runs its 3-D Secure step (`confirmCardPayment` with the intent's client secret, in Stripe's
 * own frame), then the same checkout is paid again with the same key and the server reads the
 * outcome from Stripe.
 */
function askForStripeAction(clientSecret) {
  if (!state.stripe) {
    setStatus("The payment needs Stripe.js, which this page did not load (open it with ?stripe=URL).", "error");
    return;
  }
  log("action required: Stripe 3-D Secure");
  setStatus(TEXT.actionRequired, "warn");
  showNotice("Your bank asks you to confirm this payment. Nothing is charged until you do.", [
    ["Confirm with your bank", () => confirmWithStripe(clientSecret), "confirm-bank"],
    ["I confirmed it: check again", resumeAttempt, "check-again"],
  ]);
}

async function confirmWithStripe(clientSecret) {
  setStatus(TEXT.actionWaiting, "busy");
  const result = await state.stripe.confirmCardPayment(clientSecret);
  // Whatever Stripe.js says, the server asks Stripe itself: the key's outcome is the truth.
  log(result?.error ? `Stripe.js: ${result.error.message ?? result.error.code}` : "Stripe.js: authentication done");
  resumeAttempt();
}

/** Loads Stripe.js from `base`/js.stripe.com/v3/ and makes the client for `key`. */
async function loadStripe(base, key) {
  const src = `${base.replace(/\/+$/, "")}/js.stripe.com/v3/`;
  await new Promise((resolve, reject) => {
    const el = Object.assign(document.createElement("script"), { src, onload: resolve });
    el.onerror = () => reject(new Error(`Stripe.js did not load from ${src}`));
    document.head.append(el);
  });
  log(`Stripe.js loaded from ${src}`);
  return window.Stripe(key);
}

function openAction(url) {
  const popup = window.open(url, "payonce-bank", "popup,width=520,height=640");
  if (!popup) {
    const back = new URL(location.href);
    back.searchParams.set("order", state.order.id);
    const target = new URL(url);
    target.searchParams.set("returnUrl", back.href);
    log("popup blocked: opening the bank's page in this tab");
    location.assign(target.href);
    return;
  }
  setStatus(TEXT.actionWaiting, "busy");
  const timer = setInterval(() => {
    if (!popup.closed) return;
    clearInterval(timer);
    log("the bank's window closed; checking the payment with the same key");
    resumeAttempt();
  }, 300);
}

/** The order is paid or being paid by another attempt (`busy`): show which, from the order. */
async function showPaidElsewhere() {
  const order = await reloadOrder().catch(() => state.order);
  if (order?.status === "paid") {
    setStatus(TEXT.paidElsewhere, "ok");
  } else {
    setStatus("This order is already being paid in another tab or device. Wait for it to finish.", "warn");
    showNotice("Nothing was charged by this tab.", [["Reload order", () => reloadOrder().then(afterReload), "reload-order"]]);
  }
}

async function showError(err) {
  const code = errorCode(err);
  log(`error: ${code ?? ""} ${err?.message ?? err}`);
  hideNotice();
  if (code === "ORDER_ALREADY_PAID") {
    // A cart change on a paid order (pay answers it as a `paid` outcome).
    await showPaidElsewhere();
    return;
  }
  if (code === "OUT_OF_STOCK") {
    setStatus("An item in your cart is out of stock. Edit the cart and try again.", "error");
    return;
  }
  if (code === "SNAPSHOT_CONFLICT") {
    setStatus("An earlier payment attempt for this order, with other details, is not finished. Check it or cancel it first.", "warn");
  } else {
    setStatus(`Payment error${code ? ` (${code})` : ""}: ${err?.message ?? err}`, "error");
  }
  let pending = null;
  try {
    pending = await state.client.pendingAttempt(state.order.id);
  } catch {
    pending = null;
  }
  if (pending) {
    showNotice("An earlier payment attempt for this order is not finished yet.", [
      ["Check it", resumeAttempt, "check-again"],
      ["Cancel it", cancelAndEdit, "cancel-attempt"],
    ]);
  }
}

function afterReload(order) {
  if (order.status === "paid") setStatus("This order is paid. It was charged once.", "ok");
}

/** CancelOutcome.kind: none | cancelled | declined | failed | expired | paid | processing | unknown. */
function cancelStatus(r) {
  if (r == null) return "none";
  if (typeof r === "string") return r;
  const k = r.kind ?? r.status ?? "none";
  return k === "succeeded" ? "paid" : k;
}

/** "I want to change my cart" while an attempt is unresolved: cancel it first (docs/demo.md). */
async function cancelAndEdit() {
  state.userAbort = true;
  state.abort?.abort();
  await state.running?.catch(() => {});
  state.busy = true;
  updateControls();
  hideNotice();
  setStatus("Cancelling the unfinished payment attempt…", "busy");
  let result;
  try {
    result = await state.client.cancel(state.order.id);
  } catch (err) {
    setStatus(`Could not cancel (${errorCode(err) ?? err?.message}). The attempt is kept; try again.`, "error");
    showNotice("", [
      ["Check payment status", resumeAttempt, "check-again"],
      ["Try cancelling again", cancelAndEdit, "cancel-attempt"],
    ]);
    state.userAbort = false;
    setBusy(false);
    return;
  }
  const st = cancelStatus(result);
  log(`cancel: ${st}`);
  state.userAbort = false;
  setBusy(false);
  if (st === "processing") {
    setStatus("Payment in progress, please wait.", "busy");
    await resumeAttempt();
  } else if (st === "unknown") {
    // No clear answer (network): the key is kept, nothing may start until it is resolved.
    setStatus("Could not reach the server to cancel. The attempt is kept; try again.", "error");
    showNotice("", [
      ["Check payment status", resumeAttempt, "check-again"],
      ["Try cancelling again", cancelAndEdit, "cancel-attempt"],
    ]);
  } else if (st === "paid") {
    const payment = result?.payment;
    if (payment) showReceipt(payment);
    setStatus("The payment had already gone through: this is your receipt. Charged once.", "ok");
    await reloadOrder();
  } else {
    setStatus("Attempt cancelled — nothing was charged. The cart is unlocked.", "ok");
    await reloadOrder();
    openEditor();
  }
  refreshLedger();
}

// ---------------------------------------------------------------- cart

function openEditor() {
  if (!state.order || state.order.status !== "unpaid") return;
  state.editing = true;
  const qty = new Map(state.order.items.map((l) => [l.sku, l.quantity]));
  const rows = state.catalog.map((item) => {
    const row = document.createElement("div");
    row.className = "editor-row";
    const id = `qty-${item.sku}`;
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = `${item.name} · ${formatMoney(item.unitPrice, item.currency)}`;
    const input = document.createElement("input");
    Object.assign(input, { type: "number", id, min: "0", max: "100", step: "1", value: String(qty.get(item.sku) ?? 0) });
    input.dataset.sku = item.sku;
    const stock = document.createElement("span");
    stock.className = "muted small";
    stock.textContent = `${item.stock} in stock`;
    row.append(label, input, stock);
    return row;
  });
  $("editor-items").replaceChildren(...rows);
  $("cart-editor").hidden = false;
  updateControls();
  $("editor-items").querySelector("input")?.focus();
}

function closeEditor() {
  state.editing = false;
  $("cart-editor").hidden = true;
  updateControls();
}

async function saveCart(ev) {
  ev.preventDefault();
  const items = [...$("editor-items").querySelectorAll("input[data-sku]")]
    .map((i) => ({ sku: i.dataset.sku, quantity: Math.trunc(Number(i.value)) }))
    .filter((l) => l.quantity > 0);
  if (items.length === 0) {
    setStatus("The cart needs at least one item.", "error");
    return;
  }
  try {
    const order = await state.api.updateCart(state.order.id, { items });
    closeEditor();
    renderOrder(order);
    hideNotice();
    setStatus(`Cart saved. The order is now version ${order.version}.`, "info");
  } catch (err) {
    if (err.code === "PAYMENT_IN_PROGRESS") setStatus("A payment is in progress for this order; the cart is locked.", "warn");
    else if (err.code === "ORDER_ALREADY_PAID") setStatus("This order is already paid and cannot change.", "warn");
    else setStatus(`Could not save the cart (${err.code ?? err.message}).`, "error");
  }
}

/** Dev: another tab edits the cart behind this page's back; its version goes stale. */
async function changeElsewhere() {
  const o = state.order;
  if (!o?.items.length) return;
  const items = o.items.map((l, i) => ({ sku: l.sku, quantity: i === 0 ? Math.min(l.quantity + 1, 100) : l.quantity }));
  try {
    const updated = await state.api.updateCart(o.id, { items });
    log(`dev: another tab changed the cart; the server is at version ${updated.version}, this page still shows ${o.version}`);
  } catch (err) {
    log(`dev: the other tab could not change the cart (${err.code ?? err.message})`);
  }
}

// ---------------------------------------------------------------- ledger and mailbox (dev)

async function refreshMailbox() {
  const summary = $("mailbox-summary");
  if (!state.order || state.mailbox === false) return;
  try {
    const { mails = [] } = (await state.api.mailbox(state.order.id)) ?? {};
    state.mailbox = true;
    const items = mails.map((m) => {
      const li = document.createElement("li");
      const subject = document.createElement("strong");
      subject.textContent = m.subject;
      const body = document.createElement("span");
      body.textContent = ` — ${m.body}`;
      li.append(subject, body);
      return li;
    });
    $("mail-list").replaceChildren(...items);
    summary.textContent = mails.length ? `${mails.length} mail${mails.length === 1 ? "" : "s"}` : "No mail yet.";
  } catch (err) {
    if (err.status === 404 || err.status === 405) {
      state.mailbox = false; // this server build has no mailbox; stop asking
      summary.textContent = UNAVAILABLE;
    } else {
      summary.textContent = `Mailbox not reachable (${err.code ?? err.message}).`;
    }
  }
}

async function refreshLedger() {
  refreshMailbox();
  const summary = $("ledger-summary");
  if (!state.order) return;
  if (state.stripe) {
    summary.textContent = "Stripe mode: the charges are in Stripe's dashboard (localstripe: GET /v1/payment_intents).";
    return;
  }
  if (!state.providerUrl) {
    summary.textContent = "Provider URL unknown: open the page with ?provider=URL.";
    return;
  }
  try {
    const charges = await fetchLedger(state.providerUrl, state.order.id);
    const rows = charges.map((c) => {
      const tr = document.createElement("tr");
      for (const [v, cls] of [
        [shortId(c.id, 12), ""],
        [c.paymentMethodId.replace(/^pm_card_/, ""), ""],
        [formatMoney(c.amount, c.currency), "num"],
        [c.status, `st-${c.status}`],
      ]) {
        const td = document.createElement("td");
        td.textContent = v;
        if (cls) td.className = cls;
        tr.append(td);
      }
      return tr;
    });
    $("ledger-rows").replaceChildren(...rows);
    const charged = charges.filter((c) => c.status === "succeeded" || c.status === "refunded").length;
    const declined = charges.filter((c) => c.status === "declined").length;
    let text = `${charged} charge${charged === 1 ? "" : "s"}`;
    if (declined) text += `, ${declined} declined`;
    const waiting = charges.filter((c) => c.status === "requires_action").length;
    if (waiting) text += `, ${waiting} waiting for the bank`;
    if (charged === 1) text += " — charged once ✓";
    if (charged > 1) text += " — CHARGED MORE THAN ONCE";
    summary.textContent = text;
    summary.dataset.charged = String(charged);
  } catch (err) {
    summary.textContent =
      err instanceof TypeError
        ? `The provider at ${state.providerUrl} does not let this page read its ledger (no CORS).`
        : `Ledger not reachable from the page (${err.message}).`;
  }
}

// ---------------------------------------------------------------- dev panel

/**
 * Which later-issue dev features this server build has. Probed without side effects: the
 * OpenAPI document names the fault values it accepts, and a redelivery for an order that has
 * no events tells whether the provider has a webhook URL (it answers 400 without one).
 */
async function detectFeatures(config) {
  const faults = new Set(config?.faults ?? []);
  try {
    if (JSON.stringify(await state.api.openapi()).includes("crash-after-charge")) faults.add("crash-after-charge");
  } catch {
    // no document: only /dev/config counts
  }
  let webhooks = false;
  if (state.providerUrl) {
    try {
      await redeliverWebhooks(state.providerUrl, "payonce-demo-probe-no-such-order");
      webhooks = true;
    } catch {
      webhooks = false;
    }
  }
  return { faults, webhooks };
}

function markUnavailable(el) {
  el.title = UNAVAILABLE;
  el.classList.add("unavailable");
  el.append(Object.assign(document.createElement("span"), { className: "muted small", textContent: ` (${UNAVAILABLE})` }));
}

function setupDevPanel({ faults, webhooks }) {
  const drop = $("fault-drop");
  drop.addEventListener("change", () => log(`dev: lose the next response ${drop.checked ? "on" : "off"}`));
  const offline = $("fault-offline");
  offline.addEventListener("change", () => {
    state.devnet.offline = offline.checked;
    log(`dev: payment requests ${offline.checked ? "blocked (network down)" : "flow again"}`);
  });
  // Issue-4 server features: enabled only when this build has them.
  const crash = $("fault-crash");
  if (faults.has("crash-after-charge")) {
    crash.disabled = false;
    crash.addEventListener("change", () => {
      state.devnet.nextFault = crash.checked ? "crash-after-charge" : null;
      log(`dev: crash after charge ${crash.checked ? "armed for the next payment" : "off"}`);
    });
    state.devnet.onConsumed(() => {
      crash.checked = false;
    });
  } else {
    crash.disabled = true;
    markUnavailable($("crash-label"));
  }
  const dup = $("dup-webhooks");
  if (webhooks) {
    dup.disabled = false;
    dup.addEventListener("click", async () => {
      try {
        const n = await redeliverWebhooks(state.providerUrl, state.order.id);
        log(`dev: the provider sends this order's ${n} webhook event(s) again`);
      } catch (err) {
        log(`dev: redelivery failed (${err.message})`);
      }
      setTimeout(() => {
        reloadOrder().catch(() => {});
        refreshLedger();
      }, 1000);
    });
  } else {
    dup.disabled = true;
    markUnavailable(dup);
  }
  $("user-id").value = params.get("user") || "demo";
  $("switch-user").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (state.busy) return;
    // Payment keys belong to one user: clear them on logout.
    const removed = state.client.clearAll();
    log(`dev: cleared ${removed} stored payment attempt(s) before switching user`);
    const url = new URL(location.href);
    url.search = "";
    url.searchParams.set("user", $("user-id").value);
    location.assign(url);
  });
  $("change-elsewhere").addEventListener("click", changeElsewhere);
  $("ledger-refresh").addEventListener("click", refreshLedger);
  $("new-order").addEventListener("click", async () => {
    if (state.busy) return;
    const url = new URL(location.href);
    url.searchParams.delete("order");
    history.replaceState(null, "", url);
    $("receipt").hidden = true;
    hideNotice();
    await openOrder(null);
    setStatus("New order created.", "info");
  });
}

// ---------------------------------------------------------------- start

async function openOrder(orderId) {
  let order = null;
  if (orderId) {
    try {
      order = await state.api.getOrder(orderId);
    } catch (err) {
      log(`order ${orderId} not found (${err.code}); starting a new one`);
    }
  }
  if (!order) {
    const first = state.catalog.filter((i) => i.stock > 0).slice(0, 2);
    order = await state.api.createOrder(first.map((i, n) => ({ sku: i.sku, quantity: n + 1 })));
    const url = new URL(location.href);
    url.searchParams.set("order", order.id);
    history.replaceState(null, "", url);
  }
  renderOrder(order);
  refreshLedger();
  return order;
}

async function main() {
  renderMethods();
  const baseUrl = import.meta.env.VITE_PAYONCE_API || location.origin;
  state.api = createApi(baseUrl);
  // Before the SDK exists, so every request it makes goes through the dev network layer.
  state.devnet = installDevNetwork({ onEvent: log });

  const userId = params.get("user") || "demo";
  try {
    await state.api.signIn(userId);
  } catch (err) {
    const hint = err.code === "DEV_MODE_REQUIRED" ? " Start the server with --dev." : "";
    throw new Error(`sign-in failed (${err.code ?? err.message}).${hint}`);
  }
  $("who").textContent = `Signed in as ${userId} (dev session) · API ${state.api.base}`;

  const [sdk, catalog, config] = await Promise.all([loadSdk(), state.api.catalog(), state.api.devConfig()]);
  state.catalog = catalogItems(catalog);
  state.providerUrl = params.get("provider") || config?.providerUrl || null;
  if (params.get("stripe")) {
    state.stripe = await loadStripe(params.get("stripe"), params.get("stripeKey") || "pk_test_payonce");
    // The ledger panel reads the mock provider's ledger; Stripe's is its dashboard.
    state.providerUrl = null;
  }

  const options = {
    baseUrl,
    storage: "session",
    onWarning: (code) => log(`sdk warning: ${code}`),
    // The cross-tab events: this tab waits for another tab's payment, then takes it over.
    onEvent: (e) => {
      if (e.type === "tabWait" || e.type === "tabAdopt") log(`sdk event: ${e.type}${e.key ? ` (key ${shortId(e.key)})` : ""}`);
    },
  };
  for (const k of ["requestTimeoutMs", "deadlineMs", "longWaitMs"]) {
    const v = numParam(k);
    if (v !== undefined) options[k] = v;
  }
  state.client = await sdk.PayonceClient.create(options);
  if (state.stripe) {
    // docs/integrate.md's Stripe flow, for www/e2e/stripe-integrate.test.mjs to run in this
    // page (which has the SDK and Stripe.js loaded).
    window.payonceIntegration = { client: state.client, stripe: state.stripe, order: () => state.order, ...integrate };
  }

  setupDevPanel(await detectFeatures(config));
  $("pay").addEventListener("click", onPay);
  $("edit-cart").addEventListener("click", openEditor);
  $("editor-cancel").addEventListener("click", closeEditor);
  $("cart-editor").addEventListener("submit", saveCart);

  const order = await openOrder(params.get("order"));
  document.body.dataset.ready = "true";

  // After a refresh the saved key is reused and the latest status fetched.
  // Also when the order already shows as paid: the replay brings this attempt's receipt and
  // lets the SDK drop the key (only a final answer may remove it).
  const pending = await state.client.pendingAttempt(order.id);
  if (pending) {
    log(`found an unfinished attempt for this order (key ${shortId(pending.key ?? "")}); checking it`);
    const m = pending.paymentMethodId;
    const radio = m && document.querySelector(`input[name="method"][value="${CSS.escape(m)}"]`);
    if (radio) radio.checked = true;
    await resumeAttempt();
  } else if (order.status === "unpaid") {
    setStatus("Ready to pay.", "idle");
  } else {
    setStatus("This order is paid. It was charged once.", "ok");
  }
}

main().catch((err) => {
  document.body.dataset.ready = "error";
  setStatus(`The checkout could not start: ${err?.message ?? err}`, "error");
});

