//! The effect's unit tests: the limits, the reserved keys, the fused
//! marker, the sizes and the SDK form. Their own file, so the code files
//! read without them.

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::number_size;
use super::*;
use crate::followup::FollowUpError;

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

    let update = Effect::new().marked_by(Write::update("t", Key::string("pk", "e"), "SET a = :a"));
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
