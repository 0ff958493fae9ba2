//! DynamoDB scenarios, normalised as the SQS ones are.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, KeysAndAttributes, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use serde_json::{Value, json};

use super::{Backend, Obs, code, code_message, item};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn put(table: &str, pk: &str, extra: &[(&str, AttributeValue)]) -> Put {
    let mut p = Put::builder().table_name(table).item("pk", s(pk));
    for (k, v) in extra {
        p = p.item(*k, v.clone());
    }
    p.build().expect("put")
}

fn put_new(table: &str, pk: &str, extra: &[(&str, AttributeValue)]) -> TransactWriteItem {
    let mut p = put(table, pk, extra);
    p.condition_expression = Some("attribute_not_exists(pk)".into());
    p.return_values_on_condition_check_failure = Some(ReturnValuesOnConditionCheckFailure::AllOld);
    TransactWriteItem::builder().put(p).build()
}

fn add_one(table: &str, pk: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .update(
            Update::builder()
                .table_name(table)
                .key("pk", s(pk))
                .update_expression("ADD n :one")
                .expression_attribute_values(":one", n(1))
                .build()
                .expect("update"),
        )
        .build()
}

/// A transaction's outcome: "ok", or the cancellation reasons by index
/// (code and old item), or another error's code and message.
fn outcome<R>(r: Result<R, SdkError<TransactWriteItemsError>>) -> Value {
    match r {
        Ok(_) => json!("ok"),
        Err(e) => match e.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(t)) => json!({
                "cancelled": t.cancellation_reasons().iter().map(|r| json!({
                    "Code": r.code(),
                    "Item": r.item().map(item),
                })).collect::<Vec<_>>()
            }),
            _ => code_message(&e),
        },
    }
}

async fn transact(b: &Backend, items: Vec<TransactWriteItem>, token: Option<&str>) -> Value {
    outcome(
        b.ddb
            .transact_write_items()
            .set_transact_items(Some(items))
            .set_client_request_token(token.map(str::to_owned))
            .send()
            .await,
    )
}

async fn get(b: &Backend, table: &str, pk: &str) -> Value {
    match b
        .ddb
        .get_item()
        .table_name(table)
        .key("pk", s(pk))
        .consistent_read(true)
        .send()
        .await
    {
        Ok(out) => json!(out.item().map(item)),
        Err(e) => code_message(&e),
    }
}

/// All or nothing, `CancellationReasons` by index with `ALL_OLD`, two
/// actions on one item.
pub async fn transactions(b: Backend) -> Obs {
    let mut o = Obs::default();
    let t = b.table("pk").await;
    o.see(
        "a transaction that commits",
        transact(
            &b,
            vec![put_new(&t, "a", &[("v", s("old"))]), add_one(&t, "c")],
            None,
        )
        .await,
    );
    o.see(
        "a transaction whose second condition fails",
        transact(
            &b,
            vec![
                put_new(&t, "b", &[]),
                put_new(&t, "a", &[("v", s("new"))]),
                add_one(&t, "c"),
            ],
            None,
        )
        .await,
    );
    o.see("b after the cancelled transaction", get(&b, &t, "b").await);
    o.see("a after the cancelled transaction", get(&b, &t, "a").await);
    o.see("c after the cancelled transaction", get(&b, &t, "c").await);
    o.see(
        "two actions on one item",
        transact(&b, vec![put_new(&t, "d", &[]), add_one(&t, "d")], None).await,
    );
    o.see("d after the refused transaction", get(&b, &t, "d").await);
    let check = |expr: &str, pk: &str| {
        TransactWriteItem::builder()
            .condition_check(
                ConditionCheck::builder()
                    .table_name(&t)
                    .key("pk", s(pk))
                    .condition_expression(expr)
                    .build()
                    .expect("check"),
            )
            .build()
    };
    o.see(
        "a ConditionCheck that holds",
        transact(
            &b,
            vec![check("attribute_exists(pk)", "a"), add_one(&t, "e")],
            None,
        )
        .await,
    );
    o.see(
        "a ConditionCheck that fails",
        transact(
            &b,
            vec![check("attribute_exists(pk)", "zz"), add_one(&t, "f")],
            None,
        )
        .await,
    );
    o.see(
        "e and f",
        json!([get(&b, &t, "e").await, get(&b, &t, "f").await]),
    );
    o
}

/// `ClientRequestToken`: a replay within 10 minutes succeeds without
/// writing again; the same token on another request is refused.
pub async fn tokens(b: Backend) -> Obs {
    let mut o = Obs::default();
    let t = b.table("pk").await;
    let token = format!("token-{}", rand::random::<u32>());
    o.see(
        "first request",
        transact(&b, vec![add_one(&t, "c")], Some(&token)).await,
    );
    o.see(
        "the same request again",
        transact(&b, vec![add_one(&t, "c")], Some(&token)).await,
    );
    o.see("c after the replay", get(&b, &t, "c").await);
    o.see(
        "another request with the same token",
        transact(&b, vec![add_one(&t, "other")], Some(&token)).await,
    );
    o.see("other after it", get(&b, &t, "other").await);
    o
}

/// `PutItem`, `GetItem`, `BatchGetItem`, conditions, `SET` / `ADD`.
pub async fn items(b: Backend) -> Obs {
    let mut o = Obs::default();
    let t = b.table("pk").await;
    for pk in ["a", "b"] {
        b.ddb
            .put_item()
            .table_name(&t)
            .item("pk", s(pk))
            .item("v", s(pk))
            .send()
            .await
            .expect("put");
    }
    let conditional = |pk: &str, expr: &str| {
        b.ddb
            .put_item()
            .table_name(&t)
            .item("pk", s(pk))
            .item("v", s("conditional"))
            .condition_expression(expr)
            .send()
    };
    o.see(
        "PutItem attribute_not_exists on an existing item",
        conditional("a", "attribute_not_exists(pk)")
            .await
            .map(|_| json!("ok"))
            .unwrap_or_else(|e| code(&e)),
    );
    o.see(
        "PutItem attribute_exists on a missing item",
        conditional("m", "attribute_exists(pk)")
            .await
            .map(|_| json!("ok"))
            .unwrap_or_else(|e| code(&e)),
    );
    o.see(
        "PutItem attribute_exists on an existing item",
        conditional("b", "attribute_exists(pk)")
            .await
            .map(|_| json!("ok"))
            .unwrap_or_else(|e| code(&e)),
    );
    o.see("GetItem a", get(&b, &t, "a").await);
    o.see("GetItem b", get(&b, &t, "b").await);
    o.see("GetItem missing", get(&b, &t, "m").await);
    let batch = b
        .ddb
        .batch_get_item()
        .request_items(
            &t,
            KeysAndAttributes::builder()
                .keys([("pk".to_owned(), s("a"))].into())
                .keys([("pk".to_owned(), s("m"))].into())
                .keys([("pk".to_owned(), s("b"))].into())
                .consistent_read(true)
                .build()
                .expect("keys"),
        )
        .send()
        .await
        .expect("batch get");
    let mut found: Vec<Value> = batch
        .responses()
        .and_then(|r| r.get(&t))
        .map(|items| items.iter().map(item).collect())
        .unwrap_or_default();
    found.sort_by_key(|v| v.to_string());
    o.see("BatchGetItem a, missing, b", json!(found));
    o.see(
        "BatchGetItem unprocessed",
        json!(batch.unprocessed_keys().map(|u| u.len()).unwrap_or(0)),
    );
    let update = |pk: &str, expr: &str, cond: Option<&str>, v: AttributeValue| {
        TransactWriteItem::builder()
            .update(
                Update::builder()
                    .table_name(&t)
                    .key("pk", s(pk))
                    .update_expression(expr)
                    .set_condition_expression(cond.map(str::to_owned))
                    .set_expression_attribute_names(
                        expr.contains("#s")
                            .then(|| [("#s".to_owned(), "s".to_owned())].into()),
                    )
                    .expression_attribute_values(":v", v)
                    .build()
                    .expect("update"),
            )
            .build()
    };
    o.see(
        "SET on a new item",
        transact(&b, vec![update("u", "SET #s = :v", None, s("x"))], None).await,
    );
    o.see(
        "ADD to a new attribute",
        transact(&b, vec![update("u", "ADD n :v", None, n(2))], None).await,
    );
    o.see(
        "SET and ADD again",
        transact(
            &b,
            vec![update("u", "SET t = :v ADD n :v", None, n(3))],
            None,
        )
        .await,
    );
    o.see("u after the updates", get(&b, &t, "u").await);
    o.see(
        "ADD to a string",
        transact(&b, vec![update("u", "ADD #s :v", None, n(1))], None).await,
    );
    o.see(
        "Update with attribute_exists on a missing item",
        transact(
            &b,
            vec![update(
                "m",
                "SET #s = :v",
                Some("attribute_exists(pk)"),
                s("x"),
            )],
            None,
        )
        .await,
    );
    o.see("m after it", get(&b, &t, "m").await);
    o.see(
        "an unused ExpressionAttributeNames entry",
        transact(
            &b,
            vec![
                TransactWriteItem::builder()
                    .update(
                        Update::builder()
                            .table_name(&t)
                            .key("pk", s("u"))
                            .update_expression("ADD n :v")
                            .expression_attribute_names("#s", "s")
                            .expression_attribute_values(":v", n(1))
                            .build()
                            .expect("update"),
                    )
                    .build(),
            ],
            None,
        )
        .await,
    );
    let r = b
        .ddb
        .put_item()
        .table_name(&t)
        .item("pk", s("p"))
        .condition_expression("attribute_not_exists(pk)")
        .expression_attribute_values(":unused", n(1))
        .send()
        .await;
    o.see(
        "PutItem with an unused ExpressionAttributeValues entry",
        r.map(|_| json!("ok")).unwrap_or_else(|e| code_message(&e)),
    );
    o.see(
        "u and p after them",
        json!([get(&b, &t, "u").await, get(&b, &t, "p").await]),
    );
    o
}

/// The two key-schema messages and the 400 KB item limit.
pub async fn limits(b: Backend) -> Obs {
    let mut o = Obs::default();
    let t = b.table("pk").await;
    let r = b
        .ddb
        .put_item()
        .table_name(&t)
        .item("id", s("a"))
        .send()
        .await;
    o.see(
        "PutItem without the key",
        r.map(|_| json!("ok")).unwrap_or_else(|e| code_message(&e)),
    );
    let r = b
        .ddb
        .get_item()
        .table_name(&t)
        .key("id", s("a"))
        .send()
        .await;
    o.see(
        "GetItem with another key name",
        r.map(|_| json!("ok")).unwrap_or_else(|e| code_message(&e)),
    );
    o.see(
        "a transaction Put without the key",
        transact(
            &b,
            vec![
                TransactWriteItem::builder()
                    .put(
                        Put::builder()
                            .table_name(&t)
                            .item("id", s("a"))
                            .build()
                            .expect("put"),
                    )
                    .build(),
            ],
            None,
        )
        .await,
    );
    let big = |kb: usize| s(&"x".repeat(kb * 1024));
    for (step, kb) in [("PutItem of 390 KB", 390), ("PutItem of 401 KB", 401)] {
        let r = b
            .ddb
            .put_item()
            .table_name(&t)
            .item("pk", s(step))
            .item("v", big(kb))
            .send()
            .await;
        o.see(
            step,
            r.map(|_| json!("ok")).unwrap_or_else(|e| code_message(&e)),
        );
    }
    o.see(
        "a transaction Put of 401 KB",
        transact(&b, vec![put_new(&t, "t", &[("v", big(401))])], None).await,
    );
    b.ddb
        .put_item()
        .table_name(&t)
        .item("pk", s("grow"))
        .item("v", big(300))
        .send()
        .await
        .expect("put");
    o.see(
        "a transaction Update growing an item past 400 KB",
        transact(
            &b,
            vec![
                add_one(&t, "n"),
                TransactWriteItem::builder()
                    .update(
                        Update::builder()
                            .table_name(&t)
                            .key("pk", s("grow"))
                            .update_expression("SET w = :w")
                            .expression_attribute_values(":w", big(150))
                            .build()
                            .expect("update"),
                    )
                    .build(),
            ],
            None,
        )
        .await,
    );
    o.see("n after it", get(&b, &t, "n").await);
    o
}
