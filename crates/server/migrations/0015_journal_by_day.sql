-- The journal by day (src/store/journal.rs, "Partitions"; docs/operating.md, "Retention"):
-- on PostgreSQL the table is range-partitioned by `at`, one partition per UTC day, so the
-- cleanup job drops a day wholly past the retention instead of deleting its rows one by
-- one. A DEFAULT partition takes any row no day partition holds yet, so an insert never
-- fails. SQLite keeps the 0014 table and its bounded DELETE batches: nothing here is hers.
--
-- The rows of the 0014 table are copied, each into the partition of its day (created here
-- from the days the rows hold, no clock needed), then that table is dropped.
--
-- A release of schema 14 may still serve the database during a rolling upgrade. It writes
-- through `journal` unchanged, but its cleanup deletes `WHERE ctid IN (SELECT ctid …)`, and
-- on a partitioned table a ctid names a row in each partition: it would delete recent rows
-- that share a ctid with an old one. So a row of the journal is only deleted by a
-- transaction that said so (`payonce.journal_delete`, set by store/journal.rs); any other
-- DELETE skips it, and schema 14's cleanup deletes nothing of the journal.
{{POSTGRES}}ALTER TABLE journal RENAME TO journal_0014;
{{POSTGRES}}ALTER TABLE journal_0014 RENAME CONSTRAINT journal_pkey TO journal_0014_pkey;
{{POSTGRES}}DROP INDEX journal_by_time, journal_by_order, journal_by_request, journal_by_key,
{{POSTGRES}}    journal_by_provider, journal_by_user;
{{POSTGRES}}CREATE TABLE journal (
{{POSTGRES}}    id BIGINT GENERATED ALWAYS AS IDENTITY,
{{POSTGRES}}    at BIGINT NOT NULL,
{{POSTGRES}}    actor TEXT NOT NULL,
{{POSTGRES}}    kind TEXT NOT NULL,
{{POSTGRES}}    request_id TEXT,
{{POSTGRES}}    user_id TEXT,
{{POSTGRES}}    order_id TEXT,
{{POSTGRES}}    idem_key TEXT,
{{POSTGRES}}    provider_id TEXT,
{{POSTGRES}}    detail TEXT NOT NULL,
{{POSTGRES}}    PRIMARY KEY (id, at)
{{POSTGRES}}) PARTITION BY RANGE (at);
{{POSTGRES}}CREATE TABLE journal_default PARTITION OF journal DEFAULT;
{{POSTGRES}}DO $$
{{POSTGRES}}DECLARE d BIGINT;
{{POSTGRES}}BEGIN
{{POSTGRES}}    FOR d IN SELECT DISTINCT floor(at / 86400000.0)::bigint FROM journal_0014 LOOP
{{POSTGRES}}        EXECUTE format('CREATE TABLE %I PARTITION OF journal FOR VALUES FROM (%s) TO (%s)',
{{POSTGRES}}            'journal_' || to_char(to_timestamp(d * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),
{{POSTGRES}}            d * 86400000, (d + 1) * 86400000);
{{POSTGRES}}    END LOOP;
{{POSTGRES}}END $$;
{{POSTGRES}}INSERT INTO journal (id, at, actor, kind, request_id, user_id, order_id, idem_key,
{{POSTGRES}}        provider_id, detail)
{{POSTGRES}}    OVERRIDING SYSTEM VALUE
{{POSTGRES}}    SELECT id, at, actor, kind, request_id, user_id, order_id, idem_key, provider_id, detail
{{POSTGRES}}    FROM journal_0014;
{{POSTGRES}}SELECT setval(pg_get_serial_sequence('journal', 'id'),
{{POSTGRES}}    COALESCE((SELECT max(id) FROM journal_0014), 0) + 1, false);
{{POSTGRES}}DROP TABLE journal_0014;
{{POSTGRES}}CREATE INDEX journal_by_time ON journal (at);
{{POSTGRES}}CREATE INDEX journal_by_order ON journal (order_id, at);
{{POSTGRES}}CREATE INDEX journal_by_request ON journal (request_id);
{{POSTGRES}}CREATE INDEX journal_by_key ON journal (idem_key);
{{POSTGRES}}CREATE INDEX journal_by_provider ON journal (provider_id);
{{POSTGRES}}CREATE INDEX journal_by_user ON journal (user_id, at);
{{POSTGRES}}CREATE FUNCTION journal_delete_guard() RETURNS trigger LANGUAGE plpgsql AS $$
{{POSTGRES}}BEGIN
{{POSTGRES}}    IF current_setting('payonce.journal_delete', true) IS DISTINCT FROM 'on' THEN
{{POSTGRES}}        RETURN NULL;
{{POSTGRES}}    END IF;
{{POSTGRES}}    RETURN OLD;
{{POSTGRES}}END $$;
{{POSTGRES}}CREATE TRIGGER journal_delete_guard BEFORE DELETE ON journal
{{POSTGRES}}    FOR EACH ROW EXECUTE FUNCTION journal_delete_guard();
