// "Pay returns 409 ORDER_CHANGED → the order changed elsewhere (another tab). Reload
// the checkout, show the new total, and let the user confirm." The stale key was never
// accepted; the confirming Pay uses a new key and charges the new total once.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, money } from "./harness.mjs";

scenario(test, "order changed in another tab → review → pay the new total once", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();
  const v1 = await tab.orderVersion();
  const v1Amount = await tab.page.locator("#order-amount").textContent();

  // The dev panel edits the cart on the server without refreshing this page.
  await tab.page.click("#change-elsewhere");
  await tab.page.locator("#log li", { hasText: "another tab changed the cart" }).waitFor();
  assert.equal(await tab.orderVersion(), v1, "this page still shows the old version");

  await tab.page.click("#pay");
  await tab.waitForStatus(/order changed — please review/);
  await tab.page.locator("#review-edit").waitFor();
  const v2 = await tab.orderVersion();
  assert.ok(v2 > v1, "the page reloaded the order");
  const v2Amount = await tab.page.locator("#order-amount").textContent();
  assert.notEqual(v2Amount, v1Amount, "the new total is shown");
  assert.equal((await env.ledger(orderId)).length, 0, "nothing reached the provider");
  await tab.screenshot("order-changed");

  await tab.page.click("#pay");
  await tab.waitForStatus(/^Paid\./);
  const keys = tab.keys();
  assert.equal(keys.length, 2, `the confirmation used a new key: ${JSON.stringify(tab.payRequests)}`);
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  assert.equal(money(charges[0].amount, charges[0].currency), v2Amount, "the new total was charged");
});
