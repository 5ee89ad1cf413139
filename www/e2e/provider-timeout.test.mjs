// Seed 003, case c) "provider is slow or timed out → unknown": the provider charged but its
// answer never came. The page must not call it a failure: it keeps checking with the same key,
// then shows the long-wait message; the cart stays locked and no second charge can start.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario } from "./harness.mjs";

scenario(test, "provider timeout → checking, then the long-wait message; never a second charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx, { longWaitMs: 3000 });
  const orderId = await tab.orderId();

  await tab.chooseMethod("pm_card_timeout");
  await tab.page.click("#pay");
  await tab.waitForStatus(/^We're confirming your payment/);
  assert.equal(await tab.page.locator("#pay").isDisabled(), true, "no new payment while one is unresolved");
  assert.equal(await tab.page.locator("#edit-cart").isDisabled(), true, "the cart is locked");
  await tab.screenshot("long-wait");

  assert.equal(tab.keys().length, 1, `every check reused the key: ${JSON.stringify(tab.payRequests)}`);
  assert.ok(tab.payRequests.length >= 2, "the page kept checking");
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `the provider charged once: ${JSON.stringify(charges)}`);

  // Another device (nothing shared on the client, another key) cannot start a second charge.
  const other = await env.open(await env.newContext(), { order: orderId });
  await other.page.click("#pay");
  await other.waitForStatus(/already (being )?paid/);
  assert.equal((await env.charged(orderId)).length, 1, "still one charge");
});
