// the user refreshes while the payment is processing. The key was saved in
// sessionStorage before sending, so the reloaded page asks again with the same key and shows
// the receipt; the provider charged once.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario } from "./harness.mjs";

scenario(test, "refresh during processing → same key → receipt, one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();

  // The slow provider takes 4 s, so the refresh lands while the charge is under way.
  await tab.chooseMethod("pm_card_slow");
  const sent = tab.page.waitForRequest((r) => r.method() === "POST" && r.url().endsWith("/pay"));
  await tab.page.click("#pay");
  await sent;
  await tab.waitForStatus(/^Processing…$/);
  const firstKey = tab.payRequests[0].key;

  await tab.page.reload();
  await tab.ready();
  await tab.waitForStatus(/^Paid\./);

  assert.ok(tab.payRequests.length >= 2, "the reloaded page asked again");
  assert.deepEqual(tab.keys(), [firstKey], "the reloaded page reused the saved key");
  const history = await tab.statusHistory();
  assert.ok(history.includes("Checking payment status…"), `after the refresh the page checked: ${JSON.stringify(history)}`);
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  assert.equal((await tab.receipt())?.chargeId, charges[0].id);
  const stored = JSON.stringify(await tab.page.evaluate(() => ({ ...sessionStorage })));
  assert.ok(!stored.includes(firstKey), `the key is removed once paid: ${stored}`);
});
