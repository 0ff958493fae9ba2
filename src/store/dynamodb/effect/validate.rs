//! DynamoDB's limits and the checks an effect passes before any I/O
//! ([`Effect::validate`]), with [`EffectError`], why one is refused. Its
//! own file: the rules DynamoDB enforces, apart from the builders a handler
//! calls.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{Effect, Write, WriteKind};
use crate::followup::FollowUpError;

/// DynamoDB's limit on actions in one `TransactWriteItems`.
pub const MAX_TRANSACTION_ITEMS: usize = 100;
/// DynamoDB's limit on the aggregate size of one transaction.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
/// DynamoDB's limit on one item.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

impl Effect {
    /// Checks everything DynamoDB would refuse for shape or size. `marker`
    /// names the marker's table, key attribute and reserved key prefix: an
    /// effect may not write any key under that prefix in that table.
    pub fn validate(&self, marker: &MarkerSlot<'_>) -> Result<(), EffectError> {
        // idemq's own item: the separate marker, or a switching fused
        // marker's check that the separate one is absent.
        let added = self.uses_separate_marker()
            || (self.is_switching_marker_form() && self.fused_index().is_some());
        let limit = MAX_TRANSACTION_ITEMS - usize::from(added);
        if self.writes.len() > limit {
            return Err(EffectError::TooManyWrites {
                count: self.writes.len(),
                limit,
            });
        }
        let mut total = 0;
        for (index, w) in self.writes.iter().enumerate() {
            if w.table.is_empty() {
                return Err(EffectError::EmptyTable { index });
            }
            if w.key.0.is_empty() {
                return Err(EffectError::EmptyKey { index });
            }
            if w.kind == WriteKind::ConditionCheck
                && w.condition.as_deref().unwrap_or("").is_empty()
            {
                return Err(EffectError::EmptyCondition { index });
            }
            // A Put's attributes are merged over its key: an attribute named
            // like a key attribute would send the write to another item.
            if let WriteKind::Put { attributes } = &w.kind
                && let Some(name) = w.key.0.keys().find(|k| attributes.contains_key(*k))
            {
                return Err(EffectError::KeyInAttributes {
                    index,
                    attribute: name.clone(),
                });
            }
            if table_name(&w.table) == table_name(marker.table) && marker.reserves(w) {
                return Err(EffectError::MarkerKey { index });
            }
            if let Some(first) = self.writes[..index]
                .iter()
                .position(|o| table_name(&o.table) == table_name(&w.table) && o.key == w.key)
            {
                return Err(EffectError::SameItemTwice {
                    first,
                    second: index,
                    table: w.table.clone(),
                });
            }
            let mut stored = w.stored_size();
            if self.fused_index() == Some(index) {
                stored += marker.check_fused(index, w)?;
            }
            if stored > MAX_ITEM_BYTES {
                return Err(EffectError::ItemTooLarge {
                    index,
                    bytes: stored,
                });
            }
            total += w.size();
        }
        if total > MAX_TRANSACTION_BYTES {
            return Err(EffectError::TooLarge { bytes: total });
        }
        self.validate_follow_ups(marker, total)
    }
}

/// Where the dedup markers live, so an effect cannot write over one, and
/// what a marker stores.
#[derive(Debug, Clone, Copy)]
pub struct MarkerSlot<'a> {
    /// The idemq table.
    pub table: &'a str,
    /// Its partition key attribute.
    pub partition_key: &'a str,
    /// Every key idemq writes itself starts with this prefix.
    pub reserved_prefix: &'a str,
    /// The attribute a marker (separate or fused) stores the job id in.
    pub job_id: &'a str,
    /// The attribute a marker stores the payload hash in.
    pub payload_hash: &'a str,
    /// The attribute a marker stores its commit time in.
    pub committed_at: &'a str,
}

/// Bytes a fused marker's values add to its item at most: the job id
/// ([`crate::job::MAX_JOB_ID_BYTES`]), the payload hash (64 hex digits) and
/// the commit time (RFC 3339 with milliseconds, 24 characters).
pub(super) const FUSED_MARKER_VALUES: usize = crate::job::MAX_JOB_ID_BYTES + 64 + 24;

impl MarkerSlot<'_> {
    /// A fused marker must be a plain Put (idemq owns its condition) whose
    /// attributes leave room for the job id and hash. Returns the bytes
    /// the marker attributes add.
    fn check_fused(&self, index: usize, w: &Write) -> Result<usize, EffectError> {
        let WriteKind::Put { attributes } = &w.kind else {
            return Err(EffectError::MarkerNotPut { index });
        };
        if w.condition.is_some() || !w.names.is_empty() || !w.values.is_empty() {
            return Err(EffectError::MarkerCondition { index });
        }
        for name in [self.job_id, self.payload_hash, self.committed_at] {
            if attributes.contains_key(name) {
                return Err(EffectError::MarkerAttribute {
                    index,
                    attribute: name.to_owned(),
                });
            }
        }
        Ok(self.names_len() + FUSED_MARKER_VALUES)
    }

    /// The bytes of the attribute names idemq adds to a fused marker.
    pub(super) fn names_len(&self) -> usize {
        self.job_id.len() + self.payload_hash.len() + self.committed_at.len()
    }

    /// Whether `write`, in the marker table, would touch an item under the
    /// reserved prefix: by its key, or (a Put) by an attribute carrying the
    /// marker table's partition key. Every kind counts: a Delete or an Update
    /// of a marker (an Update cannot change key attributes, DynamoDB refuses
    /// that: "You cannot use UpdateItem to update any primary key
    /// attributes", <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_AttributeValueUpdate.html>)
    /// would erase the job's hash or expiry just the same.
    fn reserves(&self, write: &Write) -> bool {
        let reserved = |v: Option<&AttributeValue>| matches!(v, Some(AttributeValue::S(pk)) if pk.starts_with(self.reserved_prefix));
        reserved(write.key.get(self.partition_key))
            || matches!(&write.kind, WriteKind::Put { attributes }
                if reserved(attributes.get(self.partition_key)))
    }
}

/// The table name in `table`, which DynamoDB accepts as a name or as an ARN
/// (`arn:aws:dynamodb:us-east-1:123456789012:table/NAME`; "You can also
/// provide the Amazon Resource Name (ARN) of the table in this parameter",
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Update.html>).
/// Account and region are not compared: a transaction cannot reach a table
/// of another account or region (it is cancelled), so within one
/// transaction the name alone names the table.
///
/// ```
/// use idemq::store::dynamodb::table_name;
/// assert_eq!(table_name("arn:aws:dynamodb:eu-west-1:123456789012:table/jobs"), "jobs");
/// assert_eq!(table_name("jobs"), "jobs");
/// ```
pub fn table_name(table: &str) -> &str {
    let mut parts = table.splitn(6, ':');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("arn"), Some(_partition), Some("dynamodb"), Some(_), Some(_), Some(resource)) => {
            resource.strip_prefix("table/").map_or(table, |rest| {
                // A stream or index ARN names a part of the table: still the table.
                rest.split('/').next().unwrap_or(rest)
            })
        }
        _ => table,
    }
}

/// Why an effect cannot be committed. Permanent: the same handler given the
/// same job returns the same effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EffectError {
    /// More writes than one transaction holds.
    #[error("effect has {count} writes; at most {limit} fit in one transaction with the marker")]
    TooManyWrites {
        /// The effect's writes.
        count: usize,
        /// The most that fit (100, less one for a separate marker).
        limit: usize,
    },
    #[error(
        "effect writes {first} and {second} target the same item in table {table}; DynamoDB refuses two actions on one item in a transaction"
    )]
    /// Two writes on one item.
    SameItemTwice {
        /// The first write's index.
        first: usize,
        /// The second write's index.
        second: usize,
        /// Their table.
        table: String,
    },
    /// A write on a key reserved for idemq's own items.
    #[error("effect write {index} targets a key reserved for idemq's markers")]
    MarkerKey {
        /// The write's index.
        index: usize,
    },
    #[error("effect write {index} is the job's marker (Effect::marked_by) but not a Put")]
    /// A [`marked_by`](Effect::marked_by) write that is not a Put.
    MarkerNotPut {
        /// The write's index.
        index: usize,
    },
    #[error(
        "effect write {index} is the job's marker (Effect::marked_by) and has its own condition, names or values; idemq sets its condition"
    )]
    /// A [`marked_by`](Effect::marked_by) write with a condition, names or
    /// values of its own.
    MarkerCondition {
        /// The write's index.
        index: usize,
    },
    #[error(
        "effect write {index} is the job's marker (Effect::marked_by) and sets {attribute:?}, where idemq stores the marker's job id, payload hash, commit time or follow-ups"
    )]
    /// A [`marked_by`](Effect::marked_by) write that sets an attribute
    /// idemq stores the job id, payload hash, commit time or follow-ups in.
    MarkerAttribute {
        /// The write's index.
        index: usize,
        /// The attribute.
        attribute: String,
    },
    #[error(
        "effect write {index} is a Put whose attributes name its key attribute {attribute:?}; the key goes in the Key only"
    )]
    /// A Put whose attributes name one of its key attributes.
    KeyInAttributes {
        /// The write's index.
        index: usize,
        /// The key attribute.
        attribute: String,
    },
    #[error(
        "effect write {index} stores an item of {bytes} bytes; the DynamoDB limit is {MAX_ITEM_BYTES}"
    )]
    /// An item over DynamoDB's 400 KB.
    ItemTooLarge {
        /// The write's index.
        index: usize,
        /// The item's size.
        bytes: usize,
    },
    #[error("effect is {bytes} bytes; a transaction may carry at most {MAX_TRANSACTION_BYTES}")]
    /// An effect over a transaction's 4 MB.
    TooLarge {
        /// The effect's size.
        bytes: usize,
    },
    #[error("effect write {index} has an empty table name")]
    /// A write without a table.
    EmptyTable {
        /// The write's index.
        index: usize,
    },
    #[error("effect write {index} has an empty key")]
    /// A write without a key.
    EmptyKey {
        /// The write's index.
        index: usize,
    },
    #[error("effect write {index} is a condition check without a condition")]
    /// A condition check without a condition.
    EmptyCondition {
        /// The write's index.
        index: usize,
    },
    /// The SDK refused to build the request.
    #[error("could not build the DynamoDB request: {0}")]
    Build(String),
    /// A follow-up job cannot be sent as it is, or does not fit its marker.
    #[error("invalid follow-up: {0}")]
    FollowUp(#[from] FollowUpError),
}
