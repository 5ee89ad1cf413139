// End-to-end harness: the real payonce server (embedded SQLite in a temp dir, dev mode, the
// built page from www/dist), the real mock provider it starts, and headless Chromium driven by
// playwright-core. Assertions about money go to the provider ledger, never only to the page.
//
// Env:
//   PAYONCE_SERVER_BIN   server binary (default: $CARGO_TARGET_DIR or target/, debug build;
//                        falls back to `cargo run -p payonce-server`)
//   CHROMIUM             browser binary (default /usr/bin/chromium)
//   CI=true              a missing browser or page build is a failure, never a skip
//   PAYONCE_UPDATE_SCREENSHOTS=1   write screenshots into www/screenshots/ (committed, shown
//                        in the README); otherwise into test-results/screenshots/
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const WWW = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const ROOT = dirname(WWW);
export const DIST = join(WWW, "dist");
export const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const CI = process.env.CI === "true";

// docs/toolchain.md: without the background-networking flags Chromium floods the closed network.
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--headless",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--no-first-run",
  "--disable-sync",
];

/** Why the suite cannot run here, or null. Under CI=true the caller turns it into a failure. */
export function missingPrerequisite() {
  if (!existsSync(CHROMIUM)) return `Chromium not found at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM)`;
  if (!existsSync(join(DIST, "index.html"))) return `the page is not built: run www/build.sh (no ${DIST}/index.html)`;
  return null;
}

/**
 * Registers a scenario with node:test. Prerequisites are checked once: missing ones fail under
 * CI=true and skip (with the reason) elsewhere, so a developer without Chromium is told why.
 * `options` go to Env.start (e.g. a separate provider process, extra server flags);
 * `options.timeout` is the scenario's limit in ms (default 120000).
 */
export function scenario(test, name, fn, options = {}) {
  const missing = missingPrerequisite();
  if (missing && !CI) {
    test(name, { skip: missing }, () => {});
    return;
  }
  test(name, { timeout: options.timeout ?? 120_000 }, async (t) => {
    if (missing) throw new Error(`CI=true and ${missing}`);
    const env = await Env.start(options);
    try {
      await fn(env, t);
    } catch (err) {
      await env.dumpOnFailure(t.name);
      throw err;
    } finally {
      await env.stop();
    }
  });
}

function serverCommand() {
  if (process.env.PAYONCE_SERVER_BIN) return [process.env.PAYONCE_SERVER_BIN, []];
  const target = process.env.CARGO_TARGET_DIR ? resolve(ROOT, process.env.CARGO_TARGET_DIR) : join(ROOT, "target");
  const bin = join(target, "debug", "payonce-server");
  if (existsSync(bin)) return [bin, []];
  return ["cargo", ["run", "--quiet", "-p", "payonce-server", "--"]];
}

const LISTEN = /^payonce: (api|provider) listening on (http:\/\/\S+)\s*$/;

/**
 * Spawns the server binary with `args` and resolves once it printed a listening line for each
 * of `wanted` ("api", "provider"). The process gets its own process group, so a kill reaches
 * the server even when it runs under `cargo run`.
 */
async function spawnListening(args, wanted, output = []) {
  const [cmd, pre] = serverCommand();
  const child = spawn(cmd, [...pre, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: process.env, detached: true });
  const urls = await new Promise((resolveUrls, reject) => {
    const found = {};
    let buf = "";
    const onLine = (line) => {
      output.push(line);
      const m = LISTEN.exec(line);
      if (m) {
        found[m[1]] = m[2].replace(/\/+$/, "");
        if (wanted.every((w) => found[w])) resolveUrls(found);
      }
    };
    child.stdout.setEncoding("utf8").on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
    child.stderr.setEncoding("utf8").on("data", (d) => output.push(...d.split("\n").filter(Boolean)));
    child.once("error", (err) => reject(new Error(`cannot start ${cmd}: ${err.message}`)));
    child.once("exit", (code, sig) =>
      reject(new Error(`server exited (${code ?? sig}) before listening:\n${output.slice(-40).join("\n")}`)),
    );
  });
  const exited = new Promise((r) => child.once("exit", r));
  const signal = (sig) => {
    try {
      process.kill(-child.pid, sig);
    } catch {
      // already gone
    }
  };
  return {
    urls,
    output,
    /** Resolves when the process has ended (for a server that aborts itself). */
    exited,
    /** SIGKILL: a crash, no chance to finish anything. */
    async crash() {
      signal("SIGKILL");
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        signal("SIGTERM");
        const t = setTimeout(() => signal("SIGKILL"), 5000);
        await exited;
        clearTimeout(t);
      }
    },
  };
}

/**
 * Starts the API in dev mode serving www/dist, with a SQLite file in `dir` (a fresh temp dir
 * by default), on `addr` (port 0 by default). Without `providerUrl` it embeds the provider.
 */
export async function startServer({
  dir,
  addr = "127.0.0.1:0",
  providerAddr = "127.0.0.1:0",
  providerUrl = null,
  extraArgs = [],
  output = [],
} = {}) {
  const ownDir = !dir;
  dir ??= await mkdtemp(join(tmpdir(), "payonce-e2e-"));
  const args = [
    "--addr", addr,
    ...(providerUrl ? ["--provider-url", providerUrl] : ["--provider-addr", providerAddr]),
    "--database-url", `sqlite://${join(dir, "payonce.db")}`,
    "--dev",
    "--static-dir", DIST,
    ...extraArgs,
  ];
  let proc;
  try {
    proc = await spawnListening(args, providerUrl ? ["api"] : ["api", "provider"], output);
  } catch (err) {
    if (ownDir) await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    apiUrl: proc.urls.api,
    providerUrl: providerUrl ?? proc.urls.provider,
    dir,
    output,
    crash: () => proc.crash(),
    exited: proc.exited,
    async stop({ keepDir = false } = {}) {
      await proc.stop();
      if (!keepDir) await rm(dir, { recursive: true, force: true });
    },
  };
}

/** `payonce-server mock-provider` on its own: its ledger outlives an API crash. */
export async function startProvider(output = []) {
  const proc = await spawnListening(["mock-provider", "--addr", "127.0.0.1:0"], ["provider"], output);
  return { url: proc.urls.provider, output, stop: () => proc.stop() };
}

/** The localstripe binary: PAYONCE_TEST_LOCALSTRIPE, else the venv scripts/bootstrap.sh makes. */
export const LOCALSTRIPE = process.env.PAYONCE_TEST_LOCALSTRIPE || join(ROOT, ".venv-localstripe", "bin", "localstripe");
/** Any sk_test_… key works at localstripe; the Stripe.js stand-in takes any pk_test_…. */
export const STRIPE_SECRET_KEY = "sk_test_payonce_e2e";
const STRIPE_WEBHOOK_SECRET = "whsec_payonce_e2e_0123456789abcdef";

/**
 * localstripe (the Stripe emulator) on a free port, --from-scratch. `paymentMethod(number)`
 * makes a card PaymentMethod through its API, as Stripe.js would in a real page: the card
 * number goes to the provider only. `intentsOf(orderId)`: its own list, the ledger.
 */
export async function startLocalstripe() {
  const { createServer } = await import("node:net");
  const port = await new Promise((res) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const p = srv.address().port;
      srv.close(() => res(p));
    });
  });
  const child = spawn(LOCALSTRIPE, ["--port", String(port), "--from-scratch"], { stdio: "ignore", detached: true });
  let spawnError = null;
  child.once("error", (err) => (spawnError = err));
  const url = `http://127.0.0.1:${port}`;
  const auth = { Authorization: `Basic ${Buffer.from(`${STRIPE_SECRET_KEY}:`).toString("base64")}` };
  const call = async (method, path, form) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: { ...auth, ...(form ? { "Content-Type": "application/x-www-form-urlencoded" } : {}) },
      body: form ? new URLSearchParams(form).toString() : undefined,
    });
    const body = await res.json();
    if (!res.ok) throw new Error(`localstripe ${method} ${path}: ${res.status} ${JSON.stringify(body)}`);
    return body;
  };
  await until(async () => {
    if (spawnError) throw new Error(`cannot run ${LOCALSTRIPE} (${spawnError.message}): scripts/bootstrap.sh installs it`);
    try {
      await call("GET", "/v1/payment_intents?limit=1");
      return true;
    } catch {
      return false;
    }
  }, `localstripe answering on :${port} (${LOCALSTRIPE})`, 20_000);
  return {
    url,
    secretKey: STRIPE_SECRET_KEY,
    webhookSecret: STRIPE_WEBHOOK_SECRET,
    async paymentMethod(number) {
      const pm = await call("POST", "/v1/payment_methods", {
        type: "card",
        "card[number]": number,
        "card[exp_month]": "12",
        "card[exp_year]": "2034",
        "card[cvc]": "123",
      });
      return pm.id;
    },
    async intentsOf(orderId) {
      const list = await call("GET", "/v1/payment_intents?limit=100");
      return list.data.filter((i) => i.metadata?.order_id === orderId);
    },
    async stop() {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    },
  };
}

export async function launchBrowser() {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

/** One server (and optionally a separate provider) + one browser for one scenario. */
export class Env {
  /**
   * `separateProvider`: run the provider as its own process, so the API can crash and restart
   * while the ledger stays. `stripe`: run the server with --provider stripe against localstripe
   * (`env.localstripe`, `startLocalstripe`). `extraArgs`: more server flags.
   */
  static async start({ separateProvider = false, stripe = false, extraArgs = [] } = {}) {
    const env = new Env();
    env.output = [];
    env.pages = [];
    if (separateProvider) env.provider = await startProvider(env.output);
    try {
      if (stripe) {
        // --provider stripe against localstripe (env.localstripe): no mock provider at all.
        env.localstripe = await startLocalstripe();
        env.provider = { url: env.localstripe.url, stop: () => env.localstripe.stop() };
        extraArgs = [
          "--provider", "stripe",
          "--stripe-secret-key", env.localstripe.secretKey,
          "--stripe-webhook-secret", env.localstripe.webhookSecret,
          ...extraArgs,
        ];
      }
      env.extraArgs = extraArgs;
      env.server = await startServer({ providerUrl: env.provider?.url ?? null, extraArgs, output: env.output });
      env.browser = await launchBrowser();
    } catch (err) {
      await env.stop();
      throw err;
    }
    return env;
  }

  get api() {
    return this.server.apiUrl;
  }

  get providerUrl() {
    return this.server.providerUrl;
  }

  /** Kills the API process (SIGKILL), as a crash would. */
  async crashApi() {
    await this.server.crash();
    this.output.push("--- the test crashed the API (SIGKILL)");
  }

  /**
   * Starts the API again on the same addresses and database, as after a crash (an embedded
   * provider comes back on its old port too, so the page's URLs stay valid).
   */
  async restartApi() {
    const { port } = new URL(this.server.apiUrl);
    this.server = await startServer({
      dir: this.server.dir,
      addr: `127.0.0.1:${port}`,
      providerAddr: `127.0.0.1:${new URL(this.server.providerUrl).port}`,
      providerUrl: this.provider?.url ?? null,
      extraArgs: this.extraArgs,
      output: this.output,
    });
  }

  /** A browser context is one user's browser profile: the session cookie is shared by its tabs. */
  async newContext() {
    return this.browser.newContext({ viewport: { width: 1280, height: 860 }, locale: "en-US" });
  }

  /**
   * Opens the checkout in a new tab and waits until it has signed in and shows an order.
   * `query` adds page parameters (order, SDK timings). Returns a Checkout driver.
   */
  async open(context, query = {}) {
    const page = await context.newPage();
    const checkout = new Checkout(this, page);
    await checkout.goto(query);
    this.pages.push(page);
    return checkout;
  }

  /** GET <provider>/ledger?orderId=: the ground truth for "charged once". */
  async ledger(orderId) {
    const res = await fetch(`${this.providerUrl}/ledger?orderId=${encodeURIComponent(orderId)}`);
    if (!res.ok) throw new Error(`ledger answered ${res.status}`);
    return (await res.json()).charges;
  }

  /** Charges that moved money (a declined charge moves none). */
  async charged(orderId) {
    return (await this.ledger(orderId)).filter((c) => c.status === "succeeded" || c.status === "refunded");
  }

  /** A bearer token for `userId`, to talk to the API from the test like another client would. */
  async token(userId = "demo") {
    const res = await fetch(`${this.api}/dev/sessions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ userId }),
    });
    if (!res.ok) throw new Error(`dev session answered ${res.status}`);
    return (await res.json()).token;
  }

  async dumpOnFailure(name) {
    const lines = [`--- ${name}: server output (last 60 lines)`, ...this.output.slice(-60)];
    for (const [i, p] of this.pages.entries()) {
      if (p.isClosed()) continue;
      try {
        const status = await p.locator("#status").textContent({ timeout: 1000 });
        const log = await p.locator("#log").innerText({ timeout: 1000 });
        lines.push(`--- tab ${i}: status "${status}"`, log.split("\n").slice(0, 30).reverse().join("\n"));
        await saveScreenshot(p, `failed-${name.replace(/\W+/g, "-")}-tab${i}`, { failure: true });
      } catch {
        // the tab may be mid-navigation; the server output is still useful
      }
    }
    console.error(lines.join("\n"));
  }

  async stop() {
    await this.browser?.close().catch(() => {});
    await this.server?.stop();
    await this.provider?.stop();
  }
}

/** Drives one checkout tab, and records every pay request it sends (with its key). */
export class Checkout {
  constructor(env, page) {
    this.env = env;
    this.page = page;
    this.payRequests = [];
    this.consoleErrors = [];
    page.on("request", (req) => {
      if (req.method() === "POST" && /\/orders\/[^/]+\/pay$/.test(new URL(req.url()).pathname)) {
        const h = req.headers();
        this.payRequests.push({ key: h["idempotency-key"], fault: h["payonce-dev-fault"] ?? null, body: req.postData() });
      }
    });
    this.payResponses = [];
    page.on("response", async (res) => {
      const req = res.request();
      if (req.method() !== "POST" || !/\/orders\/[^/]+\/pay$/.test(new URL(req.url()).pathname)) return;
      let code = null;
      try {
        code = (await res.json())?.code ?? null;
      } catch {
        // a dropped or empty body
      }
      this.payResponses.push({ key: req.headers()["idempotency-key"], status: res.status(), code });
    });
    page.on("pageerror", (err) => this.consoleErrors.push(String(err)));
  }

  async goto(query = {}) {
    // No ?provider=: the page finds the provider through the server's GET /dev/config, as
    // it does when a person runs the demo.
    const url = new URL(this.env.api + "/");
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, String(v));
    await this.page.goto(url.href);
    await this.ready();
  }

  async ready() {
    await this.page.waitForFunction(() => document.body.dataset.ready, null, { timeout: 30_000 });
    const ready = await this.page.evaluate(() => document.body.dataset.ready);
    if (ready !== "true") throw new Error(`the checkout did not start: ${await this.status()}`);
  }

  async reload() {
    await this.page.reload();
    await this.ready();
  }

  orderId() {
    return this.page.locator("#order-id").getAttribute("data-id");
  }

  async orderVersion() {
    return Number(await this.page.locator("#order-version").textContent());
  }

  status() {
    return this.page.locator("#status").textContent();
  }

  async chooseMethod(id) {
    await this.page.check(`input[name="method"][value="${id}"]`);
  }

  /** Waits until the aria-live status line matches `re`. */
  async waitForStatus(re, timeout = 45_000) {
    try {
      await this.page.waitForFunction((src) => new RegExp(src).test(document.getElementById("status").textContent), re.source, {
        timeout,
      });
    } catch {
      throw new Error(`status never matched ${re}; it is "${await this.status()}"`);
    }
    return this.status();
  }

  /** Every status the page showed, oldest first (the page logs each one). */
  async statusHistory() {
    const entries = await this.page.locator("#log li").allTextContents();
    return entries
      .reverse()
      .map((e) => /status: (.*)$/.exec(e)?.[1])
      .filter(Boolean);
  }

  keys() {
    return [...new Set(this.payRequests.map((r) => r.key))];
  }

  async receipt() {
    const visible = await this.page.locator("#receipt").isVisible();
    if (!visible) return null;
    return {
      amount: await this.page.locator("#r-amount").textContent(),
      paymentId: await this.page.locator("#r-payment").textContent(),
      chargeId: await this.page.locator("#r-charge").textContent(),
    };
  }

  screenshot(name) {
    return saveScreenshot(this.page, name);
  }
}

export async function saveScreenshot(page, name, { failure = false } = {}) {
  const dir =
    process.env.PAYONCE_UPDATE_SCREENSHOTS === "1" && !failure ? join(WWW, "screenshots") : join(ROOT, "test-results", "screenshots");
  await mkdir(dir, { recursive: true });
  await page.screenshot({ path: join(dir, `${name}.png`), fullPage: true, animations: "disabled" });
}

/** Polls `fn` until it returns a truthy value (or throws `message` after `timeout` ms). */
export async function until(fn, message, timeout = 30_000) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting: ${message}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Minor units shown as the page shows them (the page formats with en-US). */
export function money(minor, currency = "USD") {
  const f = new Intl.NumberFormat("en-US", { style: "currency", currency });
  return f.format(minor / 10 ** (f.resolvedOptions().maximumFractionDigits ?? 2));
}
