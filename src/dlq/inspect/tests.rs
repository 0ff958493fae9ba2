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

/// A letter of job `job` that deploy `deploy` (idemq 0.1.0) failed with
/// `error`, `secs` after the epoch.
fn failed(job: &str, deploy: Option<&str>, error: &str, secs: u64) -> (DeadMessage, Context) {
    let m = DeadMessage {
        message_id: format!("m-{job}"),
        receipt_handle: format!("rh-{job}"),
        body: format!("{{\"job\":\"{job}\"}}"),
        attributes: Default::default(),
        system: Default::default(),
    };
    let c = Context {
        job_id: Some(job.into()),
        message_id: m.message_id.clone(),
        attempts: Some(5),
        last_error: Some(error.into()),
        error_chain: Vec::new(),
        failed_at: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)),
        source_queue: Some("orders".into()),
        deploy: deploy.map(Into::into),
        idemq_version: deploy.map(|_| "0.1.0".into()),
        backtrace: None,
        payload_bytes: m.body.len(),
        failure_record: true,
    };
    (m, c)
}

/// A downstream's outage fails jobs under both deploys with one error; a
/// bug the second deploy shipped fails jobs under it alone, with its own
/// error. The stats tell the two apart: by deploy, in the order the
/// deploys began to fail, each with its errors.
#[test]
fn stats_count_each_deploys_failures_by_error_in_the_order_they_began() {
    let items = vec![
        failed("a", Some("7"), "ledger unavailable", 100),
        failed("b", Some("8"), "ledger unavailable", 300),
        failed("c", Some("8"), "amount overflow", 200),
        failed("d", Some("7"), "ledger unavailable", 50),
        failed("e", None, "(old consumer)", 10),
    ];
    let stats = Stats::of(
        "orders-dlq",
        crate::dlq::peek::Depth {
            visible: 5,
            in_flight: 0,
            delayed: 0,
        },
        Scanned { items, unseen: 0 },
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000),
    );
    let order: Vec<&str> = stats
        .deploys_by_first_failure()
        .iter()
        .map(|(d, _)| *d)
        .collect();
    assert_eq!(order, ["(unknown)", "7, idemq 0.1.0", "8, idemq 0.1.0"]);
    let seven = &stats.by_deploy["7, idemq 0.1.0"];
    assert_eq!(seven.jobs, 2);
    assert_eq!(
        seven.first_failed_at,
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(50))
    );
    assert_eq!(seven.by_error.len(), 1);
    let eight = &stats.by_deploy["8, idemq 0.1.0"];
    assert_eq!(eight.jobs, 2);
    assert_eq!(eight.by_error["amount overflow"], 1);
    assert_eq!(eight.by_error["ledger unavailable"], 1);
    assert_eq!(
        eight.errors_by_count(),
        [("amount overflow", 1), ("ledger unavailable", 1)],
        "ordered as the DLQ's errors are"
    );
    let json = serde_json::to_value(&stats).unwrap();
    assert_eq!(
        json["deploys"]["8, idemq 0.1.0"]["first_failed_at"],
        "1970-01-01T00:03:20Z"
    );
    assert_eq!(json["by_error"]["ledger unavailable"], 3);
}
