-- The jobs' scans of `attempts` by time, so their cost does not grow with the stored keys
-- (docs/benchmarks.md, "Cost as the work grows"): retention finds expired keys by
-- `expires_at` (src/store/attempts.rs, `delete_expired`), reconciliation finds old
-- processing attempts by `created_at` (`stuck_since`), which are few.
CREATE INDEX attempts_by_expiry ON attempts (expires_at);
CREATE INDEX attempts_processing_by_age ON attempts (created_at) WHERE status = 'processing';
