// A reference backend for the payonce protocol (docs/protocol.md), in Express with SQLite.
// The rules that make "charged once" true are the numbered ones of docs/protocol.md §7; each
// is marked below. Authentication is a stand-in (`Authorization: Bearer <userId>`): put your
// own session check in `auth`. The "provider" is a tiny mock ledger in the same database,
// deduplicated on the provider key as a real payment provider is.
//
//   npm ci && node server.js --port 0 --db /tmp/payonce-example.db
"use strict";
const crypto = require("node:crypto");
const express = require("express");
const Database = require("better-sqlite3");

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const RETENTION_SECS = 24 * 3600; // §8: announced on every pay answer
const PENDING_MS = Number(arg("pending-ms", "2000")); // how long pm_pending stays processing
const STUCK_MS = 2 * 60 * 1000; // §10: reconciliation threshold
const CATALOG = { "sticker-pack": 500, "tee-classic": 2500, "mug-enamel": 1800 };
const METHODS = { pm_approve: "approve", pm_decline: "decline", pm_pending: "pending" };

const db = new Database(arg("db", ":memory:"));
db.pragma("journal_mode = WAL");
db.pragma("busy_timeout = 5000");
db.exec(`
CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY, user_id TEXT NOT NULL, version INTEGER NOT NULL, items TEXT NOT NULL,
  address TEXT, amount INTEGER NOT NULL, currency TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('unpaid', 'paid')), active_attempt TEXT,
  payment TEXT);                          -- the succeeded payment, once paid
CREATE TABLE IF NOT EXISTS attempts (
  user_id TEXT NOT NULL, idem_key TEXT NOT NULL, order_id TEXT NOT NULL,
  fingerprint TEXT,                       -- NULL for a tombstone
  status TEXT NOT NULL, provider_key TEXT NOT NULL,
  response_status INTEGER, response_body TEXT, payment TEXT,
  created_at INTEGER NOT NULL, expires_at INTEGER,
  order_version INTEGER,                  -- a tombstone's order version (§8)
  PRIMARY KEY (user_id, idem_key));       -- the claim: one row per (user, key)
CREATE TABLE IF NOT EXISTS charges (      -- the mock provider's ledger
  id TEXT PRIMARY KEY, provider_key TEXT NOT NULL UNIQUE, order_id TEXT NOT NULL,
  amount INTEGER NOT NULL, status TEXT NOT NULL);`);

const problem = (res, status, code, extra = {}) => {
  if (extra.retryAfter) res.set("Retry-After", String(extra.retryAfter));
  const body = { type: `/problems/${code.toLowerCase().replace(/_/g, "-")}`, title: code, status, code, ...extra };
  return res.status(status).type("application/problem+json").send(JSON.stringify(body));
};
const send = (res, status, body, replayed) => {
  if (replayed) res.set("Idempotent-Replayed", "true");
  const type = status < 300 ? "application/json" : "application/problem+json";
  return res.status(status).type(type).send(Buffer.from(body)); // the stored bytes, as they are
};

// §3: a raw token or an RFC 8941 string; 16..255 bytes of a fixed alphabet after unquoting.
function parseKey(raw) {
  if (raw === undefined) return { missing: true };
  let k = raw;
  if (k.startsWith('"')) {
    if (k.length < 2 || !k.endsWith('"') || /["\\]/.test(k.slice(1, -1))) return { invalid: "bad_quoting" };
    k = k.slice(1, -1);
  }
  return /^[A-Za-z0-9\-_.:~+/=]{16,255}$/.test(k) ? { key: k } : { invalid: "invalid" };
}

const auth = (req, res, next) => {
  const m = /^Bearer ([A-Za-z0-9_-]{1,64})$/.exec(req.get("authorization") || "");
  if (!m) return problem(res, 401, "UNAUTHENTICATED");
  req.user = m[1];
  next();
};
const ownOrder = (req, res) => {
  const o = db.prepare("SELECT * FROM orders WHERE id = ? AND user_id = ?").get(req.params.id, req.user);
  if (!o) problem(res, 404, "ORDER_NOT_FOUND"); // also for another user's order
  return o;
};
const price = (items) => {
  if (!Array.isArray(items) || items.length < 1 || items.length > 20) return null;
  let amount = 0;
  for (const l of items) {
    if (!CATALOG[l?.sku] || !Number.isInteger(l.quantity) || l.quantity < 1 || l.quantity > 100) return null;
    amount += CATALOG[l.sku] * l.quantity;
  }
  return amount;
};
const view = (o) => ({ id: o.id, status: o.status, version: o.version, items: JSON.parse(o.items),
  address: o.address ?? undefined, amount: o.amount, currency: o.currency, paymentInProgress: !!o.active_attempt });
const fingerprint = (user, order, version, amount, currency, method) =>
  crypto.createHash("sha256").update(JSON.stringify(["pay", user, order, version, amount, currency, method])).digest("hex");

const app = express();
app.disable("x-powered-by");
app.set("etag", false);
app.use(express.json({ limit: "16kb" }));

app.post("/orders", auth, (req, res) => {
  const amount = price(req.body?.items);
  if (amount === null) return problem(res, 400, "INVALID_REQUEST", { detail: "items: 1..20 lines of known SKUs" });
  const id = `ord_${crypto.randomUUID().replace(/-/g, "")}`;
  db.prepare("INSERT INTO orders VALUES (?, ?, 1, ?, ?, ?, 'USD', 'unpaid', NULL, NULL)")
    .run(id, req.user, JSON.stringify(req.body.items), req.body.address ?? null, amount);
  res.status(201).json(view(db.prepare("SELECT * FROM orders WHERE id = ?").get(id)));
});

app.get("/orders/:id", auth, (req, res) => {
  const o = ownOrder(req, res);
  if (o) res.json(view(o));
});

// §2: every change bumps the version; refused while an attempt is active or once paid, with
// one conditional UPDATE (atomic with the claim's own conditional UPDATE).
app.patch("/orders/:id/cart", auth, (req, res) => {
  const o = ownOrder(req, res);
  if (!o) return;
  const items = req.body?.items ?? JSON.parse(o.items);
  const amount = price(items);
  if (amount === null) return problem(res, 400, "INVALID_REQUEST");
  const changed = db.prepare(`UPDATE orders SET items = ?, address = ?, amount = ?, version = version + 1
    WHERE id = ? AND status = 'unpaid' AND active_attempt IS NULL`)
    .run(JSON.stringify(items), req.body?.address ?? o.address, amount, o.id).changes;
  if (!changed) {
    const now = db.prepare("SELECT status FROM orders WHERE id = ?").get(o.id);
    return problem(res, 409, now.status === "paid" ? "ORDER_ALREADY_PAID" : "PAYMENT_IN_PROGRESS");
  }
  res.json(view(ownOrder(req, res)));
});

const findAttempt = db.prepare("SELECT * FROM attempts WHERE user_id = ? AND idem_key = ?");

// §7.2: what a known key gets.
function answerKnown(res, row, orderId, fp) {
  const mismatch = row.fingerprint === null ? row.order_id !== orderId : row.fingerprint !== fp;
  if (mismatch) return problem(res, 422, "KEY_REUSED_WITH_DIFFERENT_DETAILS", { attemptStatus: row.status });
  if (row.status === "cancelled") return problem(res, 409, "ATTEMPT_CANCELLED", { attemptStatus: "cancelled" });
  if (row.status === "processing") return problem(res, 409, "IN_PROGRESS", { retryAfter: 1 });
  return send(res, row.response_status, row.response_body, true);
}

// §7.3: the claim, one IMMEDIATE transaction of conditional statements. The key's slot is
// taken first, so a request that loses it to another process goes back to rule 2; a refusal
// throws, which rolls the slot back (a refused key is not stored).
class Refusal extends Error {}
const providerKeyOf = (user, key) =>
  `pk_${crypto.createHash("sha256").update(`${user}\0${key}`).digest("hex").slice(0, 40)}`;
const claim = db.transaction((user, key, order, version, fp) => {
  const providerKey = providerKeyOf(user, key);
  const ins = db.prepare(`INSERT INTO attempts (user_id, idem_key, order_id, fingerprint, status, provider_key, created_at)
    VALUES (?, ?, ?, ?, 'processing', ?, ?) ON CONFLICT DO NOTHING`).run(user, key, order.id, fp, providerKey, Date.now());
  if (!ins.changes) return { lost: true };
  const current = db.prepare("SELECT version, status, payment FROM orders WHERE id = ?").get(order.id);
  // A paid order is an answer, not "busy": its payment, as a replay of the paying key has it.
  if (current.status !== "unpaid") throw new Refusal("ORDER_ALREADY_PAID", { cause: { payment: JSON.parse(current.payment) } });
  if (current.version !== version) throw new Refusal("ORDER_CHANGED", { cause: { currentVersion: current.version } });
  const locked = db.prepare(`UPDATE orders SET active_attempt = ?
    WHERE id = ? AND version = ? AND status = 'unpaid' AND active_attempt IS NULL`).run(key, order.id, version);
  if (!locked.changes) throw new Refusal("PAYMENT_ALREADY_ACTIVE", { cause: {} }); // another attempt runs
  return { providerKey };
});

// The mock provider: deduplicated on the provider key, like a real one.
async function charge(providerKey, orderId, amount, method) {
  if (METHODS[method] === "pending") await new Promise((r) => setTimeout(r, PENDING_MS));
  const status = METHODS[method] === "decline" ? "declined" : "succeeded";
  db.prepare("INSERT INTO charges VALUES (?, ?, ?, ?, ?) ON CONFLICT (provider_key) DO NOTHING")
    .run(`ch_${crypto.randomUUID().slice(0, 8)}`, providerKey, orderId, amount, status);
  return db.prepare("SELECT * FROM charges WHERE provider_key = ?").get(providerKey);
}

// §7.4: the outcome, its answer bytes and the order, in one transaction.
const settle = db.transaction((user, key, orderId, ch, method) => {
  let status, body, payment = null;
  if (ch.status === "succeeded") {
    payment = { id: `pay_${ch.id.slice(3)}`, orderId, amount: ch.amount, currency: "USD",
      paymentMethodId: method, chargeId: ch.id, status: "succeeded" };
    status = 200;
    body = JSON.stringify({ status: "succeeded", orderId, payment });
  } else {
    status = 402;
    body = JSON.stringify({ type: "/problems/payment-declined", title: "PAYMENT_DECLINED", status: 402,
      code: ch.status === "failed" ? "PAYMENT_FAILED" : "PAYMENT_DECLINED", attemptStatus: ch.status });
  }
  const done = db.prepare(`UPDATE attempts SET status = ?, response_status = ?, response_body = ?, payment = ?,
    expires_at = ? WHERE user_id = ? AND idem_key = ? AND status = 'processing'`)
    .run(ch.status, status, body, payment && JSON.stringify(payment), Date.now() + RETENTION_SECS * 1000, user, key);
  if (done.changes) {
    db.prepare(`UPDATE orders SET active_attempt = NULL, status = CASE WHEN ? THEN 'paid' ELSE status END,
      payment = COALESCE(?, payment) WHERE id = ?`).run(payment ? 1 : 0, payment && JSON.stringify(payment), orderId);
  }
  return findAttempt.get(user, key);
});

app.post("/orders/:id/pay", auth, async (req, res) => {
  res.set("Idempotency-Key-Retention", String(RETENTION_SECS)); // rule 6
  const order = ownOrder(req, res); // rule 1
  if (!order) return;
  const k = parseKey(req.get("idempotency-key"));
  if (k.missing) return problem(res, 400, "IDEMPOTENCY_KEY_MISSING");
  if (k.invalid) return problem(res, 400, "IDEMPOTENCY_KEY_INVALID", { reason: k.invalid });
  const { orderVersion, paymentMethodId } = req.body ?? {};
  if (!Number.isInteger(orderVersion) || !METHODS[paymentMethodId]) return problem(res, 400, "INVALID_REQUEST");
  // The fingerprint comes from our data: the amount of the version the request names.
  const fp = fingerprint(req.user, order.id, orderVersion, order.amount, order.currency, paymentMethodId);
  const known = findAttempt.get(req.user, k.key); // rule 2, before anything about the order
  if (known) return answerKnown(res, known, order.id, fp);
  let claimed;
  try {
    claimed = claim.immediate(req.user, k.key, order, orderVersion, fp); // rule 3
  } catch (e) {
    if (e instanceof Refusal) return problem(res, 409, e.message, e.cause);
    throw e;
  }
  if (claimed.lost) return answerKnown(res, findAttempt.get(req.user, k.key), order.id, fp);
  const ch = await charge(claimed.providerKey, order.id, order.amount, paymentMethodId); // rule 4
  const row = settle.immediate(req.user, k.key, order.id, ch, paymentMethodId);
  return send(res, row.response_status, row.response_body, false);
});

// §9: the cancel table; a tombstone takes the key's slot when the key is unknown.
app.post("/orders/:id/payment-attempts/cancel", auth, (req, res) => {
  const order = ownOrder(req, res);
  if (!order) return;
  const k = typeof req.body?.key === "string" ? parseKey(req.body.key) : { invalid: true };
  if (!k.key) return problem(res, 400, "INVALID_REQUEST", { detail: "key: an idempotency key" });
  if (order.status === "paid" && !findAttempt.get(req.user, k.key)) {
    // §9: an unknown key on a paid order may be one whose record passed retention: did it pay?
    const ch = db.prepare("SELECT id FROM charges WHERE provider_key = ? AND status = 'succeeded'")
      .get(providerKeyOf(req.user, k.key));
    const payment = JSON.parse(order.payment);
    if (ch && payment.chargeId === ch.id) return res.json({ status: "succeeded", payment });
  }
  const tomb = db.prepare(`INSERT INTO attempts (user_id, idem_key, order_id, status, provider_key, created_at,
    expires_at, order_version) VALUES (?, ?, ?, 'cancelled', '', ?, ?, ?) ON CONFLICT DO NOTHING`)
    .run(req.user, k.key, order.id, Date.now(), Date.now() + RETENTION_SECS * 1000, order.version);
  if (tomb.changes) return res.json({ status: "cancelled" });
  const row = findAttempt.get(req.user, k.key);
  if (row.order_id !== order.id) return problem(res, 422, "KEY_REUSED_WITH_DIFFERENT_DETAILS", { attemptStatus: row.status });
  res.json(row.payment ? { status: row.status, payment: JSON.parse(row.payment) } : { status: row.status });
});

// The mock provider's ledger, for the conformance kit's [ledger].
app.get("/ledger", (req, res) => {
  const charges = db.prepare("SELECT id, order_id AS orderId, amount, status FROM charges WHERE order_id = ?")
    .all(String(req.query.orderId ?? ""));
  res.json({ charges });
});

// §10: reconciliation of stuck attempts (here: a crash between claim and settle) and §8:
// cleanup of finished keys after retention. Processing attempts are never deleted.
function jobs() {
  const stuck = db.prepare("SELECT * FROM attempts WHERE status = 'processing' AND created_at < ?").all(Date.now() - STUCK_MS);
  for (const a of stuck) {
    const ch = db.prepare("SELECT * FROM charges WHERE provider_key = ?").get(a.provider_key);
    settle.immediate(a.user_id, a.idem_key, a.order_id, ch ?? { status: "failed" }, "");
  }
  // §8: a tombstone stays while its order can still be paid at the version the cancel saw.
  db.prepare(`DELETE FROM attempts WHERE status <> 'processing' AND expires_at < ? AND (status <> 'cancelled'
    OR NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = order_id AND o.status = 'unpaid'
      AND o.version = attempts.order_version))`).run(Date.now());
}
setInterval(jobs, 30_000).unref();

app.use((req, res) => problem(res, 404, "NOT_FOUND"));
app.use((err, req, res, next) => { // bad JSON and the like: a problem, never a stack trace
  if (err.type === "entity.parse.failed") return problem(res, 400, "INVALID_REQUEST");
  if (err.type === "entity.too.large") return problem(res, 413, "PAYLOAD_TOO_LARGE");
  console.error(err);
  return problem(res, 500, "INTERNAL");
});

const server = app.listen(Number(arg("port", "3000")), "127.0.0.1", () => {
  console.log(`payonce-example: listening on http://127.0.0.1:${server.address().port}`);
});
