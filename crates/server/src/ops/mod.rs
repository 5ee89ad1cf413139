//! The operations: what the endpoints (`src/http/`) and the background jobs do, each the I/O
//! shell of the rules' plans and machines (`crates/rules`) over the store and the provider.
//! They may call the infrastructure (`store`, `provider`, `replay`, …), never the edge.

pub(crate) mod cancel;
pub(crate) mod jobs;
pub(crate) mod leftovers;
pub(crate) mod orders;
pub(crate) mod pay;
pub(crate) mod refunds;
pub(crate) mod review;
pub(crate) mod sweep;
pub(crate) mod timeline;
pub(crate) mod webhooks;
