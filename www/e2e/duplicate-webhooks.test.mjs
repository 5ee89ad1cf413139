// Webhooks are delivered at least once, so duplicates are normal. After a payment, the dev
// panel asks the provider to send the order's webhook events again; the server must treat
// them as duplicates: the order stays paid with the same payment, and nothing is charged.
import test from "node:test";
import assert from "node:assert/strict";
import { scenario, until } from "./harness.mjs";

/** payonce_webhook_events_total{result="duplicate"} from GET /metrics (0 when absent). */
async function duplicateWebhooks(env) {
  const text = await (await fetch(`${env.api}/metrics`)).text();
  const m = /^payonce_webhook_events_total\{result="duplicate"\} (\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

scenario(test, "duplicate webhooks after a payment → still one payment, one charge", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();
  await tab.page.click("#pay");
  await tab.waitForStatus(/^Paid\./);
  const receipt = await tab.receipt();
  const before = await duplicateWebhooks(env);

  const button = tab.page.locator("#dup-webhooks");
  assert.equal(await button.isEnabled(), true, "this server build delivers webhooks (the provider has their URL)");
  await button.click();
  const line = await tab.page.locator("#log li", { hasText: "webhook event(s) again" }).first().textContent();
  const sent = Number(/this order's (\d+) webhook/.exec(line)?.[1]);
  assert.ok(sent >= 1, `the provider had events to send again: ${line}`);
  await until(async () => (await duplicateWebhooks(env)) >= before + sent, "the server saw the duplicates");

  assert.equal((await env.charged(orderId)).length, 1, "still one charge");
  await tab.reload();
  await tab.waitForStatus(/paid/i);
  const after = await tab.receipt();
  assert.equal(after?.paymentId, receipt.paymentId, "the order keeps its one payment");
  assert.equal(after?.chargeId, receipt.chargeId);
});
