//! One action of the transaction: [`Write`], what it does ([`WriteKind`]),
//! its builders and its SDK form, and the version an optimistic write
//! guards on ([`read_version`]). Its own file: what a handler builds, apart
//! from the checks the effect as a whole passes.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck as SdkConditionCheck, Delete as SdkDelete, Put as SdkPut,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update as SdkUpdate,
};

use super::{EffectError, Item, Key, item_size};

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
/// use idemq::store::dynamodb::{Key, Write};
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
    pub(super) table: String,
    pub(super) key: Key,
    pub(super) kind: WriteKind,
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
    /// [`Contended`](crate::store::CommitOutcome::Contended) outcome and idemq
    /// runs the handler again (re-reading) instead of dead-lettering the
    /// job; after `BatchConfig::contention_retries` lost races in one
    /// invocation it backs off like any transient failure. A failed
    /// condition on a write *not* so marked stays a
    /// [`Rejected`](crate::store::CommitOutcome::Rejected) (DLQ now).
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use idemq::store::dynamodb::{Key, Write};
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
    /// use idemq::store::dynamodb::{Key, Write, read_version};
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
    pub(super) fn size(&self) -> usize {
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

    pub(super) fn stored_size(&self) -> usize {
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
