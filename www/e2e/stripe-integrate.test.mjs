// docs/integrate.md's Stripe flow, run as written: www/src/integrate.js (the file the doc
// shows byte for byte) in Chromium, with Stripe.js from localstripe's stand-in and the server
// on --provider stripe. paymentMethodFromCard → payWithStripe: pay → actionRequired →
// stripe.confirmCardPayment → pay again with the same key → paid, one succeeded intent in
// localstripe's own list.
//
// localstripe's Stripe.js stand-in has no working createPaymentMethod (it resolves nothing),
// so the test gives the page one that does what Stripe.js does from its card frame: it creates
// the PaymentMethod with the card number at Stripe's API (localstripe's), outside the page.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

const THREE_DS_CARD = "4000002500003155";

scenario(
  test,
  "docs/integrate.md: createPaymentMethod → pay → confirmCardPayment → pay again → paid, one intent",
  async (env) => {
    const ls = env.localstripe;
    const ctx = await env.newContext();
    const tab = await env.open(ctx, { stripe: ls.url });
    const orderId = await tab.orderId();
    await tab.page.exposeFunction("localstripePaymentMethod", (number) => ls.paymentMethod(number));

    const running = tab.page.evaluate(async (number) => {
      const it = window.payonceIntegration;
      it.stripe.createPaymentMethod = async ({ type, card }) => ({
        paymentMethod: { id: await window.localstripePaymentMethod(card.number), type },
      });
      const card = { number }; // stands for the mounted Elements card field
      const paymentMethodId = await it.paymentMethodFromCard(it.stripe, card);
      const { id: orderId, version: orderVersion } = it.order();
      const outcome = await it.payWithStripe(it.client, it.stripe, { orderId, orderVersion, paymentMethodId });
      return { kind: outcome.kind, chargeId: outcome.payment?.chargeId ?? null };
    }, THREE_DS_CARD);

    // Stripe.js's challenge (localstripe's stand-in: a modal in the page).
    await tab.page.getByRole("button", { name: "Complete authentication" }).click({ timeout: 30_000 });
    const outcome = await running;
    assert.equal(outcome.kind, "paid", JSON.stringify(outcome));
    // The page's response listener reads each body asynchronously: wait for both.
    const answers = await until(async () => tab.payResponses.length >= 2 && tab.payResponses, "both pay answers read");
    assert.deepEqual(
      answers.map((r) => [r.status, r.code]),
      [
        [402, "ACTION_REQUIRED"],
        [200, null],
      ],
    );
    assert.equal(tab.keys().length, 1, `both pay requests used one key: ${JSON.stringify(tab.payRequests)}`);
    const intents = await until(async () => {
      const all = await ls.intentsOf(orderId);
      return all.length > 0 && all.every((i) => i.status === "succeeded") && all;
    }, "the intent succeeded at localstripe");
    assert.equal(intents.length, 1, `exactly one intent: ${JSON.stringify(intents)}`);
    assert.equal(outcome.chargeId, intents[0].id);
  },
  { stripe: true },
);
