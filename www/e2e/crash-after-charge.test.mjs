// "backend crashes mid-payment": the provider charged, the server died before saving
// the result, so K1 is stuck in `processing` and nobody knows whether money moved. The page
// keeps checking with K1; the restarted server never charges again for a processing key, asks
// the provider about K1's provider key (reconciliation) and settles it; the page shows the
// receipt. The crash is real: the API process is SIGKILLed while the provider holds the
// charge (the slow test card answers after 4 s), and the provider runs as its own process, so
// its ledger survives.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

const SERVER_FLAGS = [
  // Tokens must survive the restart (the page's session cookie).
  "--session-secret", "e2e-crash-test-session-secret-0123456789",
  // A short lease (it must exceed the 3 s provider timeout) and frequent reconciliation
  // rounds, so the stuck attempt is settled within seconds instead of minutes.
  "--lease-ms", "4000",
  "--jobs-interval-ms", "1000",
];

scenario(
  test,
  "crash after charge → checking → reconciliation → receipt, one charge",
  async (env) => {
    const ctx = await env.newContext();
    const tab = await env.open(ctx);
    const orderId = await tab.orderId();

    await tab.chooseMethod("pm_card_slow");
    await tab.page.click("#pay");
    // The provider has charged (its ledger says so) but has not answered yet: crash now.
    await until(async () => (await env.charged(orderId)).length === 1, "the provider charged");
    await env.crashApi();
    await tab.waitForStatus(/^Checking payment status…$/);
    await env.restartApi();

    await tab.waitForStatus(/^Paid\./, 60_000);
    const history = await tab.statusHistory();
    assert.ok(history.includes("Checking payment status…"), `the page checked: ${JSON.stringify(history)}`);
    assert.ok(!history.some((s) => /declined|failed/i.test(s)), `never shown as a failure: ${JSON.stringify(history)}`);
    assert.ok(tab.payRequests.length >= 2, "the page asked the restarted server");
    assert.deepEqual(tab.keys(), [tab.payRequests[0].key], "always with the same key");

    const charges = await env.charged(orderId);
    assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
    assert.equal((await tab.receipt())?.chargeId, charges[0].id, "the receipt names the charge made before the crash");
    await tab.reload();
    await tab.waitForStatus(/paid/i);
    assert.equal((await env.charged(orderId)).length, 1);
  },
  { separateProvider: true, extraArgs: SERVER_FLAGS },
);
