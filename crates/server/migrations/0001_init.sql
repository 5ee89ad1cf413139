-- payonce schema, one text for SQLite and PostgreSQL. The one place the dialects differ,
-- an auto-increment id, is spelled {{ID_PRIMARY_KEY}} and filled in by src/store/mod.rs.
-- Times are unix milliseconds, JSON is TEXT, money is integer minor units.

CREATE TABLE catalog (
    sku        TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    unit_price BIGINT NOT NULL CHECK (unit_price > 0),
    currency   TEXT NOT NULL,
    -- Stock is reserved when an attempt is claimed and given back if it ends uncharged,
    -- so it can never go below zero, even with many orders paying at once.
    stock      BIGINT NOT NULL CHECK (stock >= 0)
);

CREATE TABLE coupons (
    code        TEXT PRIMARY KEY,
    percent_off BIGINT NOT NULL CHECK (percent_off BETWEEN 1 AND 100)
);

CREATE TABLE orders (
    id             TEXT PRIMARY KEY,
    user_id        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('unpaid', 'paid', 'refunded')),
    version        BIGINT NOT NULL CHECK (version >= 1),
    items          TEXT NOT NULL,
    coupon         TEXT,
    address        TEXT,
    subtotal       BIGINT NOT NULL,
    discount       BIGINT NOT NULL,
    amount         BIGINT NOT NULL CHECK (amount > 0),
    currency       TEXT NOT NULL,
    -- The attempt (attempts.id) that may be charging right now; the cart is locked while set.
    active_attempt TEXT,
    payment_id     TEXT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX orders_by_user ON orders (user_id);

-- One row per (user, idempotency key): a pay attempt, or a cancel tombstone.
CREATE TABLE attempts (
    id                TEXT PRIMARY KEY,
    user_id           TEXT NOT NULL,
    idem_key          TEXT NOT NULL,
    order_id          TEXT NOT NULL,
    status            TEXT NOT NULL
        CHECK (status IN ('processing', 'succeeded', 'declined', 'failed', 'cancelled', 'refunded')),
    -- SHA-256 of the server-side details the key was first used with; NULL for tombstones.
    fingerprint       TEXT,
    order_version     BIGINT,
    amount            BIGINT,
    currency          TEXT,
    payment_method_id TEXT,
    -- Derived from (user, key) and saved before the provider is called.
    provider_key      TEXT UNIQUE,
    -- Lease: the request holding lease_token may be talking to the provider until then.
    locked_until      BIGINT,
    lease_token       TEXT,
    -- The final answer, stored once, replayed byte for byte.
    response_status   BIGINT,
    response_body     TEXT,
    charge_id         TEXT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    expires_at        BIGINT,
    UNIQUE (user_id, idem_key)
);
-- At most one attempt per order may be charging: the last guard under the order lock.
CREATE UNIQUE INDEX attempts_one_processing_per_order ON attempts (order_id) WHERE status = 'processing';

CREATE TABLE payments (
    id                TEXT PRIMARY KEY,
    order_id          TEXT NOT NULL UNIQUE,
    attempt_id        TEXT NOT NULL UNIQUE,
    amount            BIGINT NOT NULL,
    currency          TEXT NOT NULL,
    payment_method_id TEXT NOT NULL,
    charge_id         TEXT NOT NULL UNIQUE,
    status            TEXT NOT NULL,
    created_at        BIGINT NOT NULL
);

-- Every state change: who, when, from, to, why. Append-only.
CREATE TABLE audit_log (
    id          {{ID_PRIMARY_KEY}},
    at          BIGINT NOT NULL,
    actor       TEXT NOT NULL,
    entity      TEXT NOT NULL,
    entity_id   TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    reason      TEXT NOT NULL
);
CREATE INDEX audit_by_entity ON audit_log (entity, entity_id);

INSERT INTO catalog (sku, name, unit_price, currency, stock) VALUES
    ('tee-classic',    'Classic tee',    2500, 'USD', 1000),
    ('mug-enamel',     'Enamel mug',     1800, 'USD', 1000),
    ('sticker-pack',   'Sticker pack',    500, 'USD', 10000),
    ('hoodie-zip',     'Zip hoodie',     6500, 'USD', 500),
    ('poster-limited', 'Limited poster', 4000, 'USD', 3);

INSERT INTO coupons (code, percent_off) VALUES ('SAVE10', 10), ('HALFOFF', 50);
