//! The item vocabulary every write is made of: [`Item`], [`Key`], and the
//! size of an item by DynamoDB's rules. Its own file because the writes,
//! the validation and the follow-ups' marker all measure items alike.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// A DynamoDB item or key, as the SDK represents it.
pub type Item = HashMap<String, AttributeValue>;

/// The primary key of the item a write targets.
///
/// ```
/// use idemq::store::dynamodb::Key;
/// let key = Key::string("pk", "account#alice");
/// assert_eq!(key.get("pk").and_then(|v| v.as_s().ok()).map(String::as_str), Some("account#alice"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Key(pub(super) Item);

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
pub(super) fn number_size(n: &str) -> usize {
    let digits = n.chars().filter(char::is_ascii_digit).count();
    digits.div_ceil(2) + 1
}
