// "Keys stop duplicate requests. Order rules stop duplicate payments for the same
// order." Two tabs have two sessionStorages, hence two keys for one order.
//  - Same browser: the SDK may coordinate the tabs (Web Locks, BroadcastChannel), so tab B
//    either shows tab A's receipt or is refused; the provider charges once either way.
//  - Another device (another browser profile, same user): nothing is shared on the client, so
//    the server's one-active-payment-per-order rule is what refuses tab B.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

async function payFromTwoTabs(env, a, b) {
  const orderId = await a.orderId();
  // Tab A pays with the slow provider (4 s); tab B presses Pay while A's charge is under way.
  await a.chooseMethod("pm_card_slow");
  const sent = a.page.waitForRequest((r) => r.method() === "POST" && r.url().endsWith("/pay"));
  await a.page.click("#pay");
  await sent;
  await b.page.click("#pay");
  await a.waitForStatus(/^Paid\./);
  const bStatus = await b.waitForStatus(/already (being )?paid|^Paid\./);
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
  assert.equal(charges[0].paymentMethodId, "pm_card_slow", "the charge is tab A's");
  assert.equal((await a.receipt())?.chargeId, charges[0].id);
  return { orderId, charges, bStatus };
}

scenario(test, "two tabs paying the same order → one charge", async (env) => {
  const ctx = await env.newContext();
  const a = await env.open(ctx);
  const b = await env.open(ctx, { order: await a.orderId() });
  assert.equal(await b.orderId(), await a.orderId(), "both tabs show the same order");

  const { orderId, charges, bStatus } = await payFromTwoTabs(env, a, b);
  // Tab B either got tab A's receipt from the SDK, or was refused by the server and then shows
  // the order as paid (or as being paid); any receipt it shows is the order's one charge.
  assert.match(bStatus, /already (being )?paid|^Paid\./);
  const bReceipt = await b.receipt();
  if (bReceipt) assert.equal(bReceipt.chargeId, charges[0].id, "tab B shows the order's one charge, not one of its own");
  if (b.keys().length) assert.notEqual(b.keys()[0], a.keys()[0], "each tab made its own key");

  await b.reload();
  await b.waitForStatus(/paid/i);
  assert.equal((await b.receipt())?.chargeId, charges[0].id, "reloaded, tab B shows the order paid by tab A");
  assert.equal((await env.charged(orderId)).length, 1);
});

scenario(test, "the same order paid from another device → the server refuses the second payment", async (env) => {
  const a = await env.open(await env.newContext());
  const b = await env.open(await env.newContext(), { order: await a.orderId() });
  assert.equal(await b.orderId(), await a.orderId(), "same user, same order");

  const { bStatus, charges } = await payFromTwoTabs(env, a, b);
  assert.ok(b.payRequests.length >= 1, "device B did send its payment");
  assert.notEqual(b.keys()[0], a.keys()[0], "with its own key");
  await until(() => b.payResponses.length >= 1, "device B got an answer");
  assert.deepEqual(
    [b.payResponses[0].status, b.payResponses[0].code],
    [409, "PAYMENT_ALREADY_ACTIVE"],
    "the server refused device B: the order is paid or being paid",
  );
  assert.match(bStatus, /already (being )?paid/);
  const bReceipt = await b.receipt();
  if (bReceipt) assert.equal(bReceipt.chargeId, charges[0].id, "device B shows the order's one charge, not one of its own");
});
