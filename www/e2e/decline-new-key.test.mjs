// A clear decline is final and nothing was charged, so the key is dropped and the
// next Pay (another card) uses a new key.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario } from "./harness.mjs";

scenario(test, "decline → new key on the next Pay → one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();

  await tab.chooseMethod("pm_card_decline");
  await tab.page.click("#pay");
  await tab.waitForStatus(/declined/i);
  assert.match(await tab.status(), /Nothing was charged/);
  assert.equal(await tab.page.locator("#receipt").isVisible(), false);
  await tab.page.locator("#pay:enabled").waitFor({ timeout: 5000 }); // the customer may try again
  assert.equal((await env.charged(orderId)).length, 0, "a decline moves no money");
  const declinedKeys = tab.keys();
  assert.equal(declinedKeys.length, 1);

  await tab.chooseMethod("pm_card_approve");
  await tab.page.click("#pay");
  await tab.waitForStatus(/^Paid\./);

  const keys = tab.keys();
  assert.equal(keys.length, 2, `the second Pay used a new key: ${JSON.stringify(tab.payRequests)}`);
  assert.notEqual(keys[1], declinedKeys[0]);
  const ledger = await env.ledger(orderId);
  const charged = ledger.filter((c) => c.status === "succeeded");
  assert.equal(charged.length, 1, `charged once: ${JSON.stringify(ledger)}`);
  assert.equal(charged[0].paymentMethodId, "pm_card_approve");
  for (const c of ledger.filter((c) => c.status === "declined")) {
    assert.notEqual(c.providerKey, charged[0].providerKey, "the decline and the charge are two attempts");
  }
});
