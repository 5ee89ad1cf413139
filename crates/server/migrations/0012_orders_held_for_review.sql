-- Nothing confirmable outlives its attempt (crates/rules/src/plan.rs, `Stray`): an order one
-- of whose provider payments succeeded for an attempt that had settled without a charge is
-- held (`review_at`, beside the attempt's `needs_review_at`) until a person resolves it. The
-- claim's order lock requires it unset, so a held order refuses every new key (409
-- ORDER_UNDER_REVIEW) and is never charged twice.
ALTER TABLE orders ADD COLUMN review_at BIGINT;
