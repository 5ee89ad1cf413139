-- What one pay writes, cut to the index entries a query or a rule reads (docs/benchmarks.md,
-- "The store's own ceilings"). The line marked for PostgreSQL is its only
-- (`Backend::dialect`, src/store/mod.rs).
--
-- No query of the server reads the audit trail by entity; retention reads it by time
-- (audit_by_time).
DROP INDEX audit_by_entity;
-- Nothing looks an audit row up by its id (retention deletes by ctid); the id stays for the
-- rows' order. On SQLite the id is the rowid, which costs no index.
{{POSTGRES}}ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey;
-- Key retention reads only keys with an expiry (attempts::EXPIRED): a processing attempt,
-- which has none, takes no entry.
DROP INDEX attempts_by_expiry;
CREATE INDEX attempts_by_expiry ON attempts (expires_at) WHERE expires_at IS NOT NULL;
-- The settle deletes its outbox row, so the table holds only the pending rows (pays in
-- flight, and those a crash or an outage left): the worker reads them all, which a scan does
-- best. Nothing looks an outbox row up by its id; the settle finds it by attempt_id.
DROP INDEX outbox_pending;
{{POSTGRES}}ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
