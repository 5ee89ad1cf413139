-- Provider webhook events already handled, by event id. Events arrive at least once, maybe
-- duplicated or reordered; handling is idempotent anyway (settling is a conditional update),
-- this table only spares the provider lookup for a duplicate and keeps a record.
CREATE TABLE webhook_events (
    id           TEXT PRIMARY KEY,
    event_type   TEXT NOT NULL,
    provider_key TEXT NOT NULL,
    received_at  BIGINT NOT NULL
);
