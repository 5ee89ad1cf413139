// Seed 003, "what if sessionStorage is lost": two tabs have two sessionStorages, so two keys
// for the same order. The order rule (one active payment per order) stops the second charge.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario } from "./harness.mjs";

scenario(test, "two tabs paying the same order → one charge", async (env) => {
  const ctx = await env.newContext();
  const a = await env.open(ctx);
  const orderId = await a.orderId();
  const b = await env.open(ctx, { order: orderId });
  assert.equal(await b.orderId(), orderId, "both tabs show the same order");

  // Tab A pays with the slow provider; tab B pays while A's charge is under way.
  await a.chooseMethod("pm_card_slow");
  const sent = a.page.waitForRequest((r) => r.method() === "POST" && r.url().endsWith("/pay"));
  await a.page.click("#pay");
  await sent;
  await b.page.click("#pay");

  await b.waitForStatus(/already (being )?paid/);
  await a.waitForStatus(/^Paid\./);

  assert.notEqual(a.keys()[0], b.keys()[0], "each tab made its own key");
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  assert.equal(charges[0].paymentMethodId, "pm_card_slow", "the charge is tab A's");
  assert.equal(await b.page.locator("#receipt").isVisible(), false, "tab B charged nothing, so shows no receipt of its own");

  // Tab B, reloaded, shows the order as paid by tab A.
  await b.reload();
  await b.waitForStatus(/paid/i);
  assert.equal((await b.receipt())?.chargeId, charges[0].id);
  assert.equal((await env.charged(orderId)).length, 1);
});
