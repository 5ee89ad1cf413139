-- The receipt email as an outbox job (src/ops/jobs/mod.rs, `send_receipts`): what became of
-- it, how often it was tried, when it is due again, and why its last run did not deliver it.
-- `pending` jobs are due at `next_attempt_at` (NULL: now); the others are final:
-- `sent` (the relay answered 2xx, or the dev mailbox has it), `failed` (the relay refused
-- it for good, or it kept failing: an operator's to look at), `no_address` (the order has
-- no mail address to send it to), `not_sent` (`--mailer none`: receipts are the operator's).
ALTER TABLE jobs ADD COLUMN state TEXT NOT NULL DEFAULT 'pending'
    CHECK (state IN ('pending', 'sent', 'failed', 'no_address', 'not_sent'));
ALTER TABLE jobs ADD COLUMN tries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN next_attempt_at BIGINT;
ALTER TABLE jobs ADD COLUMN last_error TEXT;
-- Jobs acknowledged before this migration were delivered to the dev mailbox.
UPDATE jobs SET state = 'sent' WHERE done_at IS NOT NULL;
CREATE INDEX jobs_by_state ON jobs (state, created_at);
