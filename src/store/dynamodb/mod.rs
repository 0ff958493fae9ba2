//! DynamoDB as the system of record: the marker and the effect in one
//! `TransactWriteItems`.
//!
//! - [`commit`]: the dedup transaction ([`Committer`]), the marker read
//!   before the handler, the single-write fast path, marker-form switches;
//! - [`effect`]: the handler's writes ([`Effect`], [`Write`], [`Key`]) and
//!   DynamoDB's limits on them;
//! - `outbox`: follow-up jobs stored in the marker item.

pub mod commit;
pub mod effect;
mod outbox;

pub use commit::Committer;
pub(crate) use commit::LookedUp;
pub use effect::{Effect, EffectError, Key, Write};

impl From<EffectError> for crate::commit::CommitError {
    fn from(e: EffectError) -> Self {
        Self::Effect(crate::commit::InvalidEffect::new(e))
    }
}
