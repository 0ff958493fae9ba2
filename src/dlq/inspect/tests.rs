//! Unit tests of the inspection's words: one-line errors, the warning that
//! no failure record was found, and which open errors are the operator's.

use super::*;

#[test]
fn one_line_flattens_and_cuts() {
    assert_eq!(one_line("a\nb", 10), "a b");
    assert_eq!(one_line("abcdef", 4), "abc…");
}

/// Letters whose every context lacks a record: the warning names the
/// table, prefix and namespaces looked in; one record found, or no
/// letter at all, and there is nothing to warn about.
#[test]
fn no_failure_records_is_said_with_where_it_looked() {
    let letter = |id: &str, recorded: bool| {
        let m = DeadMessage {
            message_id: id.into(),
            receipt_handle: "rh".into(),
            body: "{}".into(),
            attributes: Default::default(),
            system: Default::default(),
        };
        let mut c = Context::of(&m, Some(id), None);
        c.failure_record = recorded;
        (m, c)
    };
    let table = RecordsPlace::Dynamodb {
        table: "jobs".into(),
        key_prefix: "idemq#".into(),
        namespace: None,
    };
    let sources = vec!["orders".to_owned()];
    let bare = [letter("a", false), letter("b", false)];
    let w = NoFailureRecords::check(&bare, &table, &sources).unwrap();
    assert_eq!((w.kind, w.letters), ("no_failure_records", 2));
    assert_eq!(w.namespaces, ["orders"]);
    assert!(w.message.contains("DynamoDB table jobs"), "{}", w.message);
    assert!(w.message.contains("namespace orders"), "{}", w.message);
    assert!(w.message.contains("IDEMQ_NAMESPACE"), "{}", w.message);
    let json = serde_json::to_value(&w).unwrap();
    assert_eq!(json["records"]["store"], "dynamodb");
    assert_eq!(json["records"]["table"], "jobs");

    let named = RecordsPlace::Postgres {
        schema: "idemq".into(),
        namespace: Some("billing".into()),
    };
    let w = NoFailureRecords::check(&bare, &named, &sources).unwrap();
    assert_eq!(w.namespaces, ["billing"]);
    assert!(w.message.contains("PostgreSQL schema idemq"));
    let w = NoFailureRecords::check(&bare, &RecordsPlace::None, &sources).unwrap();
    assert!(w.message.contains("no table was given"), "{}", w.message);

    let one_recorded = [letter("a", false), letter("b", true)];
    assert_eq!(
        NoFailureRecords::check(&one_recorded, &table, &sources),
        None
    );
    assert_eq!(NoFailureRecords::check(&[], &table, &sources), None);
}

/// Only a missing queue is the operator's mistake (exit 2); anything
/// SQS answered with (throttling, an outage, a denial) exits 1.
#[test]
fn aws_failures_are_not_usage_errors() {
    let url = "https://sqs.us-east-1.amazonaws.com/1/q";
    let missing = OpenError::of_queue(url, QueueError::NotFound(url.into()));
    assert!(missing.is_usage());
    assert!(missing.to_string().contains("no such queue"));
    let throttled = OpenError::of_queue(
        url,
        QueueError::Sqs("ThrottlingException: Rate exceeded".into()),
    );
    assert!(!throttled.is_usage());
    assert!(throttled.to_string().contains("ThrottlingException"));
}
