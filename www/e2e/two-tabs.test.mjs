// "Keys stop duplicate requests. Order rules stop duplicate payments for the same
// order." Two tabs have two sessionStorages.
//  - Same browser: the SDK coordinates the tabs (a Web Lock per order, and the lock that shows
//    which attempt a tab is sending, src/web/tabs.rs): tab B waits for tab A, then adopts A's
//    attempt, so there is one key, one charge, and both tabs show it paid (B: by the other
//    tab), every time.
//  - Another device (another browser profile, same user): nothing is shared on the client, so
//    the server's one-active-payment-per-order rule is what refuses tab B (busy), and B's
//    refused key is tombstoned.
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

/** The same browser: tab B adopts tab A's attempt. One key, one charge, both tabs paid. */
async function raceInOneBrowser(env, ctx, round) {
  const a = await env.open(ctx);
  const b = await env.open(ctx, { order: await a.orderId() });
  assert.equal(await b.orderId(), await a.orderId(), "both tabs show the same order");
  const { orderId, charges, bStatus } = await payFromTwoTabs(env, a, b);
  // Tab B charged nothing itself (`byThisAttempt: false`, npm/README.md): it says the order
  // was paid in another tab, so a shop's purchase analytics fire once, in tab A.
  assert.match(bStatus, /^This order was already paid/, `round ${round}: tab B is told the other tab paid`);
  assert.deepEqual(
    [...new Set([...a.keys(), ...b.keys()])],
    a.keys(),
    `round ${round}: one key for the order (tab B sent tab A's, never its own)`,
  );
  assert.equal(a.keys().length, 1, `round ${round}: one key`);
  assert.equal((await b.receipt())?.chargeId, charges[0].id, `round ${round}: tab B shows the order's one charge`);
  const log = await b.page.locator("#log").innerText();
  assert.match(log, /sdk: waitingForOtherTab/, `round ${round}: tab B said it waits for the other tab`);
  assert.match(log, /sdk event: tabAdopt/, `round ${round}: tab B said it adopted tab A's attempt`);
  return { a, b, orderId, charges };
}

scenario(test, "two tabs paying the same order → one key, one charge, both paid", async (env) => {
  const ctx = await env.newContext();
  const { b, orderId, charges } = await raceInOneBrowser(env, ctx, 1);

  await b.reload();
  await b.waitForStatus(/paid/i);
  assert.equal((await b.receipt())?.chargeId, charges[0].id, "reloaded, tab B shows the order paid by tab A");
  assert.equal((await env.charged(orderId)).length, 1);
});

scenario(
  test,
  "the slow two-tab race, 50 times → one key, one charge, both tabs paid, every time",
  async (env) => {
    // Five browser profiles race side by side, ten rounds each, every round on its own order
    // (the tabs coordinate per order): 50 races in about a fifth of the time one after another.
    const lanes = 5;
    const lane = async (l) => {
      const ctx = await env.newContext();
      for (let i = 0; i < 50 / lanes; i++) {
        const { a, b } = await raceInOneBrowser(env, ctx, l * (50 / lanes) + i + 1);
        await a.page.close();
        await b.page.close();
      }
      await ctx.close();
    };
    await Promise.all(Array.from({ length: lanes }, (_, l) => lane(l)));
    env.pages = env.pages.filter((p) => !p.isClosed());
  },
  { timeout: 900_000 },
);

scenario(test, "the same order paid from another device → the server refuses the second payment", async (env) => {
  const a = await env.open(await env.newContext());
  const b = await env.open(await env.newContext(), { order: await a.orderId() });
  assert.equal(await b.orderId(), await a.orderId(), "same user, same order");

  const { bStatus, charges } = await payFromTwoTabs(env, a, b);
  assert.ok(b.payRequests.length >= 1, "device B did send its payment");
  assert.notEqual(b.keys()[0], a.keys()[0], "with its own key");
  await until(() => b.payResponses.length >= 1, "device B got an answer");
  // Still running when B's request arrived: busy; already paid: paid elsewhere, A's receipt.
  const refusal = [b.payResponses[0].status, b.payResponses[0].code];
  assert.ok(
    [409].includes(refusal[0]) && ["PAYMENT_ALREADY_ACTIVE", "ORDER_ALREADY_PAID"].includes(refusal[1]),
    `the server refused device B's key: the order is being paid or paid (${refusal})`,
  );
  assert.match(bStatus, /already (being )?paid/);
  assert.equal(b.payRequests.length, 1, "device B never resent its refused key");
  const bReceipt = await b.receipt();
  if (bReceipt) assert.equal(bReceipt.chargeId, charges[0].id, "device B shows the order's one charge, not one of its own");
});
