//! Unit tests of the in-memory DynamoDB (src/testing/dynamodb.rs).

use super::*;

fn db() -> MemoryDynamoDb {
    let mut db = MemoryDynamoDb::new();
    db.create_table("t", TableKey::partition("pk")).unwrap();
    db
}

fn balance(db: &MemoryDynamoDb, pk: &str) -> Option<String> {
    db.get_item("t", &Key::string("pk", pk))
        .unwrap()
        .and_then(|i| i.get("balance").and_then(|v| v.as_n().ok()).cloned())
}

fn marker_put(pk: &str, hash: &str) -> Value {
    json!({"Put": {
        "TableName": "t",
        "Item": {"pk": {"S": pk}, "hash": {"S": hash}},
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": "pk"},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"
    }})
}

fn credit(pk: &str, n: &str) -> Value {
    json!({"Update": {
        "TableName": "t",
        "Key": {"pk": {"S": pk}},
        "UpdateExpression": "ADD balance :n",
        "ExpressionAttributeValues": {":n": {"N": n}}
    }})
}

#[test]
fn a_transaction_commits_all_or_nothing_with_reasons_by_index() {
    let mut db = db();
    let tx = |items: Vec<Value>| json!({ "TransactItems": items });
    db.apply(
        "TransactWriteItems",
        &tx(vec![marker_put("m#1", "h1"), credit("a", "5")]),
    )
    .unwrap();
    assert_eq!(balance(&db, "a").as_deref(), Some("5"));
    // The same marker again: cancelled, nothing written, the old
    // marker returned at index 0, `None` at index 1.
    let e = db
        .apply(
            "TransactWriteItems",
            &tx(vec![marker_put("m#1", "h2"), credit("a", "5")]),
        )
        .unwrap_err();
    assert_eq!(e.code(), "TransactionCanceledException");
    let reasons = e.field("CancellationReasons").unwrap();
    assert_eq!(reasons[0]["Code"], "ConditionalCheckFailed");
    assert_eq!(reasons[0]["Item"]["hash"]["S"], "h1");
    assert_eq!(reasons[1]["Code"], "None");
    assert_eq!(balance(&db, "a").as_deref(), Some("5"), "nothing written");
    // A data error in an update cancels with ValidationError.
    db.put_item(
        "t",
        Item::from([
            ("pk".to_string(), AttributeValue::S("s".into())),
            ("balance".to_string(), AttributeValue::S("text".into())),
        ]),
    )
    .unwrap();
    let e = db
        .apply(
            "TransactWriteItems",
            &tx(vec![credit("a", "1"), credit("s", "1")]),
        )
        .unwrap_err();
    let reasons = e.field("CancellationReasons").unwrap();
    assert_eq!(
        (reasons[0]["Code"].as_str(), reasons[1]["Code"].as_str()),
        (Some("None"), Some("ValidationError"))
    );
    assert_eq!(balance(&db, "a").as_deref(), Some("5"));
}

#[test]
fn transaction_shape_errors_are_validation_exceptions() {
    let mut db = db();
    let e = db
        .apply(
            "TransactWriteItems",
            &json!({"TransactItems": [credit("a", "1"), credit("a", "2")]}),
        )
        .unwrap_err();
    assert!(
        e.message().contains("multiple operations on one item"),
        "{e}"
    );
    let e = db
        .apply("TransactWriteItems", &json!({"TransactItems": []}))
        .unwrap_err();
    assert_eq!(e.code(), "ValidationException");
    let many: Vec<Value> = (0..101).map(|i| credit(&format!("k{i}"), "1")).collect();
    assert!(
        db.apply("TransactWriteItems", &json!({"TransactItems": many}))
            .is_err()
    );
    let e = db
        .apply(
            "TransactWriteItems",
            &json!({"TransactItems": [{"Put": {"TableName": "nope", "Item": {"pk": {"S": "a"}}}}]}),
        )
        .unwrap_err();
    assert_eq!(e.code(), "ResourceNotFoundException");
    let e = db
            .apply("TransactWriteItems", &json!({"TransactItems": [{"Update": {"TableName": "t", "Key": {"other": {"S": "a"}}, "UpdateExpression": "REMOVE x"}}]}))
            .unwrap_err();
    assert!(e.message().contains("does not match the schema"), "{e}");
    assert!(db.items("t").unwrap().is_empty());
}

#[test]
fn a_client_request_token_makes_a_retry_idempotent() {
    let mut db = db();
    let req = json!({"TransactItems": [credit("a", "5")], "ClientRequestToken": "tok"});
    db.apply("TransactWriteItems", &req).unwrap();
    db.apply("TransactWriteItems", &req).unwrap();
    assert_eq!(balance(&db, "a").as_deref(), Some("5"), "applied once");
    let changed = json!({"TransactItems": [credit("a", "6")], "ClientRequestToken": "tok"});
    let e = db.apply("TransactWriteItems", &changed).unwrap_err();
    assert_eq!(e.code(), "IdempotentParameterMismatchException");
}

#[test]
fn single_item_calls_with_conditions_and_return_values() {
    let mut db = db();
    let put = json!({
        "TableName": "t", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}},
        "ConditionExpression": "attribute_not_exists(pk)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"
    });
    db.apply("PutItem", &put).unwrap();
    let e = db.apply("PutItem", &put).unwrap_err();
    assert_eq!(e.code(), "ConditionalCheckFailedException");
    assert_eq!(e.field("Item").unwrap()["v"]["N"], "1");
    let upd = json!({
        "TableName": "t", "Key": {"pk": {"S": "a"}},
        "UpdateExpression": "SET v = v + :one", "ConditionExpression": "v < :ten",
        "ExpressionAttributeValues": {":one": {"N": "1"}, ":ten": {"N": "10"}},
        "ReturnValues": "ALL_NEW"
    });
    let out = db.apply("UpdateItem", &upd).unwrap();
    assert_eq!(out["Attributes"]["v"]["N"], "2");
    let got = db
        .apply(
            "GetItem",
            &json!({"TableName": "t", "Key": {"pk": {"S": "a"}}, "ConsistentRead": true}),
        )
        .unwrap();
    assert_eq!(got["Item"]["v"]["N"], "2");
    let del = json!({"TableName": "t", "Key": {"pk": {"S": "a"}}, "ReturnValues": "ALL_OLD"});
    assert_eq!(
        db.apply("DeleteItem", &del).unwrap()["Attributes"]["v"]["N"],
        "2"
    );
    assert_eq!(
        db.apply(
            "GetItem",
            &json!({"TableName": "t", "Key": {"pk": {"S": "a"}}})
        )
        .unwrap(),
        json!({})
    );
}

#[test]
fn what_is_not_modelled_is_refused_by_name() {
    let mut db = db();
    for (op, req, names) in [
        ("Scan", json!({"TableName": "t"}), "Scan"),
        (
            "PutItem",
            json!({"TableName": "t", "Item": {"pk": {"S": "a"}}, "Expected": {}}),
            "Expected",
        ),
        (
            "UpdateItem",
            json!({"TableName": "t", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET a = :v", "ExpressionAttributeValues": {":v": {"S": "x"}}, "ReturnValues": "UPDATED_NEW"}),
            "UPDATED_NEW",
        ),
        (
            "GetItem",
            json!({"TableName": "t", "Key": {"pk": {"S": "a"}}, "ProjectionExpression": "a"}),
            "ProjectionExpression",
        ),
        (
            "PutItem",
            json!({"TableName": "t", "Item": {"pk": {"S": "a"}}, "ExpressionAttributeValues": {":v": {"S": "x"}}}),
            "only be specified when using expressions",
        ),
        (
            "PutItem",
            json!({"TableName": "t", "Item": {"pk": {"S": ""}}}),
            "empty string",
        ),
        (
            "PutItem",
            json!({"TableName": "t", "Item": {"pk": {"N": "x"}}}),
            "not a valid DynamoDB number",
        ),
        ("PutItem", json!("not an object"), "not a JSON object"),
    ] {
        let e = db.apply(op, &req).expect_err(op);
        assert!(e.message().contains(names), "{op}: {e}");
    }
    assert!(db.items("t").unwrap().is_empty());
}
