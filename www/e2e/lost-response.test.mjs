// "the response is lost": the server charges, the answer never arrives, the SDK
// retries with the same key and the saved result comes back. One receipt, one charge.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, money } from "./harness.mjs";

scenario(test, "lost response → retry with the same key → one receipt, one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();

  await tab.page.check("#fault-drop");
  await tab.page.click("#pay");
  await tab.waitForStatus(/^Paid\./);

  const history = await tab.statusHistory();
  assert.ok(history.includes("Checking payment status…"), `the page said it was checking: ${JSON.stringify(history)}`);

  // The first request asked the server to drop its answer; every retry reused its key.
  assert.ok(tab.payRequests.length >= 2, `a retry was sent: ${JSON.stringify(tab.payRequests)}`);
  assert.equal(tab.payRequests[0].fault, "drop-response");
  assert.deepEqual(tab.keys(), [tab.payRequests[0].key], "every pay request carried one key");

  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  const receipt = await tab.receipt();
  assert.ok(receipt, "the receipt is shown");
  assert.equal(receipt.chargeId, charges[0].id, "the receipt names the provider's only charge");
  assert.equal(receipt.amount, money(charges[0].amount, charges[0].currency));
  assert.equal(await tab.page.locator("#pay").isDisabled(), true, "a paid order cannot be paid again");
  await tab.page.locator("#ledger-refresh").click();
  await tab.page.waitForFunction(() => /charged once/.test(document.getElementById("ledger-summary").textContent));
  await tab.screenshot("paid-receipt");

  // A refresh shows the paid order, and still one charge.
  await tab.reload();
  await tab.waitForStatus(/paid/i);
  assert.ok(await tab.receipt(), "the receipt survives a refresh");
  assert.equal((await env.charged(orderId)).length, 1);
  assert.deepEqual(tab.consoleErrors, []);
});
