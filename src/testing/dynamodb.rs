//! An in-memory DynamoDB: the write and read calls idemq and a handler's
//! effect make, with DynamoDB's semantics, and nothing else.
//!
//! - `TransactWriteItems`
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>):
//!   `Put`, `Update`, `Delete` and `ConditionCheck`, all-or-nothing. Every
//!   condition is checked before anything is written; if one fails, nothing
//!   is written and the `TransactionCanceledException` lists a
//!   `CancellationReason` per action, in request order (`None` for those
//!   that did not fail), with the stored item for a failed action that
//!   asked for `ReturnValuesOnConditionCheckFailure=ALL_OLD`. An update that
//!   fails on the stored data (adding to a string) cancels with the reason
//!   `ValidationError`. Two actions on one item, or more than 100 actions,
//!   are a `ValidationException`. A `ClientRequestToken` seen in the last
//!   10 minutes makes a repeated identical request succeed without writing
//!   again, and a changed one an `IdempotentParameterMismatchException`.
//! - `PutItem`, `UpdateItem`, `DeleteItem`
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html>,
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html>,
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteItem.html>):
//!   with `ConditionExpression`, `ReturnValues` (`NONE`, `ALL_OLD`, and
//!   `ALL_NEW` for updates) and `ReturnValuesOnConditionCheckFailure`
//!   (the `ConditionalCheckFailedException` then carries the stored item).
//! - `GetItem`
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html>):
//!   every read is strongly consistent; projections are not modelled.
//!
//! Expressions are those of [`super::expr`]. Anything else (another
//! operation, a legacy parameter such as `Expected`, a function the
//! evaluator does not know) is refused with a `ValidationException` that
//! names it, so a test never passes on a call the kit only pretended to
//! understand. Not modelled: TTL deletion, item size limits, capacity,
//! throttling, secondary indexes.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};

use super::attr::{StoredItem, from_sdk, item_from_wire, item_to_wire};
use super::error::ServiceError;
use super::expressions::Expressions;
use crate::store::dynamodb::effect::{Item, Key};

/// "A client request token is valid for 10 minutes after the first request
/// that uses it is completed" (API_TransactWriteItems).
const TOKEN_WINDOW: Duration = Duration::from_secs(600);

/// DynamoDB's limit on actions in one transaction.
const MAX_TRANSACTION_ACTIONS: usize = 100;

/// A table's primary key: a partition key and an optional sort key. Key
/// attributes must be strings, numbers or binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableKey {
    partition: String,
    sort: Option<String>,
}

impl TableKey {
    /// A key of one attribute (a partition key).
    pub fn partition(name: impl Into<String>) -> Self {
        Self {
            partition: name.into(),
            sort: None,
        }
    }

    /// Adds a sort key.
    pub fn with_sort(mut self, name: impl Into<String>) -> Self {
        self.sort = Some(name.into());
        self
    }

    fn names(&self) -> Vec<&str> {
        std::iter::once(self.partition.as_str())
            .chain(self.sort.as_deref())
            .collect()
    }
}

#[derive(Debug, Clone)]
struct Table {
    key: TableKey,
    /// By the key attributes' wire form, so the order is deterministic.
    items: BTreeMap<String, StoredItem>,
}

impl Table {
    /// The stored key of an item (for a `Put`) or a key map (`exact`: no
    /// other attributes), validated against the key schema as DynamoDB
    /// does.
    fn key_of(&self, item: &StoredItem, exact: bool) -> Result<String, ServiceError> {
        let names = self.key.names();
        if exact && (item.len() != names.len() || names.iter().any(|n| !item.contains_key(*n))) {
            return Err(ServiceError::validation(
                "The provided key element does not match the schema",
            ));
        }
        let mut parts = Vec::new();
        for name in names {
            let v = item.get(name).ok_or_else(|| {
                ServiceError::validation(format!(
                    "One or more parameter values were invalid: Missing the key {name} in the item"
                ))
            })?;
            match v {
                AttributeValue::S(s) if s.is_empty() => {
                    return Err(ServiceError::validation(format!(
                        "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: {name}"
                    )));
                }
                AttributeValue::S(_) | AttributeValue::N(_) | AttributeValue::B(_) => {}
                _ => {
                    return Err(ServiceError::validation(
                        "The provided key element does not match the schema",
                    ));
                }
            }
            parts.push(super::attr::to_wire(v));
        }
        Ok(Value::Array(parts).to_string())
    }
}

/// What a write does once its condition holds.
#[derive(Debug)]
enum Kind {
    Put(StoredItem),
    Update,
    Delete,
    ConditionCheck,
}

/// One parsed write: a transaction action or a single-item call.
#[derive(Debug)]
struct WriteOp {
    table: String,
    key: String,
    key_item: StoredItem,
    kind: Kind,
    /// Its condition and update expressions.
    expressions: Expressions,
    all_old_on_failure: bool,
}

/// The in-memory DynamoDB. Requests come in their wire form
/// ([`MemoryDynamoDb::apply`], which the kit's HTTP connector calls);
/// tests seed and read items with the typed methods.
#[derive(Debug, Clone, Default)]
pub struct MemoryDynamoDb {
    tables: BTreeMap<String, Table>,
    /// `ClientRequestToken` -> (the request, when it completed).
    tokens: HashMap<String, (String, SystemTime)>,
}

/// The table name of a name or ARN (`arn:aws:dynamodb:…:table/NAME`).
fn table_name(table: &str) -> &str {
    table.rsplit_once(":table/").map_or(table, |(_, n)| n)
}

fn to_sdk(item: &StoredItem) -> Item {
    item.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl MemoryDynamoDb {
    /// A store with no tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates an empty table; `ResourceInUseException` if it exists.
    pub fn create_table(
        &mut self,
        name: impl Into<String>,
        key: TableKey,
    ) -> Result<(), ServiceError> {
        let name = name.into();
        if self.tables.contains_key(&name) {
            return Err(ServiceError::dynamodb(
                "ResourceInUseException",
                format!("Table already exists: {name}"),
            ));
        }
        self.tables.insert(
            name,
            Table {
                key,
                items: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// Whether the table exists.
    pub fn has_table(&self, name: &str) -> bool {
        self.tables.contains_key(table_name(name))
    }

    fn table(&self, name: &str) -> Result<&Table, ServiceError> {
        self.tables.get(table_name(name)).ok_or_else(|| {
            ServiceError::dynamodb(
                "ResourceNotFoundException",
                format!("Requested resource not found: Table: {name} not found"),
            )
        })
    }

    /// Stores `item` as is (seeding a test), replacing any item with its key.
    pub fn put_item(&mut self, table: &str, item: Item) -> Result<(), ServiceError> {
        let item = from_sdk(&item);
        let key = self.table(table)?.key_of(&item, false)?;
        if let Some(t) = self.tables.get_mut(table_name(table)) {
            t.items.insert(key, item);
        }
        Ok(())
    }

    /// The item at `key`, if any.
    pub fn get_item(&self, table: &str, key: &Key) -> Result<Option<Item>, ServiceError> {
        let t = self.table(table)?;
        let k = t.key_of(&from_sdk(key.as_item()), true)?;
        Ok(t.items.get(&k).map(to_sdk))
    }

    /// Every item of the table, in a stable order (by key).
    pub fn items(&self, table: &str) -> Result<Vec<Item>, ServiceError> {
        Ok(self.table(table)?.items.values().map(to_sdk).collect())
    }

    /// Answers one request in its wire form (the JSON body of
    /// `DynamoDB_20120810.<operation>`): the response body, or the error
    /// DynamoDB would answer.
    pub fn apply(&mut self, operation: &str, request: &Value) -> Result<Value, ServiceError> {
        if !request.is_object() {
            return Err(ServiceError::dynamodb(
                "SerializationException",
                "the request body is not a JSON object",
            ));
        }
        match operation {
            "TransactWriteItems" => self.transact(request),
            "PutItem" | "UpdateItem" | "DeleteItem" => self.single(operation, request),
            "GetItem" => self.get(request),
            "BatchGetItem" => self.batch_get(request),
            other => Err(ServiceError::validation(format!(
                "idemq::testing does not model the DynamoDB operation {other}"
            ))),
        }
    }

    /// Parses one write. `kind` is the transaction action's name (`Put`,
    /// `Update`, `Delete`, `ConditionCheck`); `in_transaction` applies the
    /// stricter rules of transaction actions.
    fn parse(
        &self,
        kind: &str,
        body: &Value,
        in_transaction: bool,
    ) -> Result<WriteOp, ServiceError> {
        for legacy in [
            "Expected",
            "AttributeUpdates",
            "ConditionalOperator",
            "AttributesToGet",
        ] {
            if !body[legacy].is_null() {
                return Err(ServiceError::validation(format!(
                    "the legacy parameter {legacy} is not modelled by idemq::testing; use expressions"
                )));
            }
        }
        let table_arg = body["TableName"]
            .as_str()
            .ok_or_else(|| ServiceError::validation("TableName is required"))?;
        let table = self.table(table_arg)?;
        let wire = |field: &str| -> Result<StoredItem, ServiceError> {
            match &body[field] {
                Value::Null => Ok(StoredItem::new()),
                v => item_from_wire(v).map_err(|e| {
                    ServiceError::validation(format!(
                        "One or more parameter values were invalid: {field}: {e}"
                    ))
                }),
            }
        };
        let (key, key_item, put) = if kind == "Put" {
            let item = wire("Item")?;
            let key = table.key_of(&item, false)?;
            let key_item = table
                .key
                .names()
                .iter()
                .filter_map(|n| item.get(*n).map(|v| ((*n).to_owned(), v.clone())))
                .collect();
            (key, key_item, Some(item))
        } else {
            let k = wire("Key")?;
            (table.key_of(&k, true)?, k, None)
        };
        let update_text = body["UpdateExpression"].as_str();
        let expressions =
            Expressions::parse(body, &table.key.names()).map_err(ServiceError::validation)?;
        let kind = match kind {
            "Put" => Kind::Put(put.unwrap_or_default()),
            "Delete" => Kind::Delete,
            "ConditionCheck" => {
                if !expressions.has_condition() {
                    return Err(ServiceError::validation(
                        "ConditionExpression is required for a ConditionCheck",
                    ));
                }
                Kind::ConditionCheck
            }
            "Update" => {
                if in_transaction && update_text.is_none() {
                    return Err(ServiceError::validation(
                        "UpdateExpression is required for an Update in a transaction",
                    ));
                }
                Kind::Update
            }
            other => {
                return Err(ServiceError::validation(format!(
                    "the transaction action {other} is not modelled by idemq::testing"
                )));
            }
        };
        if update_text.is_some() && !matches!(kind, Kind::Update) {
            return Err(ServiceError::validation(
                "UpdateExpression is only valid in an update",
            ));
        }
        let all_old_on_failure = match body["ReturnValuesOnConditionCheckFailure"].as_str() {
            None | Some("NONE") => false,
            Some("ALL_OLD") => true,
            Some(other) => {
                return Err(ServiceError::validation(format!(
                    "ReturnValuesOnConditionCheckFailure {other:?} is not NONE or ALL_OLD"
                )));
            }
        };
        Ok(WriteOp {
            table: table_name(table_arg).to_owned(),
            key,
            key_item,
            kind,
            expressions,
            all_old_on_failure,
        })
    }

    fn stored(&self, op: &WriteOp) -> Option<&StoredItem> {
        self.tables
            .get(&op.table)
            .and_then(|t| t.items.get(&op.key))
    }

    /// Whether `op`'s condition holds on the stored item.
    fn holds(&self, op: &WriteOp) -> Result<bool, ServiceError> {
        op.expressions
            .holds_on(self.stored(op))
            .map_err(ServiceError::validation)
    }

    /// The item after `op`: `Some(None)` deletes, `None` writes nothing.
    /// `Err` is a data error of an update (its message).
    fn next_state(&self, op: &WriteOp) -> Result<Option<Option<StoredItem>>, String> {
        Ok(match &op.kind {
            Kind::ConditionCheck => None,
            Kind::Delete => Some(None),
            Kind::Put(item) => Some(Some(item.clone())),
            Kind::Update => {
                let mut item = self
                    .stored(op)
                    .cloned()
                    .unwrap_or_else(|| op.key_item.clone());
                op.expressions.apply_to(&mut item)?;
                Some(Some(item))
            }
        })
    }

    fn store(&mut self, op: &WriteOp, state: Option<Option<StoredItem>>) {
        let Some(state) = state else { return };
        let Some(table) = self.tables.get_mut(&op.table) else {
            return;
        };
        match state {
            Some(item) => {
                table.items.insert(op.key.clone(), item);
            }
            None => {
                table.items.remove(&op.key);
            }
        }
    }

    fn transact(&mut self, req: &Value) -> Result<Value, ServiceError> {
        let now = crate::clock::now();
        self.tokens
            .retain(|_, (_, at)| now.duration_since(*at).unwrap_or_default() < TOKEN_WINDOW);
        let token = req["ClientRequestToken"].as_str().map(str::to_owned);
        let canonical = req["TransactItems"].to_string();
        if let Some(t) = &token
            && let Some((seen, _)) = self.tokens.get(t)
        {
            return if *seen == canonical {
                Ok(json!({}))
            } else {
                Err(ServiceError::dynamodb(
                    "IdempotentParameterMismatchException",
                    "The request uses the same client token as a previous, but non-identical request.",
                ))
            };
        }
        let actions = req["TransactItems"].as_array().cloned().unwrap_or_default();
        if actions.is_empty() || actions.len() > MAX_TRANSACTION_ACTIONS {
            return Err(ServiceError::validation(format!(
                "1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length between 1 and {MAX_TRANSACTION_ACTIONS} (it has {})",
                actions.len()
            )));
        }
        let mut ops: Vec<WriteOp> = Vec::with_capacity(actions.len());
        for action in &actions {
            let Some((kind, body)) = action
                .as_object()
                .filter(|o| o.len() == 1)
                .and_then(|o| o.iter().next())
            else {
                return Err(ServiceError::validation(
                    "a TransactWriteItem must hold exactly one of Put, Update, Delete, ConditionCheck",
                ));
            };
            if let Some(rv) = body["ReturnValues"].as_str() {
                return Err(ServiceError::validation(format!(
                    "ReturnValues ({rv}) is not a parameter of a transaction action"
                )));
            }
            let op = self.parse(kind, body, true)?;
            if ops.iter().any(|o| o.table == op.table && o.key == op.key) {
                return Err(ServiceError::validation(
                    "Transaction request cannot include multiple operations on one item",
                ));
            }
            ops.push(op);
        }
        let mut reasons = Vec::with_capacity(ops.len());
        let mut staged = Vec::with_capacity(ops.len());
        let mut cancelled = false;
        for op in &ops {
            if !self.holds(op)? {
                cancelled = true;
                let mut reason = json!({
                    "Code": "ConditionalCheckFailed",
                    "Message": "The conditional request failed"
                });
                if op.all_old_on_failure
                    && let Some(old) = self.stored(op)
                {
                    reason["Item"] = item_to_wire(old);
                }
                reasons.push(reason);
                staged.push(None);
                continue;
            }
            match self.next_state(op) {
                Ok(state) => {
                    reasons.push(json!({"Code": "None"}));
                    staged.push(state);
                }
                Err(message) => {
                    cancelled = true;
                    reasons.push(json!({"Code": "ValidationError", "Message": message}));
                    staged.push(None);
                }
            }
        }
        if cancelled {
            let codes: Vec<&str> = reasons
                .iter()
                .map(|r| r["Code"].as_str().unwrap_or("None"))
                .collect();
            return Err(ServiceError::dynamodb(
                "TransactionCanceledException",
                format!(
                    "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                    codes.join(", ")
                ),
            )
            .with("CancellationReasons", Value::Array(reasons)));
        }
        for (op, state) in ops.iter().zip(staged) {
            self.store(op, state);
        }
        if let Some(t) = token {
            self.tokens.insert(t, (canonical, now));
        }
        Ok(json!({}))
    }

    fn single(&mut self, operation: &str, req: &Value) -> Result<Value, ServiceError> {
        let kind = operation.trim_end_matches("Item");
        let op = self.parse(kind, req, false)?;
        let return_values = req["ReturnValues"].as_str().unwrap_or("NONE");
        let allowed: &[&str] = if kind == "Update" {
            &["NONE", "ALL_OLD", "ALL_NEW"]
        } else {
            &["NONE", "ALL_OLD"]
        };
        if !allowed.contains(&return_values) {
            return Err(ServiceError::validation(format!(
                "ReturnValues {return_values} is not modelled by idemq::testing for {operation} (only {})",
                allowed.join(", ")
            )));
        }
        if !self.holds(&op)? {
            let mut e = ServiceError::dynamodb(
                "ConditionalCheckFailedException",
                "The conditional request failed",
            );
            if op.all_old_on_failure
                && let Some(old) = self.stored(&op)
            {
                e = e.with("Item", item_to_wire(old));
            }
            return Err(e);
        }
        let old = self.stored(&op).cloned();
        let state = self.next_state(&op).map_err(ServiceError::validation)?;
        let new = state.clone().flatten();
        self.store(&op, state);
        let attributes = match return_values {
            "ALL_OLD" => old,
            "ALL_NEW" => new,
            _ => None,
        };
        Ok(match attributes {
            Some(a) => json!({ "Attributes": item_to_wire(&a) }),
            None => json!({}),
        })
    }

    fn get(&self, req: &Value) -> Result<Value, ServiceError> {
        for unmodelled in [
            "ProjectionExpression",
            "AttributesToGet",
            "ExpressionAttributeNames",
        ] {
            if !req[unmodelled].is_null() {
                return Err(ServiceError::validation(format!(
                    "GetItem's {unmodelled} is not modelled by idemq::testing"
                )));
            }
        }
        let name = req["TableName"]
            .as_str()
            .ok_or_else(|| ServiceError::validation("TableName is required"))?;
        let table = self.table(name)?;
        let key = item_from_wire(&req["Key"]).map_err(|e| {
            ServiceError::validation(format!(
                "One or more parameter values were invalid: Key: {e}"
            ))
        })?;
        let k = table.key_of(&key, true)?;
        Ok(match table.items.get(&k) {
            Some(item) => json!({ "Item": item_to_wire(item) }),
            None => json!({}),
        })
    }

    /// `BatchGetItem` as a `GetItem` per key; every key is processed.
    fn batch_get(&self, req: &Value) -> Result<Value, ServiceError> {
        let tables = req["RequestItems"]
            .as_object()
            .ok_or_else(|| ServiceError::validation("RequestItems is required"))?;
        let mut responses = serde_json::Map::new();
        for (table, request) in tables {
            let mut found = Vec::new();
            for key in request["Keys"].as_array().into_iter().flatten() {
                let got = self.get(&json!({ "TableName": table, "Key": key }))?;
                if !got["Item"].is_null() {
                    found.push(got["Item"].clone());
                }
            }
            responses.insert(table.clone(), Value::Array(found));
        }
        Ok(json!({ "Responses": responses, "UnprocessedKeys": {} }))
    }
}

#[cfg(test)]
mod tests;
