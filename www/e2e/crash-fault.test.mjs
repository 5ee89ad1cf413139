// "backend crashes mid-payment", driven from the dev panel: "Crash after charge"
// sends `Payonce-Dev-Fault: crash-after-charge` with the next payment, and the dev server
// aborts its whole process right after the provider charged, before saving the outcome.
// The page keeps checking with the same key; once the server is back (same port, database and
// embedded provider state), the webhook or reconciliation settles the attempt and the page
// shows the receipt. The provider charged once.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

scenario(
  test,
  "crash after charge (dev fault) → checking → webhook or reconciliation → receipt, one charge",
  async (env) => {
    const ctx = await env.newContext();
    const tab = await env.open(ctx);
    const orderId = await tab.orderId();

    const crash = tab.page.locator("#fault-crash");
    assert.equal(await crash.isEnabled(), true, "this server build offers the crash fault (GET /dev/config)");
    await crash.check();
    await tab.page.click("#pay");
    await env.server.exited; // the server aborted itself after the charge
    await until(async () => (await tab.statusHistory()).includes("Checking payment status…"), "the page checks");
    assert.equal(tab.payRequests[0].fault, "crash-after-charge");
    await env.restartApi();
    assert.equal((await env.charged(orderId)).length, 1, "the provider's charge survived the crash");

    await tab.waitForStatus(/^Paid\./, 90_000);
    assert.deepEqual(tab.keys(), [tab.payRequests[0].key], "every request carried the same key");
    const charges = await env.charged(orderId);
    assert.equal(charges.length, 1, `charged once: ${JSON.stringify(charges)}`);
    assert.equal((await tab.receipt())?.chargeId, charges[0].id);
  },
  // Tokens must survive the restart (the page's session cookie).
  { extraArgs: ["--session-secret", "e2e-crash-fault-session-secret-0123456789"] },
);
