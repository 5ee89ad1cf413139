-- Outbox, job queue, dev mailbox, refunds, manual review, webhook handling state.

-- The transactional outbox: the claim writes "charge this provider key" in the same
-- transaction as the attempt. The request executes it inline; the outbox worker drives
-- whatever a crash left behind. Marked done in the transaction that settles the attempt.
CREATE TABLE outbox (
    id           TEXT PRIMARY KEY,
    attempt_id   TEXT NOT NULL UNIQUE,
    kind         TEXT NOT NULL CHECK (kind IN ('charge')),
    provider_key TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    done_at      BIGINT
);
CREATE INDEX outbox_pending ON outbox (done_at, created_at);

-- The job queue (at-least-once): a job is leased, run, then acknowledged (done_at). A lease
-- that runs out without an ack is a redelivery.
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('confirmation_email')),
    order_id     TEXT NOT NULL,
    locked_until BIGINT,
    deliveries   BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    done_at      BIGINT,
    UNIQUE (kind, order_id)
);
CREATE INDEX jobs_pending ON jobs (done_at, created_at);

-- Set in the transaction that sends the confirmation: a redelivered job sees it and does nothing.
ALTER TABLE orders ADD COLUMN confirmation_email_sent BIGINT NOT NULL DEFAULT 0;

-- Dev mode's outbox for mail: what a real mailer would have sent.
CREATE TABLE mailbox (
    id         TEXT PRIMARY KEY,
    order_id   TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    body       TEXT NOT NULL,
    sent_at    BIGINT NOT NULL
);
CREATE INDEX mailbox_by_order ON mailbox (order_id);

-- Set when reconciliation could not learn an attempt's outcome from the provider after the
-- threshold: a person must look. The attempt stays processing; it is never charged blindly.
ALTER TABLE attempts ADD COLUMN needs_review_at BIGINT;

-- A webhook event is recorded when it arrives and marked handled once applied; only a
-- handled event is a duplicate. An event whose handling crashed is applied on redelivery.
ALTER TABLE webhook_events ADD COLUMN handled_at BIGINT;

-- Refunds: one row per (user, refund key); at most one refund per payment (full refunds).
CREATE TABLE refunds (
    id                  TEXT PRIMARY KEY,
    user_id             TEXT NOT NULL,
    idem_key            TEXT NOT NULL,
    payment_id          TEXT NOT NULL UNIQUE,
    provider_refund_key TEXT NOT NULL UNIQUE,
    status              TEXT NOT NULL CHECK (status IN ('processing', 'succeeded')),
    refund_id           TEXT,
    response_status     BIGINT,
    response_body       TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    expires_at          BIGINT,
    UNIQUE (user_id, idem_key)
);
CREATE INDEX audit_by_time ON audit_log (at);
