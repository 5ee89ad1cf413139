// case c) "provider is slow or timed out → unknown": the provider charged but its
// answer never came in time, so the attempt stays `processing`. The page must not call that a
// failure: it shows the long-wait message, keeps Pay and the cart locked, asks only with the
// same key, and shows the receipt once the server settles the attempt (the provider's webhook,
// or reconciliation by provider key). The provider charged once.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario } from "./harness.mjs";

scenario(test, "provider timeout → long wait → settled by webhook or reconciliation → receipt, one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx, { longWaitMs: 1500 });
  const orderId = await tab.orderId();

  await tab.chooseMethod("pm_card_timeout");
  await tab.page.click("#pay");
  await tab.waitForStatus(/^We're confirming your payment/);
  assert.equal(await tab.page.locator("#pay").isDisabled(), true, "no new payment while one is unresolved");
  assert.equal(await tab.page.locator("#edit-cart").isDisabled(), true, "the cart is locked");
  await tab.screenshot("long-wait");

  await tab.waitForStatus(/^Paid\./, 60_000);
  assert.deepEqual(tab.keys(), [tab.payRequests[0].key], "every check reused the key");
  const history = await tab.statusHistory();
  assert.ok(!history.some((s) => /declined|failed/i.test(s)), `never shown as a failure: ${JSON.stringify(history)}`);

  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `the provider charged once: ${JSON.stringify(charges)}`);
  assert.equal((await tab.receipt())?.chargeId, charges[0].id, "the receipt names that charge");
});
