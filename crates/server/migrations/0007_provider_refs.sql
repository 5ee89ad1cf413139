-- A two-phase provider's id of the payment object an attempt created there (Stripe's
-- PaymentIntent), saved in its own write as soon as the provider names it and before it is
-- confirmed (src/provider/stripe.rs, crates/rules/src/flow.rs `Phases::Two`). Lookups read
-- it back, never a search. NULL: not created yet, or a one-phase provider (the mock), which
-- is looked up by provider key. (A refund's provider id is `refunds.refund_id`; a refund is
-- looked up through its payment's saved `charge_id`, the intent.)
ALTER TABLE attempts ADD COLUMN provider_ref TEXT;
-- A webhook names the provider's object: find its attempt without a scan. Partial: a
-- one-phase provider's attempts (the mock's) have none and take no entry.
CREATE INDEX attempts_by_provider_ref ON attempts (provider_ref) WHERE provider_ref IS NOT NULL;
-- A processing refund's lease: only its holder calls the provider, so a provider that does
-- not deduplicate refunds on the refund key (localstripe) still refunds once when one key
-- is retried from several requests at once (src/refunds.rs).
ALTER TABLE refunds ADD COLUMN locked_until BIGINT;
ALTER TABLE refunds ADD COLUMN lease_token TEXT;
