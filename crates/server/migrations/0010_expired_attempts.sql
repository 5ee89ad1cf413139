-- An attempt whose customer abandoned the provider's action (3-D Secure) past its deadline
-- ends `expired` (crates/rules/src/plan.rs, `Outcome::Expired`): the status CHECK admits it.
-- SQLite cannot change a CHECK in place, so the table is rebuilt as 0008 rebuilt `refunds`,
-- every row, key and index kept as it is.
CREATE TABLE attempts_next (
    id                TEXT PRIMARY KEY,
    user_id           TEXT NOT NULL,
    idem_key          TEXT NOT NULL,
    order_id          TEXT NOT NULL,
    status            TEXT NOT NULL
        CHECK (status IN ('processing', 'succeeded', 'declined', 'failed', 'cancelled',
                          'refunded', 'expired')),
    fingerprint       TEXT,
    order_version     BIGINT,
    amount            BIGINT,
    currency          TEXT,
    payment_method_id TEXT,
    provider_key      TEXT UNIQUE,
    locked_until      BIGINT,
    lease_token       TEXT,
    response_status   BIGINT,
    response_body     TEXT,
    charge_id         TEXT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    expires_at        BIGINT,
    needs_review_at   BIGINT,
    provider_ref      TEXT,
    next_check_at     BIGINT,
    UNIQUE (user_id, idem_key)
);
INSERT INTO attempts_next (id, user_id, idem_key, order_id, status, fingerprint,
    order_version, amount, currency, payment_method_id, provider_key, locked_until,
    lease_token, response_status, response_body, charge_id, created_at, updated_at,
    expires_at, needs_review_at, provider_ref, next_check_at)
SELECT id, user_id, idem_key, order_id, status, fingerprint,
    order_version, amount, currency, payment_method_id, provider_key, locked_until,
    lease_token, response_status, response_body, charge_id, created_at, updated_at,
    expires_at, needs_review_at, provider_ref, next_check_at
FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_next RENAME TO attempts;
CREATE UNIQUE INDEX attempts_one_processing_per_order ON attempts (order_id) WHERE status = 'processing';
CREATE INDEX attempts_processing_by_age ON attempts (created_at) WHERE status = 'processing';
CREATE INDEX attempts_by_provider_ref ON attempts (provider_ref) WHERE provider_ref IS NOT NULL;
CREATE INDEX attempts_by_expiry ON attempts (expires_at) WHERE expires_at IS NOT NULL;
