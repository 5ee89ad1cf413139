-- The processing attempt row is the transactional outbox: the claim writes it in the same
-- transaction as the order lock ("charge this provider key"), and the outbox worker reads the
-- processing attempts whose lease is over (attempts_processing_by_age, as reconciliation
-- does). The separate outbox row, written by the claim and deleted by the settle of the same
-- pay, cost a heap tuple and an index entry per pay and said nothing the attempt does not.
-- A pending row at upgrade belongs to a processing attempt, which the worker finds anyway.
DROP TABLE outbox;
