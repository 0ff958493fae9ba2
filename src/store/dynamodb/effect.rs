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

use std::collections::HashMap;

use crate::followup::{FOLLOW_UPS_ATTRIBUTE, FollowUp, FollowUpError};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck as SdkConditionCheck, Delete as SdkDelete, Put as SdkPut,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update as SdkUpdate,
};

/// DynamoDB's limit on actions in one `TransactWriteItems`.
pub const MAX_TRANSACTION_ITEMS: usize = 100;
/// DynamoDB's limit on the aggregate size of one transaction.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
/// DynamoDB's limit on one item.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// A DynamoDB item or key, as the SDK represents it.
pub type Item = HashMap<String, AttributeValue>;

/// The primary key of the item a write targets.
///
/// ```
/// use idemq::effect::Key;
/// let key = Key::string("pk", "account#alice");
/// assert_eq!(key.get("pk").and_then(|v| v.as_s().ok()).map(String::as_str), Some("account#alice"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Key(Item);

impl Key {
    /// A key of one attribute.
    pub fn new(name: impl Into<String>, value: AttributeValue) -> Self {
        Self(HashMap::from([(name.into(), value)]))
    }

    /// A key of one string attribute, the common case.
    pub fn string(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self::new(name, AttributeValue::S(value.into()))
    }

    /// Adds the sort key of a composite key.
    pub fn and(mut self, name: impl Into<String>, value: AttributeValue) -> Self {
        self.0.insert(name.into(), value);
        self
    }

    /// The value of key attribute `name`.
    pub fn get(&self, name: &str) -> Option<&AttributeValue> {
        self.0.get(name)
    }

    /// The key as an item map (attribute name to value).
    pub fn as_item(&self) -> &Item {
        &self.0
    }
}

/// What a [`Write`] does to its item.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteKind {
    /// Replace the whole item with the key plus these attributes.
    Put {
        /// The item's attributes besides its key.
        attributes: Item,
    },
    /// Apply an update expression (`SET`, `ADD`, `REMOVE`, `DELETE`).
    Update {
        /// The update expression.
        expression: String,
    },
    /// Delete the item.
    Delete,
    /// Write nothing; only require the condition to hold.
    ConditionCheck,
}

/// One action of a transaction: a kind, a target item and an optional
/// condition, with the expression names and values they use.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use idemq::effect::{Key, Write};
/// let credit = Write::update("bank", Key::string("pk", "account#alice"), "ADD balance :amount")
///     .value(":amount", AttributeValue::N("25".into()));
/// let entry = Write::put(
///     "bank",
///     Key::string("pk", "entry#t-1"),
///     [("amount".to_string(), AttributeValue::N("25".into()))].into(),
/// )
/// .condition("attribute_not_exists(pk)");
/// # let _ = (credit, entry);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    table: String,
    key: Key,
    kind: WriteKind,
    // pub(crate): read back by `testing::WriteView` (feature `testing`).
    pub(crate) condition: Option<String>,
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: Item,
    // Optimistic concurrency: see `Write::optimistic`.
    optimistic: bool,
}

impl Write {
    fn new(table: impl Into<String>, key: Key, kind: WriteKind) -> Self {
        Self {
            table: table.into(),
            key,
            kind,
            condition: None,
            names: HashMap::new(),
            values: HashMap::new(),
            optimistic: false,
        }
    }

    /// Replaces the item at `key` with the key plus `attributes`.
    pub fn put(table: impl Into<String>, key: Key, attributes: Item) -> Self {
        Self::new(table, key, WriteKind::Put { attributes })
    }

    /// Applies an update expression to the item at `key` (creating it if
    /// absent, as `UpdateItem` does).
    pub fn update(table: impl Into<String>, key: Key, expression: impl Into<String>) -> Self {
        let expression = expression.into();
        Self::new(table, key, WriteKind::Update { expression })
    }

    /// Deletes the item at `key`.
    pub fn delete(table: impl Into<String>, key: Key) -> Self {
        Self::new(table, key, WriteKind::Delete)
    }

    /// A write that only asserts `condition` on an item.
    pub fn condition_check(
        table: impl Into<String>,
        key: Key,
        condition: impl Into<String>,
    ) -> Self {
        Self::new(table, key, WriteKind::ConditionCheck).condition(condition)
    }

    /// The condition the item must meet for the whole transaction to apply.
    /// If it fails, the commit outcome is `Rejected` with this write's index.
    pub fn condition(mut self, expression: impl Into<String>) -> Self {
        self.condition = Some(expression.into());
        self
    }

    /// Marks this write's condition as an optimistic-concurrency guard: it
    /// checks that state the handler *read* is unchanged (`version =
    /// :read`), so a failed condition means "the state moved under me" — a
    /// lost race, not a business rule saying no. Such a failure is a
    /// [`Contended`](crate::CommitOutcome::Contended) outcome and idemq
    /// runs the handler again (re-reading) instead of dead-lettering the
    /// job; after `BatchConfig::contention_retries` lost races in one
    /// invocation it backs off like any transient failure. A failed
    /// condition on a write *not* so marked stays a
    /// [`Rejected`](crate::CommitOutcome::Rejected) (DLQ now).
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use idemq::effect::{Key, Write};
    /// let write = Write::update("bank", Key::string("pk", "account#a"), "SET balance = :b, version = :next")
    ///     .condition("version = :read")
    ///     .value(":b", AttributeValue::N("30".into()))
    ///     .value(":next", AttributeValue::N("8".into()))
    ///     .value(":read", AttributeValue::N("7".into()))
    ///     .optimistic();
    /// assert!(write.is_optimistic());
    /// ```
    pub fn optimistic(mut self) -> Self {
        self.optimistic = true;
        self
    }

    /// Guards this write with the version the handler read (see
    /// [`read_version`]) and marks it [`optimistic`](Write::optimistic):
    /// the transaction applies only if `attribute` still holds `read`. A
    /// missing version counts as 0, so `read` = 0 also accepts an item
    /// that has no `attribute` at all (or no item): items written before
    /// the version was introduced, by a writer that never sets it, take
    /// part in the race instead of failing `version = 0` forever. The
    /// write itself must set `attribute` to `read + 1`.
    ///
    /// Call it after [`Write::condition`]: an earlier condition is kept
    /// and both must hold; a later one would replace the guard.
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use idemq::effect::{Key, Write, read_version};
    /// let stored = None; // as GetItem found it: no item, or one without a version
    /// let read = read_version(stored, "version").unwrap();
    /// let write = Write::update("bank", Key::string("pk", "account#a"), "SET balance = :b, version = :next")
    ///     .value(":b", AttributeValue::N("30".into()))
    ///     .value(":next", AttributeValue::N((read + 1).to_string()))
    ///     .if_version("version", read);
    /// assert!(write.is_optimistic());
    /// assert_eq!(
    ///     write.condition_expression(),
    ///     Some("attribute_not_exists(#idemq_version) OR #idemq_version = :idemq_version")
    /// );
    /// ```
    pub fn if_version(mut self, attribute: impl Into<String>, read: u64) -> Self {
        const NAME: &str = "#idemq_version";
        const VALUE: &str = ":idemq_version";
        let guard = if read == 0 {
            format!("attribute_not_exists({NAME}) OR {NAME} = {VALUE}")
        } else {
            format!("{NAME} = {VALUE}")
        };
        self.condition = Some(match self.condition.take() {
            Some(earlier) => format!("({earlier}) AND ({guard})"),
            None => guard,
        });
        self.names.insert(NAME.to_owned(), attribute.into());
        self.values
            .insert(VALUE.to_owned(), AttributeValue::N(read.to_string()));
        self.optimistic()
    }

    /// Whether [`Write::optimistic`] marked this write.
    pub fn is_optimistic(&self) -> bool {
        self.optimistic
    }

    /// An expression attribute name (`#name`).
    pub fn name(mut self, placeholder: impl Into<String>, name: impl Into<String>) -> Self {
        self.names.insert(placeholder.into(), name.into());
        self
    }

    /// An expression attribute value (`:value`).
    pub fn value(mut self, placeholder: impl Into<String>, value: AttributeValue) -> Self {
        self.values.insert(placeholder.into(), value);
        self
    }

    /// The table written, as given (a name or an ARN).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The key of the item written.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// What the write does.
    pub fn kind(&self) -> &WriteKind {
        &self.kind
    }

    /// The condition set with [`Write::condition`], if any.
    pub fn condition_expression(&self) -> Option<&str> {
        self.condition.as_deref()
    }

    /// The expression attribute names set with [`Write::name`].
    pub fn expression_names(&self) -> &HashMap<String, String> {
        &self.names
    }

    /// The expression attribute values set with [`Write::value`].
    pub fn expression_values(&self) -> &Item {
        &self.values
    }

    /// Approximate bytes this action adds to the request, by DynamoDB's item
    /// size rules (names + values). Used for the 400 KB and 4 MB limits.
    fn size(&self) -> usize {
        let mut n = self.table.len() + item_size(&self.key.0) + item_size(&self.values);
        n += self.condition.as_ref().map_or(0, String::len);
        n += self
            .names
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
        match &self.kind {
            WriteKind::Put { attributes } => n + item_size(attributes),
            WriteKind::Update { expression } => n + expression.len(),
            WriteKind::Delete | WriteKind::ConditionCheck => n,
        }
    }

    fn stored_size(&self) -> usize {
        match &self.kind {
            WriteKind::Put { attributes } => item_size(&self.key.0) + item_size(attributes),
            _ => 0,
        }
    }

    /// The SDK form of this write. Only called on validated writes.
    pub(crate) fn to_sdk(&self) -> Result<TransactWriteItem, EffectError> {
        self.to_sdk_returning(None)
    }

    /// [`Write::to_sdk`], returning the item a failed condition found when
    /// `on_failure` asks for it.
    pub(crate) fn to_sdk_returning(
        &self,
        on_failure: Option<ReturnValuesOnConditionCheckFailure>,
    ) -> Result<TransactWriteItem, EffectError> {
        let names = (!self.names.is_empty()).then(|| self.names.clone());
        let values = (!self.values.is_empty()).then(|| self.values.clone());
        let built = match &self.kind {
            WriteKind::Put { attributes } => {
                let mut item = self.key.0.clone();
                item.extend(attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
                SdkPut::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .set_condition_expression(self.condition.clone())
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .set_return_values_on_condition_check_failure(on_failure)
                    .build()
                    .map(|p| TransactWriteItem::builder().put(p).build())
            }
            WriteKind::Update { expression } => SdkUpdate::builder()
                .table_name(&self.table)
                .set_key(Some(self.key.0.clone()))
                .update_expression(expression)
                .set_condition_expression(self.condition.clone())
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values_on_condition_check_failure(on_failure)
                .build()
                .map(|u| TransactWriteItem::builder().update(u).build()),
            WriteKind::Delete => SdkDelete::builder()
                .table_name(&self.table)
                .set_key(Some(self.key.0.clone()))
                .set_condition_expression(self.condition.clone())
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values_on_condition_check_failure(on_failure)
                .build()
                .map(|d| TransactWriteItem::builder().delete(d).build()),
            WriteKind::ConditionCheck => SdkConditionCheck::builder()
                .table_name(&self.table)
                .set_key(Some(self.key.0.clone()))
                .condition_expression(self.condition.clone().unwrap_or_default())
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values_on_condition_check_failure(on_failure)
                .build()
                .map(|c| TransactWriteItem::builder().condition_check(c).build()),
        };
        built.map_err(|e| EffectError::Build(e.to_string()))
    }
}

/// The result of a job: DynamoDB writes committed atomically with the job's
/// dedup marker.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use idemq::effect::{Effect, Key, Write};
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
    /// [`Duplicate`](crate::CommitOutcome::Duplicate), with another payload a
    /// [`Conflict`](crate::CommitOutcome::Conflict); an item that is not
    /// this job's (no job id, or another's) is a
    /// [`Rejected`](crate::CommitOutcome::Rejected) with this write's index.
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
    /// use idemq::effect::{Effect, Item, Key, Write};
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
    /// one is a [`Duplicate`](crate::CommitOutcome::Duplicate) (or a
    /// [`Conflict`](crate::CommitOutcome::Conflict)), not applied a second
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
    /// use idemq::effect::{Effect, Item, Key, Write};
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

impl FromIterator<Write> for Effect {
    fn from_iter<I: IntoIterator<Item = Write>>(iter: I) -> Self {
        Self {
            writes: iter.into_iter().collect(),
            ..Self::new()
        }
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
const FUSED_MARKER_VALUES: usize = crate::job::MAX_JOB_ID_BYTES + 64 + 24;

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
    fn names_len(&self) -> usize {
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
/// use idemq::effect::table_name;
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

/// The version an optimistic handler read from `item` (as `GetItem`
/// returned it): its `attribute` as a whole number, 0 when there is no item
/// or the item has no such attribute (written before versions, or by a
/// writer that does not set one). Pass it to [`Write::if_version`].
pub fn read_version(item: Option<&Item>, attribute: &str) -> Result<u64, NotAVersion> {
    match item.and_then(|item| item.get(attribute)) {
        None => Ok(0),
        Some(value) => value
            .as_n()
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| NotAVersion {
                attribute: attribute.to_owned(),
            }),
    }
}

/// A stored version attribute that is not a whole number of type `N`.
/// Permanent: the item is not one that versioned writes made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("attribute {attribute} is not a whole number, so it is not a version")]
pub struct NotAVersion {
    /// The version attribute's name.
    pub attribute: String,
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

// ---- Follow-up jobs (src/followup.rs): sent if and only if the effect commits.

impl Effect {
    /// Adds a follow-up job: sent, with its own `idemq-job-id`, if and only
    /// if this effect commits, at least once (see [`crate::followup`]).
    /// idemq stores it in the job's marker (separate or
    /// [fused](Effect::marked_by)) in the same write, sends it after the
    /// commit and before the job is acknowledged, and re-sends it from the
    /// marker when a redelivery finds the job done. An effect
    /// [`without_marker`](Effect::without_marker) cannot carry follow-ups.
    ///
    /// ```
    /// use idemq::followup::FollowUp;
    /// use idemq::Effect;
    /// let next = FollowUp::raw("https://sqs.us-east-1.amazonaws.com/1/next", "t-1/then", "{}");
    /// let effect = Effect::new().then_send(next);
    /// assert_eq!(effect.follow_ups().len(), 1);
    /// ```
    pub fn then_send(mut self, follow_up: FollowUp) -> Self {
        self.follow_ups.push(follow_up);
        self
    }

    /// Adds a follow-up job to an effect held by reference
    /// ([`Effect::then_send`]).
    pub fn push_follow_up(&mut self, follow_up: FollowUp) {
        self.follow_ups.push(follow_up);
    }

    /// The follow-up jobs, in the order they were added.
    pub fn follow_ups(&self) -> &[FollowUp] {
        &self.follow_ups
    }

    /// The follow-ups' part of [`Effect::validate`]: each one as SQS would
    /// take it, and the marker that stores them within DynamoDB's item
    /// limit (`total`: the effect's bytes so far, for the 4 MB limit).
    fn validate_follow_ups(
        &self,
        marker: &MarkerSlot<'_>,
        total: usize,
    ) -> Result<(), EffectError> {
        crate::followup::check_all(&self.follow_ups, self.uses_marker())?;
        if self.follow_ups.is_empty() {
            return Ok(());
        }
        let bytes = item_size(&super::outbox::stored(&self.follow_ups));
        let item = match self.fused_marker().map(|w| (w, &w.kind)) {
            Some((w, WriteKind::Put { attributes })) => {
                if attributes.contains_key(FOLLOW_UPS_ATTRIBUTE) {
                    return Err(EffectError::MarkerAttribute {
                        index: self.fused_index().unwrap_or_default(),
                        attribute: FOLLOW_UPS_ATTRIBUTE.to_owned(),
                    });
                }
                w.stored_size() + marker.names_len() + FUSED_MARKER_VALUES
            }
            _ => super::outbox::SEPARATE_MARKER_BYTES,
        };
        if item + bytes > MAX_ITEM_BYTES {
            return Err(FollowUpError::MarkerTooLarge {
                bytes: item + bytes,
                limit: MAX_ITEM_BYTES,
            }
            .into());
        }
        if total + bytes > MAX_TRANSACTION_BYTES {
            return Err(EffectError::TooLarge {
                bytes: total + bytes,
            });
        }
        Ok(())
    }
}

// ---- End of follow-up jobs.

/// Size of an item by DynamoDB's rules: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        // A variant added by a newer SDK: count it generously.
        _ => 64,
    }
}

/// DynamoDB stores about two significant digits per byte, plus one byte.
fn number_size(n: &str) -> usize {
    let digits = n.chars().filter(char::is_ascii_digit).count();
    digits.div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: MarkerSlot<'static> = MarkerSlot {
        table: "t",
        partition_key: "pk",
        reserved_prefix: "idemq#",
        job_id: "job_id",
        payload_hash: "payload_hash",
        committed_at: "committed_at",
    };

    /// The follow-ups live in the marker item: with it they must fit
    /// DynamoDB's 400 KB, and a fused marker may not set their attribute.
    #[test]
    fn the_marker_with_its_follow_ups_fits_one_item() {
        use crate::followup::FOLLOW_UPS_ATTRIBUTE;
        const URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/next";
        let follow = |i: usize| FollowUp::raw(URL, format!("f-{i}"), "x".repeat(200 * 1024));
        let one = Effect::new().then_send(follow(0));
        assert_eq!(one.validate(&SLOT), Ok(()));
        let two = one.then_send(follow(1));
        assert!(
            matches!(
                two.validate(&SLOT),
                Err(EffectError::FollowUp(FollowUpError::MarkerTooLarge { bytes, .. })) if bytes > MAX_ITEM_BYTES
            ),
            "{:?}",
            two.validate(&SLOT)
        );
        // A fused marker's own attributes count too.
        let blob = Item::from([("b".to_owned(), AttributeValue::S("y".repeat(250 * 1024)))]);
        let fused = Effect::new()
            .marked_by(Write::put("t", Key::string("pk", "order#1"), blob))
            .then_send(follow(0));
        assert!(matches!(
            fused.validate(&SLOT),
            Err(EffectError::FollowUp(FollowUpError::MarkerTooLarge { .. }))
        ));
        let clash = Effect::new()
            .marked_by(Write::put(
                "t",
                Key::string("pk", "order#1"),
                Item::from([(
                    FOLLOW_UPS_ATTRIBUTE.to_owned(),
                    AttributeValue::S("x".into()),
                )]),
            ))
            .then_send(FollowUp::raw(URL, "a", "{}"));
        assert!(matches!(
            clash.validate(&SLOT),
            Err(EffectError::MarkerAttribute { index: 0, .. })
        ));
    }

    fn counter(i: usize) -> Write {
        Write::update("t", Key::string("pk", format!("c{i}")), "ADD n :one")
            .value(":one", AttributeValue::N("1".into()))
    }

    #[test]
    fn ninety_nine_writes_fit_with_the_marker_a_hundredth_does_not() {
        let effect: Effect = (0..99).map(counter).collect();
        assert_eq!(effect.validate(&SLOT), Ok(()));
        let effect = effect.with(counter(99));
        assert_eq!(
            effect.validate(&SLOT),
            Err(EffectError::TooManyWrites {
                count: 100,
                limit: 99
            })
        );
        // Without the marker the hundredth slot is free.
        assert_eq!(effect.clone().without_marker().validate(&SLOT), Ok(()));
        let err = effect.without_marker().with(counter(100)).validate(&SLOT);
        assert!(matches!(
            err,
            Err(EffectError::TooManyWrites { limit: 100, .. })
        ));
    }

    #[test]
    fn two_writes_on_one_item_are_refused_with_both_indexes() {
        let effect = Effect::new()
            .with(counter(1))
            .with(counter(2))
            .with(Write::delete("t", Key::string("pk", "c1")));
        assert_eq!(
            effect.validate(&SLOT),
            Err(EffectError::SameItemTwice {
                first: 0,
                second: 2,
                table: "t".into()
            })
        );
        // The same key in another table is another item.
        let ok = Effect::new()
            .with(counter(1))
            .with(Write::delete("other", Key::string("pk", "c1")));
        assert_eq!(ok.validate(&SLOT), Ok(()));
        // A composite key differing only in the sort key is another item.
        let a = Key::string("pk", "a").and("sk", AttributeValue::N("1".into()));
        let b = Key::string("pk", "a").and("sk", AttributeValue::N("2".into()));
        let ok = Effect::new()
            .with(Write::delete("t", a.clone()))
            .with(Write::delete("t", b));
        assert_eq!(ok.validate(&SLOT), Ok(()));
        let dup = Effect::new()
            .with(Write::delete("t", a.clone()))
            .with(Write::condition_check("t", a, "attribute_exists(pk)"));
        assert!(matches!(
            dup.validate(&SLOT),
            Err(EffectError::SameItemTwice { .. })
        ));
    }

    #[test]
    fn marker_keys_are_reserved_in_the_marker_table_only() {
        let on_marker = Effect::new().with(counter(0)).with(Write::put(
            "t",
            Key::string("pk", "idemq#job#x"),
            Item::new(),
        ));
        assert_eq!(
            on_marker.validate(&SLOT),
            Err(EffectError::MarkerKey { index: 1 })
        );
        let elsewhere = Effect::new().with(Write::put(
            "u",
            Key::string("pk", "idemq#job#x"),
            Item::new(),
        ));
        assert_eq!(elsewhere.validate(&SLOT), Ok(()));
    }

    /// A Put's attributes are merged over its key, so an
    /// attribute named like a key attribute would move the write to another
    /// item (a marker, say). Refused before any I/O, in every table.
    #[test]
    fn put_attributes_may_not_name_a_key_attribute() {
        let onto_marker = Effect::new().with(Write::put(
            "t",
            Key::string("pk", "account#a"),
            Item::from([(
                "pk".to_string(),
                AttributeValue::S("idemq#job#victim".into()),
            )]),
        ));
        let err = onto_marker.validate(&SLOT).unwrap_err();
        assert!(err.to_string().contains("pk"), "{err}");
        // Any table, any key attribute: the sort key too.
        let key = Key::string("id", "a").and("sk", AttributeValue::N("1".into()));
        let sort_key = Effect::new().with(Write::put(
            "other",
            key,
            Item::from([("sk".to_string(), AttributeValue::N("2".into()))]),
        ));
        let err = sort_key.validate(&SLOT).unwrap_err();
        assert!(err.to_string().contains("sk"), "{err}");
    }

    /// A Put keyed on another attribute in the marker table still writes the
    /// marker table's partition key if its attributes carry it.
    #[test]
    fn put_attributes_may_not_carry_a_reserved_marker_key() {
        let sneaky = Effect::new().with(Write::put(
            "t",
            Key::string("id", "x"),
            Item::from([(
                "pk".to_string(),
                AttributeValue::S("idemq#job#victim".into()),
            )]),
        ));
        assert!(sneaky.validate(&SLOT).is_err());
    }

    /// DynamoDB accepts a table ARN wherever a table name goes
    /// (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Update.html:
    /// "You can also provide the Amazon Resource Name (ARN) of the table in
    /// this parameter"), so an ARN naming the marker table is the marker table.
    #[test]
    fn marker_table_named_by_arn_is_still_reserved() {
        for table in [
            "arn:aws:dynamodb:us-east-1:123456789012:table/t",
            "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/t",
        ] {
            for write in [
                Write::put(table, Key::string("pk", "idemq#job#x"), Item::new()),
                Write::delete(table, Key::string("pk", "idemq#job#x")),
                Write::update(table, Key::string("pk", "idemq#job#x"), "REMOVE expires_at"),
            ] {
                assert!(
                    matches!(
                        Effect::new().with(write.clone()).validate(&SLOT),
                        Err(EffectError::MarkerKey { index: 0 })
                    ),
                    "{write:?}"
                );
            }
        }
        // The marker table may be configured by ARN too.
        let by_arn = MarkerSlot {
            table: "arn:aws:dynamodb:us-east-1:123456789012:table/t",
            ..SLOT
        };
        let by_name = Effect::new().with(Write::delete("t", Key::string("pk", "idemq#job#x")));
        assert_eq!(
            by_name.validate(&by_arn),
            Err(EffectError::MarkerKey { index: 0 })
        );
        // Another table's ARN is another table.
        let other = Effect::new().with(Write::delete(
            "arn:aws:dynamodb:us-east-1:123456789012:table/u",
            Key::string("pk", "idemq#job#x"),
        ));
        assert_eq!(other.validate(&SLOT), Ok(()));
        // One item named once by name and once by ARN is still one item.
        let twice = Effect::new().with(counter(1)).with(Write::delete(
            "arn:aws:dynamodb:us-east-1:123456789012:table/t",
            Key::string("pk", "c1"),
        ));
        assert!(matches!(
            twice.validate(&SLOT),
            Err(EffectError::SameItemTwice { .. })
        ));
    }

    #[test]
    fn size_limits() {
        let big = "x".repeat(300 * 1024);
        let blob = |names: &[&str]| -> Item {
            names
                .iter()
                .map(|n| (n.to_string(), AttributeValue::S(big.clone())))
                .collect()
        };
        let one = Write::put("t", Key::string("pk", "a"), blob(&["blob"]));
        assert_eq!(Effect::new().with(one).validate(&SLOT), Ok(()));
        let too_big = Write::put("t", Key::string("pk", "a"), blob(&["blob", "blob2"]));
        assert!(matches!(
            Effect::new().with(too_big).validate(&SLOT),
            Err(EffectError::ItemTooLarge { index: 0, bytes }) if bytes > MAX_ITEM_BYTES
        ));
        // Fourteen 300 KB items: each fits, together they pass 4 MB.
        let effect: Effect = (0..14)
            .map(|i| Write::put("t", Key::string("pk", format!("k{i}")), blob(&["blob"])))
            .collect();
        assert!(matches!(
            effect.validate(&SLOT),
            Err(EffectError::TooLarge { bytes }) if bytes > MAX_TRANSACTION_BYTES
        ));
    }

    #[test]
    fn malformed_writes_are_refused() {
        let e = Effect::new().with(Write::delete("", Key::string("pk", "a")));
        assert_eq!(e.validate(&SLOT), Err(EffectError::EmptyTable { index: 0 }));
        let e = Effect::new().with(Write::delete("t", Key(Item::new())));
        assert_eq!(e.validate(&SLOT), Err(EffectError::EmptyKey { index: 0 }));
        let e = Effect::new().with(Write::condition_check("t", Key::string("pk", "a"), ""));
        assert_eq!(
            e.validate(&SLOT),
            Err(EffectError::EmptyCondition { index: 0 })
        );
    }

    #[test]
    fn a_fused_marker_is_a_plain_put_that_leaves_idemqs_attributes_free() {
        let entry = || Write::put("t", Key::string("pk", "entry#1"), Item::new());
        let ok = Effect::new().with(counter(0)).marked_by(entry());
        assert_eq!(ok.validate(&SLOT), Ok(()));
        assert_eq!(ok.fused_index(), Some(1));
        assert!(ok.uses_marker() && !ok.uses_separate_marker());
        // Without a separate marker all 100 transaction slots are the effect's.
        let full: Effect = (0..99).map(counter).collect();
        assert_eq!(full.marked_by(entry()).validate(&SLOT), Ok(()));

        let update =
            Effect::new().marked_by(Write::update("t", Key::string("pk", "e"), "SET a = :a"));
        assert_eq!(
            update.validate(&SLOT),
            Err(EffectError::MarkerNotPut { index: 0 })
        );
        let guarded = Effect::new().marked_by(entry().condition("attribute_not_exists(pk)"));
        assert_eq!(
            guarded.validate(&SLOT),
            Err(EffectError::MarkerCondition { index: 0 })
        );
        for name in ["job_id", "payload_hash", "committed_at"] {
            let clash = Effect::new().marked_by(Write::put(
                "t",
                Key::string("pk", "entry#1"),
                Item::from([(name.to_string(), AttributeValue::S("x".into()))]),
            ));
            assert_eq!(
                clash.validate(&SLOT),
                Err(EffectError::MarkerAttribute {
                    index: 0,
                    attribute: name.into()
                })
            );
        }
        // The marker's attributes count toward the 400 KB item limit.
        let almost = "x".repeat(MAX_ITEM_BYTES - 40);
        let big = Item::from([("b".to_string(), AttributeValue::S(almost))]);
        let plain = Effect::new().with(Write::put("t", Key::string("pk", "e"), big.clone()));
        assert_eq!(plain.validate(&SLOT), Ok(()));
        let fused = Effect::new().marked_by(Write::put("t", Key::string("pk", "e"), big));
        assert!(matches!(
            fused.validate(&SLOT),
            Err(EffectError::ItemTooLarge { index: 0, .. })
        ));
        // A fused marker in the reserved key space is still refused.
        let reserved =
            Effect::new().marked_by(Write::put("t", Key::string("pk", "idemq#x"), Item::new()));
        assert_eq!(
            reserved.validate(&SLOT),
            Err(EffectError::MarkerKey { index: 0 })
        );
        // without_marker afterwards turns it off; the Put stays a write.
        let off = Effect::new().marked_by(entry()).without_marker();
        assert!(!off.uses_marker() && off.fused_marker().is_none() && off.len() == 1);
    }

    #[test]
    fn sizes_follow_dynamodb_rules() {
        assert_eq!(number_size("12345"), 4);
        assert_eq!(number_size("-1.5"), 2);
        let item = Item::from([("ab".to_string(), AttributeValue::S("xyz".into()))]);
        assert_eq!(item_size(&item), 5);
    }

    #[test]
    fn sdk_form_carries_every_part() {
        let w = Write::put(
            "t",
            Key::string("pk", "a"),
            Item::from([("v".to_string(), AttributeValue::N("1".into()))]),
        )
        .condition("attribute_not_exists(#p)")
        .name("#p", "pk");
        let sdk = w.to_sdk().unwrap();
        let put = sdk.put().unwrap();
        assert_eq!(put.table_name(), "t");
        assert_eq!(put.item().len(), 2);
        assert_eq!(put.condition_expression(), Some("attribute_not_exists(#p)"));
        assert_eq!(put.expression_attribute_names().unwrap()["#p"], "pk");
        assert!(put.expression_attribute_values().is_none());
        let c = counter(3).to_sdk().unwrap();
        let u = c.update().unwrap();
        assert_eq!(u.update_expression(), "ADD n :one");
        assert_eq!(u.key()["pk"], AttributeValue::S("c3".into()));
    }

    #[test]
    fn a_missing_version_reads_as_zero_and_its_guard_accepts_no_version() {
        let n = |v: &str| AttributeValue::N(v.into());
        let legacy = Item::from([("balance".to_string(), n("5"))]);
        let versioned = Item::from([("version".to_string(), n("7"))]);
        let broken = Item::from([("version".to_string(), AttributeValue::S("x".into()))]);
        assert_eq!(read_version(None, "version"), Ok(0));
        assert_eq!(read_version(Some(&legacy), "version"), Ok(0));
        assert_eq!(read_version(Some(&versioned), "version"), Ok(7));
        assert!(read_version(Some(&broken), "version").is_err());

        let zero = counter(0).if_version("v", 0);
        assert!(zero.is_optimistic());
        assert_eq!(
            zero.condition_expression(),
            Some("attribute_not_exists(#idemq_version) OR #idemq_version = :idemq_version")
        );
        assert_eq!(zero.expression_names()["#idemq_version"], "v");
        assert_eq!(zero.expression_values()[":idemq_version"], n("0"));
        // A condition set before is kept, and binds as a whole.
        let seven = counter(1)
            .condition("attribute_exists(pk) OR n = :one")
            .if_version("v", 7);
        assert_eq!(
            seven.condition_expression(),
            Some("(attribute_exists(pk) OR n = :one) AND (#idemq_version = :idemq_version)")
        );
        assert_eq!(seven.expression_values()[":idemq_version"], n("7"));
    }
}
