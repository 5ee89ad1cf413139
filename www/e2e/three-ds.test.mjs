// 3-D Secure: the provider needs the customer before it charges. The server answers
// ACTION_REQUIRED with the provider's page; the customer confirms there (a popup); the page
// asks again with the same key and shows the receipt. One key, one charge.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

scenario(test, "3-D Secure → confirm on the bank's page → same key → receipt, one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();

  await tab.chooseMethod("pm_card_3ds");
  await tab.page.click("#pay");
  await tab.waitForStatus(/Confirm the payment with your bank/);
  assert.equal(await tab.page.locator("#receipt").isVisible(), false);
  const waiting = await env.ledger(orderId);
  assert.equal(waiting.length, 1, `one charge, waiting: ${JSON.stringify(waiting)}`);
  assert.equal(waiting[0].status, "requires_action");
  assert.deepEqual(
    tab.payResponses.map((r) => [r.status, r.code]),
    [[402, "ACTION_REQUIRED"]],
  );

  // The bank's page opens in a popup; the customer confirms; the popup closes itself.
  const [popup] = await Promise.all([tab.page.waitForEvent("popup"), tab.page.click("#confirm-bank")]);
  await popup.waitForLoadState();
  assert.ok(popup.url().startsWith(env.providerUrl), `the provider's page: ${popup.url()}`);
  await popup.click("#confirm");
  await until(() => popup.isClosed(), "the bank's popup closes after confirming", 10_000);

  await tab.waitForStatus(/^Paid\./);
  const receipt = await tab.receipt();
  assert.ok(receipt, "the receipt is shown");

  assert.equal(tab.keys().length, 1, `every pay request used one key: ${JSON.stringify(tab.payRequests)}`);
  const ledger = await env.ledger(orderId);
  assert.equal(ledger.length, 1, `exactly one charge in the ledger: ${JSON.stringify(ledger)}`);
  assert.equal(ledger[0].status, "succeeded");
  assert.equal(ledger[0].paymentMethodId, "pm_card_3ds");
  assert.equal(receipt.chargeId, ledger[0].id);
  await tab.page.waitForFunction(() => document.getElementById("ledger-summary").dataset.charged === "1");
});
