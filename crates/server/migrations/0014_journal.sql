-- The journal (src/store/journal.rs; docs/operating.md, "The journal"): one row per pay,
-- cancel and refund request answered, per provider call and per operator read, with the ids
-- that find it again (request id, user, order, key, provider object). `detail` is a small
-- JSON object, redacted before it is written. Kept as long as the audit trail
-- (`--audit-retention-days`), deleted by the cleanup job by `at`.
CREATE TABLE journal (
    id {{ID_PRIMARY_KEY}},
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    request_id TEXT,
    user_id TEXT,
    order_id TEXT,
    idem_key TEXT,
    provider_id TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX journal_by_time ON journal (at);
CREATE INDEX journal_by_order ON journal (order_id, at);
CREATE INDEX journal_by_request ON journal (request_id);
CREATE INDEX journal_by_key ON journal (idem_key);
CREATE INDEX journal_by_provider ON journal (provider_id);
CREATE INDEX journal_by_user ON journal (user_id, at);
