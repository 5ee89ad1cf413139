// "user changes the cart after a timeout", branch "K1 never reached the backend":
// the page cancels K1 (the server stores a tombstone), the cart unlocks, the edit bumps the
// version, Pay uses a new key K2 and the provider charges the new total only. A late K1
// arriving afterwards is refused.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, money } from "./harness.mjs";

scenario(test, "cart change after a timeout → cancel → new key → one charge for the new version only", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();
  const v1 = await tab.orderVersion();
  const v1Amount = await tab.page.locator("#order-amount").textContent();

  // The network swallows every pay request: the SDK cannot know what happened.
  const payUrl = /\/orders\/[^/]+\/pay$/;
  await tab.page.route(payUrl, (route) => route.abort("timedout"));
  await tab.page.click("#pay");
  await tab.waitForStatus(/^Checking payment status…$/);
  await tab.page.locator("#cancel-attempt").waitFor();
  assert.equal(await tab.page.locator("#edit-cart").isDisabled(), true, "the cart is locked while the outcome is unknown");
  await tab.screenshot("checking-status");
  const k1 = tab.payRequests[0].key;
  assert.deepEqual(tab.keys(), [k1], "retries reuse the key");

  // Cancel while the network still swallows pay requests: no retry of K1 can slip through
  // before the cancel (the tombstone) lands. The cancel request itself goes through.
  await tab.page.click("#cancel-attempt");
  await tab.waitForStatus(/cancelled — nothing was charged/);
  await tab.page.locator("#cart-editor").waitFor();
  await tab.page.unroute(payUrl);

  // Edit the cart: one more unit of the first item.
  const first = tab.page.locator("#editor-items input[data-sku]").first();
  await first.fill(String(Number(await first.inputValue()) + 1));
  await tab.page.click('#cart-editor button[type="submit"]');
  await tab.waitForStatus(/Cart saved/);
  const v2 = await tab.orderVersion();
  assert.ok(v2 > v1, `the edit bumped the version (${v1} → ${v2})`);
  const v2Amount = await tab.page.locator("#order-amount").textContent();
  assert.notEqual(v2Amount, v1Amount);

  await tab.page.click("#pay");
  await tab.waitForStatus(/^Paid\./);
  const k2 = tab.payRequests.at(-1).key;
  assert.notEqual(k2, k1, "the new intention got a new key");

  // The late K1 (say, stuck in the network) finally reaches the server: refused, no charge.
  const token = await env.token();
  const late = await fetch(`${env.api}/orders/${encodeURIComponent(orderId)}/pay`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": k1, Authorization: `Bearer ${token}` },
    body: JSON.stringify({ orderVersion: v1, paymentMethodId: "pm_card_approve" }),
  });
  assert.equal(late.status, 409);
  assert.equal((await late.json()).code, "ATTEMPT_CANCELLED");

  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  assert.equal(money(charges[0].amount, charges[0].currency), v2Amount, "the charge is for the new version's total");
  assert.equal((await tab.receipt())?.amount, v2Amount);
});
