//! Unit tests of a letter's dates and of its context: what the failure
//! record, the attributes and the send time each say.

use super::*;
use crate::failure::{Failure, FailureKind, FailureRecord};
use aws_sdk_sqs::types::MessageAttributeValue;
use std::time::UNIX_EPOCH;

/// The attribute wins; `SentTimestamp` stands for the first enqueue
/// only where SQS's redrive kept it (into a standard DLQ); elsewhere
/// the source's retention is taken off, so the age is never understated.
#[test]
fn a_letter_s_first_enqueue_never_reads_later_than_it_was() {
    let sent = UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
    let shift = Duration::from_secs(4 * 86_400);
    let moved = msg(&[]);
    assert_eq!(moved.first_enqueued(false, shift), Some(sent));
    assert_eq!(moved.first_enqueued(true, shift), Some(sent - shift));
    let mut sent_by_idemq = msg(&[]);
    sent_by_idemq.system.remove(&Sys::DeadLetterQueueSourceArn);
    assert_eq!(
        sent_by_idemq.first_enqueued(false, shift),
        Some(sent - shift)
    );
    let stamped = msg(&[(crate::job::FIRST_ENQUEUED_ATTRIBUTE, "1600000000000")]);
    let first = UNIX_EPOCH + Duration::from_millis(1_600_000_000_000);
    assert_eq!(stamped.first_enqueued_attribute(), Some(first));
    assert_eq!(stamped.first_enqueued(true, shift), Some(first));
    let garbled = msg(&[(crate::job::FIRST_ENQUEUED_ATTRIBUTE, "soon")]);
    assert_eq!(garbled.first_enqueued(false, shift), Some(sent));
    let mut silent = msg(&[]);
    silent.system.clear();
    assert_eq!(silent.first_enqueued(false, shift), None);
}

fn msg(attrs: &[(&str, &str)]) -> DeadMessage {
    DeadMessage {
        message_id: "m-1".into(),
        receipt_handle: "rh".into(),
        body: "{\"a\":1}".into(),
        attributes: attrs
            .iter()
            .map(|(k, v)| {
                let v = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(*v)
                    .build()
                    .unwrap();
                (k.to_string(), v)
            })
            .collect(),
        system: HashMap::from([
            (Sys::SentTimestamp, "1700000000000".to_string()),
            (
                Sys::DeadLetterQueueSourceArn,
                "arn:aws:sqs:us-east-1:1:orders".to_string(),
            ),
        ]),
    }
}

#[test]
fn context_prefers_the_record_and_falls_back_to_attributes() {
    let m = msg(&[
        ("idemq-job-id", "j-1"),
        ("idemq-error", "amount 0 is not positive"),
        ("idemq-attempts", "1"),
        ("idemq-failed-at", "2026-12-01T10:00:00Z"),
        ("idemq-deploy", "6, idemq 0.1.0"),
    ]);
    let c = Context::of(&m, None, None);
    assert_eq!(c.job_id.as_deref(), Some("j-1"));
    assert_eq!(
        (c.deploy.as_deref(), c.idemq_version.as_deref()),
        (Some("6"), Some("0.1.0"))
    );
    assert_eq!(c.deploy_line(), "6 (idemq 0.1.0)");
    assert_eq!(c.attempts, Some(1));
    assert_eq!(c.last_error.as_deref(), Some("amount 0 is not positive"));
    assert_eq!(
        c.failed_at,
        humantime::parse_rfc3339("2026-12-01T10:00:00Z").ok()
    );
    assert_eq!(
        c.source_queue.as_deref(),
        Some("orders"),
        "from DeadLetterQueueSourceArn"
    );
    assert_eq!(c.payload_bytes, 7);

    let record = FailureRecord {
        job_id: Some("j-1".into()),
        message_id: "m-0".into(),
        attempt: 6,
        failure: Failure {
            kind: FailureKind::Transient,
            error: "downstream outage".into(),
            chain: vec!["connection\nreset".into()],
            backtrace: None,
        },
        failed_at: UNIX_EPOCH + Duration::from_secs(5),
        source_queue: "ledger".into(),
        payload_hash: "h".into(),
        deploy: "7".into(),
        idemq_version: "0.1.0".into(),
    };
    let c = Context::of(&m, None, Some(&record));
    assert_eq!(
        (c.attempts, c.source_queue.as_deref(), c.deploy.as_deref()),
        (Some(6), Some("ledger"), Some("7"))
    );
    assert_eq!(c.error_line(), "downstream outage: connection reset");
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["failed_at"], "1970-01-01T00:00:05.000Z");
}

#[test]
fn without_anything_failed_at_is_the_send_time() {
    let c = Context::of(&msg(&[]), None, None);
    assert_eq!(
        c.failed_at,
        Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000))
    );
    assert_eq!(c.job_id, None);
    assert_eq!(c.error_line(), "");
}
