//! The expression engine of [`MemoryDynamoDb`](super::MemoryDynamoDb), for
//! a model of DynamoDB of a test's own (the simulation's, `tests/sim/`):
//! one request's condition and update expressions, on requests and items
//! in their wire form (the JSON the SDK sends and reads), so a second
//! model need not write a second parser.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::attr::{StoredItem, from_wire, item_from_wire, to_wire};
use super::expr::{Condition, Placeholders, Update};

/// The `ConditionExpression` and `UpdateExpression` of one write (a
/// `PutItem`, `UpdateItem` or `DeleteItem` request, or one action of a
/// `TransactWriteItems`), parsed with its `ExpressionAttributeNames` and
/// `ExpressionAttributeValues` as DynamoDB checks them: every placeholder
/// used is defined and every one defined is used, and an update may not
/// touch a key attribute. The subset is [`MemoryDynamoDb`](super::MemoryDynamoDb)'s;
/// anything outside it is an `Err` naming it, the message of the
/// `ValidationException` DynamoDB (or the kit) would answer.
///
/// ```
/// use idemq::testing::Expressions;
/// use serde_json::json;
/// let request = json!({
///     "TableName": "t",
///     "Key": {"pk": {"S": "a"}},
///     "UpdateExpression": "SET #v = :next",
///     "ConditionExpression": "#v = :read",
///     "ExpressionAttributeNames": {"#v": "version"},
///     "ExpressionAttributeValues": {":next": {"N": "2"}, ":read": {"N": "1"}}
/// });
/// let e = Expressions::parse(&request, &["pk"]).unwrap();
/// let mut item = json!({"pk": {"S": "a"}, "version": {"N": "1"}}).as_object().unwrap().clone();
/// assert!(e.holds(Some(&item)).unwrap());
/// e.apply_update(&mut item).unwrap();
/// assert_eq!(item["version"], json!({"N": "2"}));
/// assert!(!e.holds(Some(&item)).unwrap());
/// assert!(Expressions::parse(&json!({"ConditionExpression": "size(a) > :n"}), &["pk"]).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Expressions {
    condition: Option<Condition>,
    update: Option<Update>,
}

impl Expressions {
    /// Parses `request`'s expressions; `key_attributes` are the table's key
    /// attribute names.
    pub fn parse(request: &Value, key_attributes: &[&str]) -> Result<Self, String> {
        let names: BTreeMap<String, String> = match &request["ExpressionAttributeNames"] {
            Value::Null => BTreeMap::new(),
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|s| (k.clone(), s.to_owned()))
                        .ok_or_else(|| "ExpressionAttributeNames must map to strings".to_owned())
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("ExpressionAttributeNames must be a map".into()),
        };
        let values = match &request["ExpressionAttributeValues"] {
            Value::Null => StoredItem::new(),
            v => item_from_wire(v).map_err(|e| {
                format!("One or more parameter values were invalid: ExpressionAttributeValues: {e}")
            })?,
        };
        let condition_text = request["ConditionExpression"].as_str();
        let update_text = request["UpdateExpression"].as_str();
        if condition_text.is_none() && update_text.is_none() {
            if !names.is_empty() {
                return Err(
                    "ExpressionAttributeNames can only be specified when using expressions".into(),
                );
            }
            if !values.is_empty() {
                return Err(
                    "ExpressionAttributeValues can only be specified when using expressions".into(),
                );
            }
        }
        let mut ph = Placeholders::new(&names, &values);
        let condition = condition_text
            .map(|c| Condition::parse(c, &mut ph))
            .transpose()?;
        let update = update_text
            .map(|u| Update::parse(u, &mut ph, key_attributes))
            .transpose()?;
        ph.check_all_used()?;
        Ok(Self { condition, update })
    }

    /// Whether the request has a condition.
    pub fn has_condition(&self) -> bool {
        self.condition.is_some()
    }

    /// Whether the request has an update expression.
    pub fn has_update(&self) -> bool {
        self.update.is_some()
    }

    /// Whether the condition holds on `item` (`None`: no item with the
    /// key); `true` without a condition. `Err`: a data error, which
    /// DynamoDB answers with a `ValidationException`.
    pub fn holds(&self, item: Option<&Map<String, Value>>) -> Result<bool, String> {
        let stored = item.map(stored).transpose()?;
        self.holds_on(stored.as_ref())
    }

    /// Applies the update expression to `item` (the stored item, or the
    /// key alone for a new one); no change without one. `Err`: a data error
    /// (adding to a string), nothing changed.
    pub fn apply_update(&self, item: &mut Map<String, Value>) -> Result<(), String> {
        if self.update.is_none() {
            return Ok(());
        }
        let mut s = stored(item)?;
        self.apply_to(&mut s)?;
        *item = s.iter().map(|(k, v)| (k.clone(), to_wire(v))).collect();
        Ok(())
    }

    /// [`Expressions::holds`] on an item as the kit's store keeps it.
    pub(crate) fn holds_on(&self, item: Option<&StoredItem>) -> Result<bool, String> {
        match &self.condition {
            None => Ok(true),
            Some(c) => c.eval(item),
        }
    }

    /// [`Expressions::apply_update`] on an item as the kit's store keeps it.
    pub(crate) fn apply_to(&self, item: &mut StoredItem) -> Result<(), String> {
        match &self.update {
            None => Ok(()),
            Some(u) => u.apply(item),
        }
    }
}

fn stored(item: &Map<String, Value>) -> Result<StoredItem, String> {
    item.iter()
        .map(|(k, v)| Ok((k.clone(), from_wire(v).map_err(|e| format!("{k}: {e}"))?)))
        .collect()
}
