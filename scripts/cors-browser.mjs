// A page on another origin pays through a production server (no `dev` feature, no --dev),
// in headless Chromium, so the browser itself enforces CORS: the server runs with
// --cors-origin <the page's origin> --cors-credentials; the page creates an order and pays it
// with the requests the SDK sends (a JSON POST with Idempotency-Key, the app's Authorization,
// credentials "include"), reads the headers the SDK acts on, replays the pay; a page on an
// unlisted origin is refused by the browser (its preflight gets no grant, so nothing is sent). The provider's ledger
// says what was charged.
//
// Usage: node scripts/cors-browser.mjs PROD_BIN DEV_BIN   (scripts/cors-browser.sh builds both)
import { spawn, execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { chromium } = await import(join(ROOT, "tools/node_modules/playwright-core/index.mjs"));
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
// docs/toolchain.md: without the background-networking flags Chromium floods the closed network.
const CHROMIUM_ARGS = [
  "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
  "--disable-component-update", "--no-first-run", "--disable-sync",
];
const [prodBin, devBin] = process.argv.slice(2);
assert.ok(prodBin && devBin, "usage: cors-browser.mjs PROD_BIN DEV_BIN");

const LISTEN = /^payonce: (api|provider) listening on (http:\/\/\S+)\s*$/m;
const children = [];
function start(bin, args) {
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  return new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = LISTEN.exec(out);
      if (m) ok(m[2].replace(/\/+$/, ""));
    });
    child.once("exit", (code) => fail(new Error(`${bin} ${args[0]} exited ${code}:\n${err}`)));
  });
}

/** A static server for one page; its origin is `http://HOST:PORT`. */
async function pageServer(host) {
  const server = createServer((_, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<!doctype html><title>shop</title><p>shop</p>");
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return { server, origin: `http://${host}:${server.address().port}` };
}

// What the page runs: create an order, pay it, pay again with the same key.
async function checkout({ api, token, key }) {
  const call = async (path, body, extra = {}) => {
    const res = await fetch(api + path, {
      method: "POST",
      credentials: "include",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}`, ...extra },
      body: JSON.stringify(body),
    });
    const header = (n) => res.headers.get(n);
    return { status: res.status, body: await res.json(), replayed: header("Idempotent-Replayed"),
      retention: header("Idempotency-Key-Retention"), requestId: header("X-Request-Id") };
  };
  try {
    const order = await call("/orders", { items: [{ sku: "tee-classic", quantity: 1 }] });
    const body = { orderVersion: order.body.version, paymentMethodId: "pm_card_approve" };
    const pay = await call(`/orders/${order.body.id}/pay`, body, { "Idempotency-Key": key });
    const again = await call(`/orders/${order.body.id}/pay`, body, { "Idempotency-Key": key });
    return { order, pay, again };
  } catch (e) {
    return { error: String(e) };
  }
}

const dir = await mkdtemp(join(tmpdir(), "payonce-cors-"));
const pages = [];
let browser;
try {
  const [allowed, other] = [await pageServer("localhost"), await pageServer("127.0.0.1")];
  pages.push(allowed.server, other.server);
  const webhookSecret = "cors-browser-webhook-secret-0123456789abcdef";
  const provider = await start(devBin, ["mock-provider", "--addr", "127.0.0.1:0", "--webhook-secret", webhookSecret]);
  const jwt = ["--jwt-hs256-secret", "cors-browser-jwt-secret-0123456789abcdef01", "--jwt-issuer", "https://id.shop.test", "--jwt-audience", "payonce"];
  const token = execFileSync(devBin, ["mint-jwt", "--secret", jwt[1], "--issuer", jwt[3], "--audience", jwt[5], "--user", "alice", "--ttl-secs", "600"]).toString().trim();
  // As a deployment does (docs/deploy.md, "Upgrading"): migrate as a step, then start.
  execFileSync(prodBin, ["migrate", "--database-url", `sqlite://${join(dir, "prod.db")}`]);
  const api = await start(prodBin, [
    "--addr", "127.0.0.1:0", "--provider", "mock", "--provider-url", provider, "--database-url", `sqlite://${join(dir, "prod.db")}`,
    "--webhook-secret", webhookSecret, "--session-secret", "cors-browser-session-secret-0123456789abcdef", "--mailer", "none",
    ...jwt, "--cors-origin", allowed.origin, "--cors-credentials",
  ]);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  const run = async (origin, key) => {
    const page = await browser.newPage();
    await page.goto(origin);
    const result = await page.evaluate(checkout, { api, token, key });
    await page.close();
    return result;
  };

  const ok = await run(allowed.origin, `cors-browser-${Date.now()}-allowed`);
  assert.equal(ok.error, undefined, `the listed origin's page could call the API: ${ok.error}`);
  assert.equal(ok.order.status, 201);
  assert.equal(ok.pay.status, 200, JSON.stringify(ok.pay.body));
  assert.equal(ok.pay.body.status, "succeeded");
  assert.match(ok.pay.retention ?? "", /^\d+$/, "the page reads Idempotency-Key-Retention");
  assert.ok(ok.pay.requestId, "the page reads X-Request-Id");
  assert.equal(ok.again.status, 200);
  assert.equal(ok.again.replayed, "true", "the page reads Idempotent-Replayed");
  const ledger = await (await fetch(`${provider}/ledger?orderId=${ok.order.body.id}`)).json();
  const charges = Array.isArray(ledger) ? ledger : ledger.charges;
  assert.equal(charges.length, 1, `charged once: ${JSON.stringify(ledger)}`);

  const refused = await run(other.origin, `cors-browser-${Date.now()}-refused`);
  assert.match(refused.error ?? "", /TypeError/, `an unlisted origin is refused: ${JSON.stringify(refused)}`);
  console.log(`cors-browser: ok: ${allowed.origin} paid once through the production build (${api}); ${other.origin} refused`);
} finally {
  await browser?.close();
  for (const c of children) c.kill("SIGTERM");
  for (const s of pages) s.close();
  await rm(dir, { recursive: true, force: true });
}
