// 3-D Secure with Stripe: the server runs --provider stripe against localstripe; the page
// loads Stripe.js from localstripe's stand-in (/js.stripe.com/v3/) and pays with the 3-D
// Secure card (a PaymentMethod the test made through localstripe's API, as Stripe.js would:
// the card number never reaches payonce). The server answers ACTION_REQUIRED with
// next = { type: "stripe", clientSecret }; the page calls stripe.confirmCardPayment, the
// customer completes the challenge, and the page pays again with the same checkout and key.
// One succeeded intent in localstripe's own list.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

const THREE_DS_CARD = "4000002500003155";

scenario(
  test,
  "Stripe 3-D Secure → confirmCardPayment → same checkout → paid, one succeeded intent",
  async (env) => {
    const ls = env.localstripe;
    const pm = await ls.paymentMethod(THREE_DS_CARD);
    const ctx = await env.newContext();
    const tab = await env.open(ctx, { stripe: ls.url, methods: `${pm}:3-D Secure card` });
    const orderId = await tab.orderId();

    await tab.chooseMethod(pm);
    await tab.page.click("#pay");
    await tab.waitForStatus(/Confirm the payment with your bank/);
    assert.deepEqual(
      tab.payResponses.map((r) => [r.status, r.code]),
      [[402, "ACTION_REQUIRED"]],
    );
    const waiting = await ls.intentsOf(orderId);
    assert.equal(waiting.length, 1, `one intent, waiting: ${JSON.stringify(waiting)}`);
    assert.equal(waiting[0].status, "requires_action");

    // Stripe.js's challenge (localstripe's stand-in: a modal in the page).
    await tab.page.click("#confirm-bank");
    await tab.page.getByRole("button", { name: "Complete authentication" }).click();

    await tab.waitForStatus(/^Paid\./);
    const receipt = await tab.receipt();
    assert.ok(receipt, "the receipt is shown");
    assert.equal(tab.keys().length, 1, `every pay request used one key: ${JSON.stringify(tab.payRequests)}`);
    const intents = await until(async () => {
      const all = await ls.intentsOf(orderId);
      return all.every((i) => i.status === "succeeded") && all;
    }, "the intent succeeded at localstripe");
    assert.equal(intents.length, 1, `exactly one intent: ${JSON.stringify(intents)}`);
    assert.equal(intents.filter((i) => i.status === "succeeded").length, 1);
    assert.equal(receipt.chargeId, intents[0].id);
  },
  { stripe: true },
);
