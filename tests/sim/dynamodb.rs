//! DynamoDB tables as a client observes them (AWS JSON 1.0). Condition and
//! update expressions are evaluated by the test kit's engine
//! (`idemq::testing::Expressions`, the one `MemoryDynamoDb` uses): an
//! expression outside its subset is refused with a `ValidationException`
//! naming it, so the model never silently accepts what it does not
//! understand.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemq::testing::Expressions;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::check::{Event, History};
use super::net::Reply;

pub type Item = Map<String, Value>;

/// "A client request token is valid for 10 minutes after the first request
/// that uses it is completed"
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>).
pub const TOKEN_WINDOW: Duration = Duration::from_secs(600);

/// TTL deletes an expired item "typically within a few days" (up to 48 h
/// has been the documented figure), and until then it is still read and
/// still matches conditions
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html>).
pub const TTL_LAG: Duration = Duration::from_secs(48 * 3600);

/// How long a committed transaction stays in progress on its items: a
/// transaction touching one of them meanwhile is cancelled with
/// `TransactionConflict` at that index, and a retry with the same
/// `ClientRequestToken` gets `TransactionInProgressException`
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html>,
/// "Transaction conflict handling"; the model applies a request at one
/// instant, so this is the window in which two count as "at once").
pub const TRANSACTION_HOLD: Duration = Duration::from_millis(30);

/// "The maximum item size in DynamoDB is 400 KB, which includes both
/// attribute name binary length (UTF-8 length) and attribute value lengths
/// (again binary length)"
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-items>).
pub const MAX_ITEM_SIZE: usize = 400 * 1024;

/// How stale an eventually consistent read may be. A `GetItem` or
/// `BatchGetItem` without `ConsistentRead = true` "may not reflect the
/// results of a recently completed write operation. If you repeat your
/// read request after a short time, the response should eventually return
/// the more recent item"; it still returns only committed values
/// (read-committed isolation)
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html>).
/// The page gives no bound; the model returns the item as it was up to
/// this long before the read (the lag drawn per read from the seed), a
/// committed state every time.
pub const STALE_WINDOW: Duration = Duration::from_secs(1);

/// An item's size as DynamoDB counts it: names plus values (strings by
/// their UTF-8 length, numbers by their digits, which slightly
/// overcounts; other types by their JSON form, a bound).
pub fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| {
            name.len()
                + match (v.get("S"), v.get("N")) {
                    (Some(Value::String(s)), _) | (_, Some(Value::String(s))) => s.len(),
                    _ => v.to_string().len(),
                }
        })
        .sum()
}

#[derive(Debug)]
pub struct Table {
    pub key: String,
    pub ttl_attribute: Option<String>,
    pub items: BTreeMap<String, Item>,
}

#[derive(Debug, Default)]
pub struct Ddb {
    pub tables: BTreeMap<String, Table>,
    /// token -> (request, when it completed).
    tokens: BTreeMap<String, (String, Instant)>,
    last_ttl_sweep: Option<SystemTime>,
    /// (when TTL deletes it, table, key) for every item written with a TTL
    /// attribute; an entry whose item has since changed is skipped.
    ttl_due: BTreeSet<(u64, String, String)>,
    /// (table, key) -> (until, token) of the transactions still in
    /// progress on each item ([`TRANSACTION_HOLD`]).
    busy: BTreeMap<(String, String), (Instant, Option<String>)>,
    /// Transactions cancelled by a conflict, and retries refused as in
    /// progress.
    pub conflicts: u64,
    /// The run's seed: eventually consistent reads draw their lag from it.
    pub seed: u64,
    /// (table, key) -> (when, the item before) for each write of the last
    /// [`STALE_WINDOW`]: what an eventually consistent read may still see.
    past: BTreeMap<(String, String), Vec<Past>>,
    /// Eventually consistent reads that returned an older state than the
    /// current one.
    pub stale_reads: u64,
}

fn err(code: &str, message: impl Into<String>) -> Reply {
    Reply::Error {
        status: 400,
        kind: format!("com.amazonaws.dynamodb.v20120810#{code}"),
        message: message.into(),
        extra: json!({}),
    }
}

fn validation(message: impl Into<String>) -> Reply {
    err("ValidationException", message)
}

/// When an item was written, and what it was before.
type Past = (Instant, Option<Item>);

/// One write of a transaction, or a single-item write, parsed.
struct Op<'a> {
    table: String,
    key: String,
    body: &'a Value,
    kind: &'a str,
    /// Its condition and update expressions.
    expr: Expressions,
}

impl Ddb {
    pub fn add_table(&mut self, name: &str, key: &str, ttl_attribute: Option<&str>) {
        self.tables.insert(
            name.into(),
            Table {
                key: key.into(),
                ttl_attribute: ttl_attribute.map(str::to_owned),
                items: BTreeMap::new(),
            },
        );
    }

    /// The string key of an item or key map (tables here have a String
    /// partition key and no sort key).
    fn key_of(&self, table: &str, item: &Value, is_item: bool) -> Result<String, Reply> {
        let t = self
            .tables
            .get(crate::sim::dynamodb::table_name(table))
            .ok_or_else(|| err("ResourceNotFoundException", "Requested resource not found"))?;
        match item
            .get(&t.key)
            .and_then(|v| v.get("S"))
            .and_then(Value::as_str)
        {
            Some(k) => Ok(k.to_owned()),
            // An item without the table's key, or a key that names another
            // attribute: the two messages DynamoDB gives
            // (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html>,
            // ValidationException).
            None if is_item => Err(validation(format!(
                "One or more parameter values were invalid: Missing the key {} in the item",
                t.key
            ))),
            None => Err(validation(
                "The provided key element does not match the schema",
            )),
        }
    }

    pub fn apply(
        &mut self,
        op: &str,
        req: &Value,
        wall: SystemTime,
        history: &mut History,
    ) -> Reply {
        self.ttl_sweep(wall);
        match op {
            "TransactWriteItems" => self.transact(req, history),
            "PutItem" | "UpdateItem" | "DeleteItem" => self.single(op, req, history),
            "GetItem" => {
                let table = req["TableName"].as_str().unwrap_or_default();
                let key = match self.key_of(table, &req["Key"], false) {
                    Ok(k) => k,
                    Err(e) => return e,
                };
                let consistent = req["ConsistentRead"] == true;
                match self.read(table, &key, consistent, wall) {
                    Some(item) => Reply::Ok(json!({"Item": item})),
                    None => Reply::Ok(json!({})),
                }
            }
            "BatchGetItem" => {
                let mut responses = Map::new();
                for (table, spec) in req["RequestItems"].as_object().cloned().unwrap_or_default() {
                    let consistent = spec["ConsistentRead"] == true;
                    let mut found = Vec::new();
                    for k in spec["Keys"].as_array().cloned().unwrap_or_default() {
                        let key = match self.key_of(&table, &k, false) {
                            Ok(k) => k,
                            Err(e) => return e,
                        };
                        if let Some(item) = self.read(&table, &key, consistent, wall) {
                            found.push(Value::Object(item));
                        }
                    }
                    responses.insert(table, Value::Array(found));
                }
                Reply::Ok(json!({"Responses": responses, "UnprocessedKeys": {}}))
            }
            other => validation(format!("{other} is not modelled")),
        }
    }

    /// `TransactWriteItems`: every condition is checked first; if any
    /// fails, nothing is written and `CancellationReasons` says, by index,
    /// which (`None` for the others), with the old item for a failed one
    /// that asked for `ALL_OLD`. Two actions on one item are a
    /// `ValidationException`. A repeated `ClientRequestToken` within 10
    /// minutes succeeds without writing again, or is an
    /// `IdempotentParameterMismatchException` if the request changed
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>).
    fn transact(&mut self, req: &Value, history: &mut History) -> Reply {
        let now = Instant::now();
        self.tokens
            .retain(|_, (_, at)| now.duration_since(*at) < TOKEN_WINDOW);
        let token = req["ClientRequestToken"].as_str().map(str::to_owned);
        self.busy.retain(|_, (until, _)| *until > now);
        if token.is_some() && self.busy.values().any(|(_, t)| *t == token) {
            self.conflicts += 1;
            return err(
                "TransactionInProgressException",
                "The transaction with the given request token is already in progress.",
            );
        }
        let canonical = req.to_string();
        if let Some(t) = &token
            && let Some((seen, _)) = self.tokens.get(t)
        {
            return if *seen == canonical {
                Reply::Ok(json!({}))
            } else {
                err(
                    "IdempotentParameterMismatchException",
                    "The request uses the same client token as a previous, but non-identical request.",
                )
            };
        }
        let Some(items) = req["TransactItems"].as_array() else {
            return validation("TransactItems must have 1 to 100 members");
        };
        if items.is_empty() || items.len() > 100 {
            return validation("TransactItems must have 1 to 100 members");
        }
        let mut ops = Vec::new();
        for item in items {
            let Some((kind, body)) = item.as_object().and_then(|o| o.iter().next()) else {
                return validation("empty TransactWriteItem");
            };
            let o = match self.op(kind, body) {
                Ok(o) => o,
                Err(e) => return e,
            };
            if let Err(e) = unused_placeholders(body) {
                return e;
            }
            if ops
                .iter()
                .any(|p: &Op| table_name(&p.table) == table_name(&o.table) && p.key == o.key)
            {
                return validation(
                    "Transaction request cannot include multiple operations on one item",
                );
            }
            ops.push(o);
        }
        // Another transaction still in progress on one of these items
        // cancels this one ("TransactionConflict" at that index, "None"
        // at the others).
        if ops.iter().any(|o| {
            self.busy
                .contains_key(&(table_name(&o.table).to_owned(), o.key.clone()))
        }) {
            self.conflicts += 1;
            let reasons: Vec<Value> = ops
                .iter()
                .map(|o| {
                    if self
                        .busy
                        .contains_key(&(table_name(&o.table).to_owned(), o.key.clone()))
                    {
                        json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"})
                    } else {
                        json!({"Code": "None"})
                    }
                })
                .collect();
            return Reply::Error {
                status: 400,
                kind: "com.amazonaws.dynamodb.v20120810#TransactionCanceledException".into(),
                message: "Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]".into(),
                extra: json!({"CancellationReasons": reasons}),
            };
        }
        let mut reasons = Vec::new();
        let mut cancelled = false;
        for o in &ops {
            match self.check(o) {
                Ok(true) => reasons.push(json!({"Code": "None"})),
                Ok(false) => {
                    cancelled = true;
                    let mut r = json!({"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"});
                    if o.body["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
                        && let Some(old) = self.tables[table_name(&o.table)].items.get(&o.key)
                    {
                        r["Item"] = Value::Object(old.clone());
                    }
                    reasons.push(r);
                }
                Err(e) => return e,
            }
        }
        if cancelled {
            let codes: Vec<&str> = reasons
                .iter()
                .map(|r| r["Code"].as_str().unwrap_or("None"))
                .collect();
            return Reply::Error {
                status: 400,
                kind: "com.amazonaws.dynamodb.v20120810#TransactionCanceledException".into(),
                message: format!(
                    "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                    codes.join(", ")
                ),
                extra: json!({"CancellationReasons": reasons}),
            };
        }
        // Updates are checked before anything is written, so a bad one
        // cancels the whole transaction. An item that would pass 400 KB
        // cancels it with `ValidationError` at its index
        // (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>,
        // TransactionCanceledException: "An item size becomes too large").
        // An update that fails on the stored item's data cancels it the
        // same way, whatever the data error: an operand of the wrong type
        // ("An operand in the update expression has an incorrect data
        // type" is a ValidationError reason:
        // <https://repost.aws/knowledge-center/dynamodb-transactwriteitems>;
        // moto answers a plain ValidationException, so
        // tests/sim_conformance.rs pins that divergence), or an attribute
        // the item lacks (a response DynamoDB gave, quoted in
        // <https://github.com/aws/aws-sdk-net/issues/1292>: reasons
        // `[None, ValidationError]`, "The provided expression refers to an
        // attribute that does not exist in the item"). The API page counts
        // both as "a user error, such as an invalid data format". The test
        // kit's MemoryDynamoDb answers the same; a malformed expression is
        // refused before this, as a plain ValidationException.
        let mut staged = Vec::new();
        let mut invalid: Vec<Option<String>> = Vec::new();
        for o in &ops {
            match self.next_state(o) {
                Ok(s) => {
                    invalid.push(
                        too_large(&s)
                            .err()
                            .map(|_| "Item size has exceeded the maximum allowed size".to_owned()),
                    );
                    staged.push(s);
                }
                Err(Reply::Error { message, .. }) => {
                    invalid.push(Some(message));
                    staged.push(None);
                }
                Err(ok @ Reply::Ok(_)) => return ok,
            }
        }
        if invalid.iter().any(Option::is_some) {
            let reasons: Vec<Value> = invalid
                .iter()
                .map(|m| match m {
                    None => json!({"Code": "None"}),
                    Some(m) => json!({"Code": "ValidationError", "Message": m}),
                })
                .collect();
            return Reply::Error {
                status: 400,
                kind: "com.amazonaws.dynamodb.v20120810#TransactionCanceledException".into(),
                message:
                    "Transaction cancelled, please refer cancellation reasons for specific reasons"
                        .into(),
                extra: json!({"CancellationReasons": reasons}),
            };
        }
        for (o, s) in ops.iter().zip(staged) {
            self.store(o, s, history);
            self.busy.insert(
                (table_name(&o.table).to_owned(), o.key.clone()),
                (now + TRANSACTION_HOLD, token.clone()),
            );
        }
        if let Some(t) = token {
            self.tokens.insert(t, (canonical, now));
        }
        Reply::Ok(json!({}))
    }

    /// Parses one write (`kind`: `Put`, `Update`, `Delete`,
    /// `ConditionCheck`): its key, as the table's key schema reads it, and
    /// its expressions.
    fn op<'a>(&self, kind: &'a str, body: &'a Value) -> Result<Op<'a>, Reply> {
        let table = body["TableName"].as_str().unwrap_or_default().to_owned();
        let key_source = if kind == "Put" {
            &body["Item"]
        } else {
            &body["Key"]
        };
        let key = self.key_of(&table, key_source, kind == "Put")?;
        let key_attribute = self.tables[table_name(&table)].key.as_str();
        let expr = Expressions::parse(body, &[key_attribute]).map_err(validation)?;
        match kind {
            "Put" | "Delete" | "Update" | "ConditionCheck" => {}
            other => return Err(validation(format!("{other} is not modelled"))),
        }
        if kind == "Update" && !expr.has_update() {
            return Err(validation("UpdateExpression is required for an update"));
        }
        if kind != "Update" && expr.has_update() {
            return Err(validation("UpdateExpression is only valid in an update"));
        }
        if kind == "ConditionCheck" && !expr.has_condition() {
            return Err(validation(
                "ConditionExpression is required for a ConditionCheck",
            ));
        }
        Ok(Op {
            table,
            key,
            body,
            kind,
            expr,
        })
    }

    /// Whether `o`'s condition holds on the stored item.
    fn check(&self, o: &Op<'_>) -> Result<bool, Reply> {
        let stored = self.tables[table_name(&o.table)].items.get(&o.key);
        o.expr.holds(stored).map_err(validation)
    }

    /// The item after `o`, or `None` for a delete (ConditionCheck: as is).
    fn next_state(&self, o: &Op<'_>) -> Result<Option<Option<Item>>, Reply> {
        let stored = self.tables[table_name(&o.table)].items.get(&o.key).cloned();
        match o.kind {
            "ConditionCheck" => Ok(None),
            "Delete" => Ok(Some(None)),
            "Put" => Ok(Some(o.body["Item"].as_object().cloned())),
            _ => {
                let mut item = stored
                    .unwrap_or_else(|| o.body["Key"].as_object().cloned().unwrap_or_default());
                o.expr.apply_update(&mut item).map_err(validation)?;
                Ok(Some(Some(item)))
            }
        }
    }

    /// `PutItem`, `UpdateItem`, `DeleteItem`: the condition checked, then
    /// the write. A failed condition is a `ConditionalCheckFailedException`
    /// that carries the stored item when the request asked for it with
    /// `ReturnValuesOnConditionCheckFailure = ALL_OLD`
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html#DDB-PutItem-request-ReturnValuesOnConditionCheckFailure>,
    /// the same parameter of `UpdateItem` and `DeleteItem`). `ReturnValues`
    /// other than `NONE` is not modelled (idemq asks for none).
    fn single(&mut self, op: &str, req: &Value, history: &mut History) -> Reply {
        if let Some(rv) = req["ReturnValues"].as_str()
            && rv != "NONE"
        {
            return validation(format!("ReturnValues {rv} is not modelled"));
        }
        if let Err(e) = unused_placeholders(req) {
            return e;
        }
        let kind = op.trim_end_matches("Item");
        let o = match self.op(kind, req) {
            Ok(o) => o,
            Err(e) => return e,
        };
        match self.check(&o) {
            Ok(true) => {}
            Ok(false) => {
                let old = self.tables[table_name(&o.table)].items.get(&o.key);
                let extra = match old {
                    Some(old) if req["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD" => {
                        json!({"Item": old})
                    }
                    _ => json!({}),
                };
                return Reply::Error {
                    status: 400,
                    kind: "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException".into(),
                    message: "The conditional request failed".into(),
                    extra,
                };
            }
            Err(e) => return e,
        }
        if let Err(e) = self.write(&o, history) {
            return e;
        }
        Reply::Ok(json!({}))
    }

    /// The item at `key`: the current one, or for an eventually consistent
    /// read the one of up to [`STALE_WINDOW`] ago (the lag a function of
    /// the seed, the key and the instant).
    fn read(&mut self, table: &str, key: &str, consistent: bool, wall: SystemTime) -> Option<Item> {
        let name = table_name(table).to_owned();
        let current = self.tables[&name].items.get(key).cloned();
        if consistent {
            return current;
        }
        let nanos = wall
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        let draw = super::faults::hash(&[
            &self.seed.to_le_bytes(),
            b"stale",
            name.as_bytes(),
            key.as_bytes(),
            &nanos,
        ]);
        let lag = STALE_WINDOW.mul_f64((draw % 1_000_000) as f64 / 1_000_000.0);
        let as_of = Instant::now().checked_sub(lag).unwrap_or_else(Instant::now);
        // The state before the first write after `as_of`, if any.
        let then = self
            .past
            .get(&(name, key.to_owned()))
            .and_then(|writes| writes.iter().find(|(at, _)| *at > as_of))
            .map(|(_, before)| before.clone());
        match then {
            Some(before) => {
                if before != current {
                    self.stale_reads += 1;
                }
                before
            }
            None => current,
        }
    }

    fn write(&mut self, o: &Op<'_>, history: &mut History) -> Result<(), Reply> {
        let s = self.next_state(o)?;
        too_large(&s)?;
        self.store(o, s, history);
        Ok(())
    }

    fn store(&mut self, o: &Op<'_>, state: Option<Option<Item>>, history: &mut History) {
        let Some(state) = state else { return };
        let name = table_name(&o.table);
        let table = self.tables.get_mut(name).expect("table");
        if let Some(item) = &state
            && let Some(due) = ttl_due(table, &o.key, item)
        {
            self.ttl_due.insert((due, name.to_owned(), o.key.clone()));
        }
        let items = &mut table.items;
        let now = Instant::now();
        let writes = self
            .past
            .entry((name.to_owned(), o.key.clone()))
            .or_default();
        writes.retain(|(at, _)| now.duration_since(*at) < STALE_WINDOW);
        writes.push((now, items.get(&o.key).cloned()));
        match state {
            Some(item) => {
                // Keys in order, nested maps' too (a marker's follow-ups):
                // the item's wire form must not depend on a hash map's
                // order in the client.
                let Value::Object(item) = sorted(Value::Object(item)) else {
                    unreachable!("an object stays an object")
                };
                history.push(Event::Written {
                    key: o.key.clone(),
                    item: Value::Object(item.clone()),
                });
                items.insert(o.key.clone(), item);
            }
            None => {
                items.remove(&o.key);
            }
        }
    }

    /// When TTL deletes the item `key` of `table` as it is now; `None`
    /// without such an item or a TTL on it.
    pub fn ttl_deletes_at(&self, table: &str, key: &str) -> Option<SystemTime> {
        let t = self.tables.get(table)?;
        let due = ttl_due(t, key, t.items.get(key)?)?;
        Some(UNIX_EPOCH + Duration::from_secs(due))
    }

    /// Deletes items whose TTL attribute is past, each some time within
    /// [`TTL_LAG`] after it expired (the lag a function of the key, so a
    /// run stays a function of its seed). Due times are kept in order as
    /// items are written, so a sweep reads only what is due.
    fn ttl_sweep(&mut self, wall: SystemTime) {
        if self
            .last_ttl_sweep
            .is_some_and(|t| wall.duration_since(t).unwrap_or_default() < Duration::from_secs(60))
        {
            return;
        }
        self.last_ttl_sweep = Some(wall);
        let now = Instant::now();
        self.past.retain(|_, writes| {
            writes
                .last()
                .is_some_and(|(at, _)| now.duration_since(*at) < STALE_WINDOW)
        });
        let now = wall
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        while let Some(first) = self.ttl_due.first()
            && first.0 <= now
        {
            let (due, table, key) = self.ttl_due.pop_first().expect("first");
            let Some(t) = self.tables.get_mut(&table) else {
                continue;
            };
            // Still the item that was due then (not rewritten since)?
            if t.items
                .get(&key)
                .is_some_and(|item| ttl_due(t, &key, item) == Some(due))
            {
                t.items.remove(&key);
            }
        }
    }
}

/// When TTL deletes `item` of `table`: its expiry plus a lag below
/// [`TTL_LAG`] drawn from the key; `None` without a TTL attribute.
fn ttl_due(table: &Table, key: &str, item: &Item) -> Option<u64> {
    let attr = table.ttl_attribute.as_ref()?;
    let at = item
        .get(attr)
        .and_then(|v| v["N"].as_str())
        .and_then(|n| n.parse::<u64>().ok())?;
    let lag = key
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
        % TTL_LAG.as_secs();
    Some(at + lag)
}

/// Refuses an item over [`MAX_ITEM_SIZE`], as DynamoDB does: a
/// `ValidationException`, nothing written.
fn too_large(state: &Option<Option<Item>>) -> Result<(), Reply> {
    match state {
        Some(Some(item)) if item_size(item) > MAX_ITEM_SIZE => Err(validation(
            "Item size has exceeded the maximum allowed size",
        )),
        _ => Ok(()),
    }
}

/// The table name of a name or ARN (`arn:aws:dynamodb:…:table/NAME`).
pub fn table_name(table: &str) -> &str {
    table.rsplit_once(":table/").map_or(table, |(_, n)| n)
}

/// Refuses a request whose `ExpressionAttributeNames` or
/// `ExpressionAttributeValues` define a placeholder no expression uses, as
/// DynamoDB does ("Value provided in ExpressionAttributeNames unused in
/// expressions"; moto agrees, tests/sim_conformance.rs; the placeholders
/// are described in
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ExpressionPlaceholders.html>).
fn unused_placeholders(body: &Value) -> Result<(), Reply> {
    let expressions: Vec<&str> = ["ConditionExpression", "UpdateExpression"]
        .iter()
        .filter_map(|k| body[*k].as_str())
        .collect();
    let used = |token: &str| {
        expressions.iter().any(|e| {
            e.match_indices(token).any(|(i, _)| {
                !e[i + token.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        })
    };
    for (field, kind) in [
        ("ExpressionAttributeNames", "ExpressionAttributeNames"),
        ("ExpressionAttributeValues", "ExpressionAttributeValues"),
    ] {
        let mut unused: Vec<&String> = body[field]
            .as_object()
            .map(|m| m.keys().filter(|k| !used(k)).collect())
            .unwrap_or_default();
        unused.sort();
        if !unused.is_empty() {
            let keys: Vec<&str> = unused.iter().map(|k| k.as_str()).collect();
            return Err(validation(format!(
                "Value provided in {kind} unused in expressions: keys: {{{}}}",
                keys.join(", ")
            )));
        }
    }
    Ok(())
}

/// `v` with every object's keys in order, at any depth.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<(String, Value)> =
                m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            keys.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(keys.into_iter().collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}
