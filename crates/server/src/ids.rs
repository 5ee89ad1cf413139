//! Where every new id comes from: random (UUID v4) in production, a
//! [`payonce_rules::ids::Sequence`] when a test injects one (`AppState::with_ids`), as the
//! clock is injected beside it (`src/clock.rs`). The id types and their prefixes are
//! `payonce_rules::ids`.

pub use payonce_rules::ids::{IdSource, Sequence};

/// UUID v4: 122 random bits per id, so ids minted by any number of processes never meet.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn next_bits(&self) -> u128 {
        uuid::Uuid::new_v4().as_u128()
    }
}
