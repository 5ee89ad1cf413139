// "What happened?": after a pay the demo links to the server's operator page for the order
// (/admin/?order=ID, crates/server/assets/admin.html). In dev mode the page gets a dev operator
// token from the server itself (GET /dev/operator); the customer's session still opens
// nothing there. The page shows the claim, the provider's charge and the settle in time order,
// the charge linked to the provider's own page. A second scenario flags an order for review
// (the provider cannot tell what happened to a charge) and resolves it from the page once the
// provider answers again: paid, one charge.
//
// PAYONCE_UPDATE_SCREENSHOTS=1 writes docs/operating-timeline.png from the first scenario.
import test from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { join } from "node:path";
import { ROOT, launchBrowser, missingPrerequisite, saveScreenshot, scenario, startProvider, startServer, until } from "./harness.mjs";

/** The page's timeline, one text per event, oldest first. */
async function events(page) {
  return page.locator("ol#events li").allInnerTexts();
}

scenario(test, "what happened? → the order's timeline: claim, provider charge, settle, provider link", async (env) => {
  const ctx = await env.newContext();
  const tab = await env.open(ctx);
  const orderId = await tab.orderId();
  await tab.page.click("#pay");
  await tab.waitForStatus(/^Paid\./);
  const charges = await env.charged(orderId);
  assert.equal(charges.length, 1);

  const link = tab.page.locator("#what-happened");
  assert.equal(await link.isVisible(), true, "the link shows after the pay");
  const href = await link.getAttribute("href");
  assert.equal(new URL(href).pathname, "/admin/");
  assert.equal(new URL(href).searchParams.get("order"), orderId);

  // The customer's own session cookie reaches nothing under /admin/.
  const asCustomer = await tab.page.evaluate(async (id) => {
    const r = await fetch(`/admin/orders/${encodeURIComponent(id)}/timeline`, { credentials: "include" });
    return [r.status, (await r.json()).code];
  }, orderId);
  assert.deepEqual(asCustomer, [403, "OPERATOR_REQUIRED"]);

  const [admin] = await Promise.all([ctx.waitForEvent("page"), link.click()]);
  await admin.waitForSelector("ol#events li");
  const texts = await events(admin);
  const claim = texts.findIndex((t) => /attempt \S+: – → processing/.test(t));
  const charge = texts.findIndex((t) => /provider charge: succeeded/.test(t));
  const settle = texts.findIndex((t) => /attempt \S+: processing → succeeded/.test(t));
  // At one millisecond the server lists a journal row before the audit rows (ops/timeline.rs),
  // so the claim and the charge are compared by their times.
  const times = await admin.locator("ol#events li time").allTextContents();
  const at = (i) => Date.parse(times[i]);
  assert.ok(claim >= 0 && charge >= 0 && settle > Math.max(claim, charge), `claim, charge, settle in order:\n${texts.join("\n")}`);
  assert.ok(at(claim) <= at(charge) && at(charge) <= at(settle), `times in order:\n${texts.join("\n")}`);
  assert.match(texts[charge], /\+\d+ ms/, "the time since the event before");
  const provider = admin.locator("ol#events li a.provider", { hasText: charges[0].id }).first();
  assert.equal(await provider.getAttribute("href"), `${env.providerUrl}/charges/${charges[0].id}`);
  const summary = await admin.locator("#summary").innerText();
  assert.match(summary, new RegExp(`${orderId}\\s+paid`));
  // The docs' screenshot of the page (docs/operating.md); otherwise test-results/screenshots/.
  if (process.env.PAYONCE_UPDATE_SCREENSHOTS === "1") {
    const path = join(ROOT, "docs", "operating-timeline.png");
    await admin.screenshot({ path, fullPage: true, animations: "disabled" });
  } else {
    await saveScreenshot(admin, "operating-timeline");
  }
});

/**
 * A proxy in front of the provider that, while `down`, forwards a charge but loses its answer
 * (502) and answers every other call 503: the server cannot tell what happened.
 */
async function switchProxy(upstream) {
  const state = { down: true };
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const charge = req.method === "POST" && req.url === "/charges";
    if (state.down && !charge) {
      res.writeHead(503).end();
      return;
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers["content-length"];
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const r = await fetch(upstream + req.url, { method: req.method, headers, body }).catch(() => null);
    if (!r || state.down) {
      res.writeHead(502).end();
      return;
    }
    const out = Buffer.from(await r.arrayBuffer());
    res.writeHead(r.status, { "content-type": r.headers.get("content-type") ?? "application/json" }).end(out);
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return { url: `http://127.0.0.1:${server.address().port}`, state, stop: () => new Promise((ok) => server.close(ok)) };
}

const missing = missingPrerequisite();
test(
  "a flagged order is resolved from the page: 409 while the provider cannot tell, then paid, one charge",
  { timeout: 120_000, skip: missing && process.env.CI !== "true" ? missing : false },
  async () => {
    if (missing) throw new Error(`CI=true and ${missing}`);
    const provider = await startProvider();
    const proxy = await switchProxy(provider.url);
    const server = await startServer({
      providerUrl: proxy.url,
      extraArgs: ["--reconcile-after-ms", "500", "--jobs-interval-ms", "200", "--provider-timeout-ms", "2000"],
    });
    const browser = await launchBrowser();
    try {
      const api = server.apiUrl;
      const call = async (method, path, token, body, key) => {
        const headers = { Authorization: `Bearer ${token}` };
        if (body) headers["Content-Type"] = "application/json";
        if (key) headers["Idempotency-Key"] = key;
        const r = await fetch(api + path, { method, headers, body: body && JSON.stringify(body) });
        return [r.status, await r.json().catch(() => null)];
      };
      const session = await (await fetch(`${api}/dev/sessions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ userId: "flagged" }),
      })).json();
      const [, order] = await call("POST", "/orders", session.token, { items: [{ sku: "tee-classic", quantity: 1 }] });
      const [status] = await call("POST", `/orders/${order.id}/pay`, session.token,
        { orderVersion: order.version, paymentMethodId: "pm_card_approve" }, "key-flagged-order-1");
      assert.equal(status, 202, "the charge's answer was lost");
      const operator = (await (await fetch(`${api}/dev/operator`)).json()).token;
      await until(async () => {
        const [, q] = await call("GET", "/admin/reviews", operator);
        return q?.reviews?.some((r) => r.orderId === order.id);
      }, "reconciliation flags the attempt");
      const ledger = async () => (await (await fetch(`${provider.url}/ledger?orderId=${order.id}`)).json()).charges;
      assert.equal((await ledger()).length, 1, "the charge landed at the provider");

      const page = await (await browser.newContext()).newPage();
      await page.goto(`${api}/admin/?order=${encodeURIComponent(order.id)}`);
      await page.waitForSelector("form.resolve");
      assert.match(await page.locator("#summary").innerText(), /flagged for review/);
      assert.match((await events(page)).join("\n"), /in flight/);

      // The provider still cannot tell: 409, and the flag stays.
      await page.fill("form.resolve input", "customer says <b>charged</b>; checking");
      await page.click("form.resolve button");
      await page.waitForFunction(() => /REVIEW_UNRESOLVED/.test(document.querySelector("form.resolve .outcome").textContent));
      assert.match(await page.locator("#summary").innerText(), /flagged for review/);

      proxy.state.down = false;
      await page.click("form.resolve button");
      await page.waitForFunction(() => /resolved: paid/.test(document.getElementById("status").textContent));
      const summary = await page.locator("#summary").innerText();
      assert.match(summary, new RegExp(`${order.id}\\s+paid`));
      assert.doesNotMatch(summary, /flagged for review/);
      const charges = await ledger();
      assert.equal(charges.length, 1, `one charge: ${JSON.stringify(charges)}`);
      assert.equal(charges[0].status, "succeeded");
      // The note is journaled and shown as text, never as markup.
      const texts = (await events(page)).join("\n");
      assert.match(texts, /customer says <b>charged<\/b>; checking/);
      assert.equal(await page.locator("ol#events b").count(), 0);
    } finally {
      await browser.close().catch(() => {});
      await server.stop();
      await proxy.stop();
      await provider.stop();
    }
  },
);
