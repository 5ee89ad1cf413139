// Release smoke test: loads a built package in real headless Chromium, the way a user's page
// would, and checks that `version()` answers the Cargo version. It exists because a broken
// wasm-opt can produce a module that builds fine and only fails when the browser instantiates it
// (TOOLCHAIN.md pitfall 1); the dev-profile browser tests never run wasm-opt, so only this sees it.
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
const PAGE = `<!doctype html><meta charset="utf-8"><title>payonce smoke</title>
<script type="module">
import init, { version } from "./pkg/payonce.js";
try {
  await init();
  window.__smoke = { ok: true, version: version() };
} catch (e) {
  window.__smoke = { ok: false, error: String(e && e.stack || e) };
}
</script>`;

const TYPES = { ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };

const server = createServer(async (req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  if (path === "/") {
    res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
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
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()} ${m.location().url ?? ""}`.trim()); });
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
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
if (problems.length > 0) {
  console.error(`smoke: FAILED loading ${pkgDir} in ${CHROMIUM}`);
  for (const p of problems) console.error(`  - ${p}`);
  process.exit(1);
}
console.log(`smoke: ok, ${pkgDir} loads in headless Chromium and version() = ${result.version}`);
