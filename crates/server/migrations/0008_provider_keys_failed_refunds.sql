-- The provider key a payment was charged under, kept with the payment: its attempt row is
-- deleted at the end of key retention, and a cancel of a forgotten key on a paid order is
-- then answered from here instead of asking the provider (src/cancel.rs). Existing payments
-- take their attempt's key, as it was saved; one whose attempt is gone stays NULL and the
-- provider is asked about it.
ALTER TABLE payments ADD COLUMN provider_key TEXT;
UPDATE payments SET provider_key =
    (SELECT a.provider_key FROM attempts a WHERE a.id = payments.attempt_id);

-- A refund the provider refuses (and that was not made elsewhere) ends `failed`, and its
-- payment's one refund slot frees: the slot is a unique index over the refunds that are not
-- failed. SQLite cannot change a CHECK or drop a constraint in place, so the table is
-- rebuilt, every row and key kept as it is.
CREATE TABLE refunds_next (
    id                  TEXT PRIMARY KEY,
    user_id             TEXT NOT NULL,
    idem_key            TEXT NOT NULL,
    payment_id          TEXT NOT NULL,
    provider_refund_key TEXT NOT NULL UNIQUE,
    status              TEXT NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
    refund_id           TEXT,
    response_status     BIGINT,
    response_body       TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    expires_at          BIGINT,
    locked_until        BIGINT,
    lease_token         TEXT,
    UNIQUE (user_id, idem_key)
);
INSERT INTO refunds_next (id, user_id, idem_key, payment_id, provider_refund_key, status,
    refund_id, response_status, response_body, created_at, updated_at, expires_at,
    locked_until, lease_token)
SELECT id, user_id, idem_key, payment_id, provider_refund_key, status,
    refund_id, response_status, response_body, created_at, updated_at, expires_at,
    locked_until, lease_token
FROM refunds;
DROP TABLE refunds;
ALTER TABLE refunds_next RENAME TO refunds;
CREATE UNIQUE INDEX refunds_one_per_payment ON refunds (payment_id) WHERE status <> 'failed';
CREATE INDEX refunds_by_expiry ON refunds (expires_at);

-- When the jobs next look at an attempt that waits for the customer (3-D Secure); NULL:
-- at once. The outbox and reconciliation work lists skip it until then, so abandoned
-- challenges cannot fill them (crates/rules/src/policy.rs, `next_customer_check`).
ALTER TABLE attempts ADD COLUMN next_check_at BIGINT;
