//! The `Effect`: the DynamoDB writes that *are* a job's result.
//!
//! A handler does not write to DynamoDB itself. It returns an [`Effect`], and
//! [`crate::commit`] commits it together with the job's dedup marker in one
//! `TransactWriteItems`, so the job is either done (marker and effect) or not
//! done at all. Everything DynamoDB would refuse for shape or size is refused
//! here first, before any I/O, with an error that says which write is wrong.
//!
//! The marker is a separate item by default. When the effect creates an item
//! that belongs to the job (a ledger entry, an order row, a "receipt sent"
//! record), [`Effect::marked_by`] makes that item the marker instead: one item
//! fewer per job, and an effect of that one item alone is committed with a
//! single conditional `PutItem` instead of a transaction.

use crate::followup::FollowUp;

mod follow_ups;
mod item;
mod validate;
mod write;

#[cfg(test)]
mod tests;

pub use item::{Item, Key, item_size};
pub use validate::{
    EffectError, MAX_ITEM_BYTES, MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS, MarkerSlot,
    table_name,
};
pub use write::{NotAVersion, Write, WriteKind, read_version};

/// The result of a job: DynamoDB writes committed atomically with the job's
/// dedup marker.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use idemq::store::dynamodb::{Effect, Key, Write};
/// let effect = Effect::new()
///     .with(Write::update("bank", Key::string("pk", "account#a"), "ADD balance :n")
///         .value(":n", AttributeValue::N("5".into())));
/// assert_eq!(effect.len(), 1);
/// assert!(effect.uses_marker());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    writes: Vec<Write>,
    marker: Marking,
    /// Jobs sent if and only if this effect commits ([`Effect::then_send`]).
    follow_ups: Vec<FollowUp>,
    /// [`Effect::switching_marker_form`].
    switching_marker_form: bool,
}

/// How an effect's job is marked done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marking {
    /// idemq's own marker item, with a TTL, in the idemq table.
    Separate,
    /// Effect write `index`, a Put of the job's own item, is the marker.
    Fused(usize),
    /// No marker: duplicates are neither detected nor reported.
    Off,
}

impl Default for Effect {
    fn default() -> Self {
        Self::new()
    }
}

impl Effect {
    /// An effect with no writes yet. Committing an empty effect still writes
    /// the marker: the job is done (useful when its only side effect is
    /// outside DynamoDB and guarded by a downstream idempotency key).
    pub const fn new() -> Self {
        Self {
            writes: Vec::new(),
            marker: Marking::Separate,
            follow_ups: Vec::new(),
            switching_marker_form: false,
        }
    }

    /// Adds a write.
    pub fn with(mut self, write: Write) -> Self {
        self.writes.push(write);
        self
    }

    /// Adds a write to an effect held by reference.
    pub fn push(&mut self, write: Write) {
        self.writes.push(write);
    }

    /// Adds `put`, a Put that creates an item belonging to this job, and
    /// makes it the job's dedup marker: no separate marker item is written.
    ///
    /// idemq stores the job id, payload hash and commit time in the item
    /// (attributes named by the table layout, `job_id`, `payload_hash` and
    /// `committed_at` by default; the Put may not set them) and puts it
    /// only if no item with its key exists
    /// (`attribute_not_exists`). When one does, the stored item decides, as
    /// for a separate marker: the same job with the same payload is a
    /// [`Duplicate`](crate::store::CommitOutcome::Duplicate), with another payload a
    /// [`Conflict`](crate::store::CommitOutcome::Conflict); an item that is not
    /// this job's (no job id, or another's) is a
    /// [`Rejected`](crate::store::CommitOutcome::Rejected) with this write's index.
    ///
    /// The item is the user's data: it gets no TTL, so the job stays
    /// deduplicated for as long as the item exists. Its key must therefore
    /// be derived from the job (the transfer id, the order id) and the item
    /// never deleted while the job may still be redelivered. `put` must be
    /// a [`Write::put`] without a condition, names or values (idemq sets the
    /// condition). An effect whose only write is its marker is committed
    /// with one conditional `PutItem`, not a transaction (half the write
    /// units). Calling this again makes the new Put the marker and leaves
    /// the earlier one a plain Put.
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use idemq::store::dynamodb::{Effect, Item, Key, Write};
    /// let amount = AttributeValue::N("25".into());
    /// let effect = Effect::new()
    ///     .with(Write::update("bank", Key::string("pk", "account#alice"), "ADD balance :a")
    ///         .value(":a", amount.clone()))
    ///     .marked_by(Write::put(
    ///         "bank",
    ///         Key::string("pk", "entry#t-1"),
    ///         Item::from([("amount".to_string(), amount)]),
    ///     ));
    /// assert_eq!(effect.len(), 2);
    /// assert!(effect.uses_marker());
    /// assert_eq!(effect.fused_marker().map(|w| w.table()), Some("bank"));
    /// ```
    pub fn marked_by(mut self, put: Write) -> Self {
        self.writes.push(put);
        self.marker = Marking::Fused(self.writes.len() - 1);
        self
    }

    /// For a deploy that switches this effect between idemq's separate
    /// marker and a [fused](Effect::marked_by) one: the commit also makes
    /// sure that the other form does not mark the job already, so that a
    /// job committed by the previous version and delivered again to this
    /// one is a [`Duplicate`](crate::store::CommitOutcome::Duplicate) (or a
    /// [`Conflict`](crate::store::CommitOutcome::Conflict)), not applied a second
    /// time. Each form alone checks only its own marker.
    ///
    /// - With a fused marker, the commit adds a `ConditionCheck` that the
    ///   job's separate marker item does not exist. A fused marker alone is
    ///   then a transaction of two items instead of one `PutItem` (4 write
    ///   units instead of 1); with other writes, one more transaction item
    ///   (2 write units).
    /// - With a separate marker, each write's condition also requires that
    ///   its item is not this job's fused marker (it carries this job's id
    ///   and a payload hash). No item and no round trip is added. The
    ///   previous version's fused item is found only if this version still
    ///   writes it (keep the Put, drop only `marked_by`).
    ///
    /// Set it on both sides of the switch: first deploy the old form with
    /// it, then the new form with it, and drop it once no copy committed by
    /// the old form can be delivered again (the source queue's and the
    /// DLQ's retention after the switch). Without the first step, a copy
    /// committed by the new form while the old one still runs is found by
    /// the old form's condition and dead-lettered as rejected: never
    /// applied twice. Without a marker ([`Effect::without_marker`]) it does
    /// nothing.
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use idemq::store::dynamodb::{Effect, Item, Key, Write};
    /// let entry = Write::put("bank", Key::string("pk", "entry#t-1"), Item::new());
    /// // The version before the switch was `Effect::new().marked_by(entry)`.
    /// let effect = Effect::new().with(entry).switching_marker_form();
    /// assert!(effect.is_switching_marker_form());
    /// ```
    pub fn switching_marker_form(mut self) -> Self {
        self.switching_marker_form = true;
        self
    }

    /// Whether [`Effect::switching_marker_form`] was set.
    pub fn is_switching_marker_form(&self) -> bool {
        self.switching_marker_form && self.uses_marker()
    }

    /// Commits the writes without a dedup marker. Only for naturally
    /// idempotent effects (pure upserts: applying them twice leaves the same
    /// state); duplicates are then neither detected nor reported. An effect
    /// of one unconditional Put, Update or Delete without a marker is
    /// committed with one standard write, not a transaction.
    pub fn without_marker(mut self) -> Self {
        self.marker = Marking::Off;
        self
    }

    /// Whether the job is deduplicated: by a separate marker item or by a
    /// [fused](Effect::marked_by) one.
    pub fn uses_marker(&self) -> bool {
        self.marker != Marking::Off
    }

    /// The write that is this job's marker, when [`Effect::marked_by`] made
    /// one; `None` for a separate marker item or none.
    pub fn fused_marker(&self) -> Option<&Write> {
        self.fused_index().map(|i| &self.writes[i])
    }

    /// The index in `writes` of the fused marker.
    pub(crate) fn fused_index(&self) -> Option<usize> {
        match self.marker {
            Marking::Fused(i) => Some(i),
            Marking::Separate | Marking::Off => None,
        }
    }

    /// Whether idemq adds its own marker item to this effect.
    pub(crate) fn uses_separate_marker(&self) -> bool {
        self.marker == Marking::Separate
    }

    /// The writes in the order they were added, a fused marker included.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// How many writes, a fused marker included (a separate marker not).
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether there are no writes.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

impl FromIterator<Write> for Effect {
    fn from_iter<I: IntoIterator<Item = Write>>(iter: I) -> Self {
        Self {
            writes: iter.into_iter().collect(),
            ..Self::new()
        }
    }
}
