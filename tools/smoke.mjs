// Release smoke test: loads a built package in real headless Chromium, the way a user's page
// would, checks that `version()` answers the Cargo version, and pays through the API against
// canned answers (see PAGE). It exists because a broken
// wasm-opt can produce a module that builds fine and only fails when the browser instantiates it
// (docs/toolchain.md, rule 3); the dev-profile browser tests never run wasm-opt, so only this sees it.
//
// usage: node tools/smoke.mjs PKG_DIR EXPECTED_VERSION
// Any page error, console error or failed request fails the test.
import { createServer } from "node:http";
import { readFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve, normalize, extname, sep } from "node:path";
import { chromium } from "playwright-core";

const [pkgArg, expected] = process.argv.slice(2);
if (!pkgArg || !expected) {
  console.error("usage: node tools/smoke.mjs PKG_DIR EXPECTED_VERSION");
  process.exit(2);
}
const pkgDir = resolve(pkgArg);
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

// The page imports the package exactly as the npm `exports` map tells a user to: the default
// export instantiates the module (fetching payonce_bg.wasm next to payonce.js), then the named
// export is called. A broken module fails in init(), before version() is reached.
//
// Then the release build (wasm-opt'd module, minified glue) pays through the real API surface
// against this server playing the payonce API with canned answers (same origin, so no CORS):
// a 200 receipt, a 402 decline, and a 503 + Retry-After that is retried with the same key.
// That covers options and checkout parsing, Web Locks, uuid keys, fetch, gloo timers,
// answer decoding, outcomes and PayonceError, which the dev-profile tests never see optimised.
const PAGE = `<!doctype html><meta charset="utf-8"><title>payonce smoke</title>
<script type="module">
import init, { version, PayonceClient, PayonceError } from "./pkg/payonce.js";
try {
  await init();
  const checks = {};
  const c = PayonceClient.create({ baseUrl: location.origin, storage: "memory",
    retry: { baseDelayMs: 100, maxDelayMs: 100 }, deadlineMs: 20000 });
  const co = (orderId) => ({ orderId, orderVersion: 1, paymentMethodId: "pm_card_approve" });
  const paid = await c.pay(co("ord_paid"));
  checks.paid = paid.kind === "paid" && paid.payment.id === "pay_smoke" && paid.payment.amount === 1250;
  const declined = await c.pay(co("ord_declined"));
  checks.declined = declined.kind === "declined" && declined.code === "PAYMENT_DECLINED";
  const busy = await c.pay(co("ord_busy"));
  checks.busyRetried = busy.kind === "paid" && c.pendingAttempt("ord_busy") === undefined;
  checks.nothingToCancel = (await c.cancel("ord_none")).kind === "none";
  try { PayonceClient.create({ baseUrl: "ftp://x" }); checks.badOptions = false; }
  catch (e) { checks.badOptions = e instanceof PayonceError && e.code === "INVALID_CONFIG"
    && e.constructor.name === "PayonceError" && e.message.startsWith("invalid options"); }
  window.__smoke = { ok: true, version: version(), checks };
} catch (e) {
  window.__smoke = { ok: false, error: String(e && e.stack || e) };
}
</script>`;

// Canned API answers, by order id; "ord_busy" is shed once, then paid.
const sheds = new Map();
function api(orderId, key, res) {
  const json = (status, body, headers = {}) =>
    res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));
  if (!key) return json(400, { code: "IDEMPOTENCY_KEY_MISSING" });
  if (orderId === "ord_declined") {
    return json(402, { type: "/problems/payment-declined", title: "Declined", status: 402, code: "PAYMENT_DECLINED" });
  }
  if (orderId === "ord_busy") {
    const seen = sheds.get(orderId);
    if (seen === undefined) {
      sheds.set(orderId, key);
      return json(503, { type: "/problems/store-unavailable", title: "Busy", status: 503, code: "STORE_UNAVAILABLE" }, { "retry-after": "1" });
    }
    if (seen !== key) return json(422, { code: "KEY_REUSED_WITH_DIFFERENT_DETAILS" }); // a retry must reuse its key
  }
  json(200, { status: "succeeded", orderId, payment: { id: "pay_smoke", orderId, amount: 1250, currency: "EUR",
    paymentMethodId: "pm_card_approve", chargeId: "ch_smoke", status: "succeeded" } });
}

const TYPES = { ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };

const server = createServer(async (req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  if (path === "/") {
    res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
    return;
  }
  const pay = path.match(/^\/orders\/([^/]+)\/pay$/);
  if (req.method === "POST" && pay) {
    req.resume().on("end", () => api(decodeURIComponent(pay[1]), req.headers["idempotency-key"], res));
    return;
  }
  if (path === "/favicon.ico") {
    res.writeHead(204).end(); // the browser asks on its own; a 404 here would be noise
    return;
  }
  if (path.startsWith("/pkg/")) {
    const file = normalize(join(pkgDir, path.slice("/pkg/".length)));
    if (file.startsWith(pkgDir + sep)) {
      try {
        const body = await readFile(file);
        res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" }).end(body);
        return;
      } catch { /* falls through to 404 */ }
    }
  }
  res.writeHead(404).end();
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const origin = `http://127.0.0.1:${server.address().port}`;

// A fresh profile per run, so no cached module from an earlier build can answer for this one.
const profile = await mkdtemp(join(tmpdir(), "payonce-smoke-"));
const problems = [];
let result;
let context;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--no-first-run", "--disable-sync",
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // The canned 402 and 503 are expected (Chromium logs them as console errors too).
  const cannedError = (url) => /\/orders\/ord_(declined|busy)\/pay$/.test(url ?? "");
  page.on("console", (m) => { if (m.type() === "error" && !cannedError(m.location().url)) problems.push(`console error: ${m.text()} ${m.location().url ?? ""}`.trim()); });
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on("response", (r) => { if (r.status() >= 400 && !cannedError(r.url())) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
  await page.goto(origin + "/");
  await page.waitForFunction(() => window.__smoke !== undefined, null, { timeout: 30_000 });
  result = await page.evaluate(() => window.__smoke);
} catch (e) {
  problems.push(`smoke harness: ${e.message}`);
} finally {
  await context?.close();
  server.close();
  await rm(profile, { recursive: true, force: true });
}

if (result && !result.ok) problems.push(`init/version threw: ${result.error}`);
if (result?.ok && result.version !== expected) {
  problems.push(`version() returned ${JSON.stringify(result.version)}, expected ${JSON.stringify(expected)}`);
}
for (const [name, ok] of Object.entries(result?.checks ?? {})) {
  if (ok !== true) problems.push(`check ${name} failed`);
}
if (result?.ok && Object.keys(result.checks ?? {}).length === 0) problems.push("no API check ran");
if (problems.length > 0) {
  console.error(`smoke: FAILED loading ${pkgDir} in ${CHROMIUM}`);
  for (const p of problems) console.error(`  - ${p}`);
  process.exit(1);
}
console.log(`smoke: ok, ${pkgDir} loads in headless Chromium, version() = ${result.version}, API checks: ${Object.keys(result.checks).join(", ")}`);
