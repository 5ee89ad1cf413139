-- Retention's other scans by time (src/store/mod.rs, `delete_old`), so each round finds what
-- expired through an index instead of reading every handled webhook event and refund.
CREATE INDEX webhook_events_by_time ON webhook_events (received_at);
CREATE INDEX refunds_by_expiry ON refunds (expires_at);
