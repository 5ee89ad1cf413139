// A double click on Pay. The button is disabled while in flight (UX), and the key is
// the real protection: one key, one charge.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario } from "./harness.mjs";

scenario(test, "double-click on Pay → one key, one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();

  await tab.page.dblclick("#pay");
  // And a burst of clicks in one task, faster than any rendering.
  await tab.page.evaluate(() => {
    const b = document.getElementById("pay");
    for (let i = 0; i < 5; i++) b.click();
  });
  assert.equal(await tab.page.locator("#pay").isDisabled(), true, "Pay is disabled while a payment is in flight or done");
  await tab.waitForStatus(/^Paid\./);

  assert.equal(tab.keys().length, 1, `one key for all clicks: ${JSON.stringify(tab.payRequests)}`);
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  assert.equal(await tab.page.locator("#receipt").count(), 1);
  assert.equal((await tab.receipt())?.chargeId, charges[0].id);
});
