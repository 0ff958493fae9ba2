//! Read-only views of an [`Effect`]'s writes, to assert on what a handler
//! returned without committing it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::store::dynamodb::effect::{Effect, Item, Key, Write, WriteKind};

/// One write of an effect, as a test reads it back.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use idemq::store::dynamodb::{Effect, Key, Write, WriteKind};
/// use idemq::testing::WriteView;
///
/// let effect = Effect::new().with(
///     Write::update("bank", Key::string("pk", "account#alice"), "ADD balance :amount")
///         .value(":amount", AttributeValue::N("25".into()))
///         .condition("attribute_exists(pk)"),
/// );
/// let credit = WriteView::new(&effect.writes()[0]);
/// assert_eq!(credit.table(), "bank");
/// assert_eq!(credit.key(), &Key::string("pk", "account#alice"));
/// assert_eq!(credit.update_expression(), Some("ADD balance :amount"));
/// assert_eq!(credit.condition(), Some("attribute_exists(pk)"));
/// assert_eq!(credit.value(":amount"), Some(&AttributeValue::N("25".into())));
/// assert!(matches!(credit.kind(), WriteKind::Update { .. }));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct WriteView<'a> {
    write: &'a Write,
}

impl<'a> WriteView<'a> {
    /// A view of `write`.
    pub fn new(write: &'a Write) -> Self {
        Self { write }
    }

    /// The table (name or ARN) the write targets.
    pub fn table(&self) -> &'a str {
        self.write.table()
    }

    /// The key of the item the write targets.
    pub fn key(&self) -> &'a Key {
        self.write.key()
    }

    /// Put, Update, Delete or ConditionCheck, with its attributes or
    /// update expression.
    pub fn kind(&self) -> &'a WriteKind {
        self.write.kind()
    }

    /// The update expression of an Update.
    pub fn update_expression(&self) -> Option<&'a str> {
        match self.write.kind() {
            WriteKind::Update { expression } => Some(expression),
            _ => None,
        }
    }

    /// The attributes a Put writes besides the key.
    pub fn attributes(&self) -> Option<&'a Item> {
        match self.write.kind() {
            WriteKind::Put { attributes } => Some(attributes),
            _ => None,
        }
    }

    /// The whole item a Put stores: its key and its attributes.
    pub fn item(&self) -> Option<Item> {
        self.attributes().map(|attributes| {
            let mut item = self.key().as_item().clone();
            item.extend(attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
            item
        })
    }

    /// The condition expression, if any.
    pub fn condition(&self) -> Option<&'a str> {
        self.write.condition.as_deref()
    }

    /// Every expression attribute name (`#placeholder` -> name).
    pub fn names(&self) -> &'a HashMap<String, String> {
        &self.write.names
    }

    /// Every expression attribute value (`:placeholder` -> value).
    pub fn values(&self) -> &'a Item {
        &self.write.values
    }

    /// The attribute name `#placeholder` stands for.
    pub fn name(&self, placeholder: &str) -> Option<&'a str> {
        self.write.names.get(placeholder).map(String::as_str)
    }

    /// The value `:placeholder` stands for.
    pub fn value(&self, placeholder: &str) -> Option<&'a AttributeValue> {
        self.write.values.get(placeholder)
    }
}

/// Views of every write of `effect`, in order.
pub fn writes(effect: &Effect) -> Vec<WriteView<'_>> {
    effect.writes().iter().map(WriteView::new).collect()
}

/// The write of `effect` to the item at `key` in `table`, if there is one
/// (an effect writes an item at most once).
pub fn write_to<'a>(effect: &'a Effect, table: &str, key: &Key) -> Option<WriteView<'a>> {
    effect
        .writes()
        .iter()
        .find(|w| w.table() == table && w.key() == key)
        .map(WriteView::new)
}
