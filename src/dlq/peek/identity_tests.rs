//! Unit tests of a letter's identity (the job id its record is keyed by, the
//! source queue it is taken from) and of the FIFO sweep that counts letters
//! by MessageId and marks the groups a full response may have cut short.

use super::*;
use crate::dead_letter::ATTR_SOURCE_QUEUE;
use crate::job::{JOB_ID_ATTRIBUTE, JobIdSource};
use aws_sdk_sqs::types::MessageAttributeValue;

fn dead(id: &str, body: &str, attr: Option<&str>, group: Option<&str>) -> DeadMessage {
    let mut attributes = HashMap::new();
    if let Some(a) = attr {
        attributes.insert(
            JOB_ID_ATTRIBUTE.to_string(),
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(a)
                .build()
                .unwrap(),
        );
    }
    let mut system = HashMap::new();
    if let Some(g) = group {
        system.insert(Sys::MessageGroupId, g.to_string());
    }
    DeadMessage {
        message_id: id.into(),
        receipt_handle: format!("rh-{id}"),
        body: body.into(),
        attributes,
        system,
    }
}

/// The consumer writes a failure record under the id it resolved
/// (attribute, else body pointer, else MessageId); the CLI must look it
/// up under the same id, not the attribute alone.
#[test]
fn records_are_keyed_by_the_id_the_consumer_resolved() {
    let r = JobIdResolver::new().with_body_pointer("/ref");
    let by_attr = dead("m-1", r#"{"ref":"p-9"}"#, Some("j-1"), None);
    assert_eq!(by_attr.record_key(&r), (Some("j-1".into()), "m-1".into()));
    let by_pointer = dead("m-2", r#"{"ref":"p-2"}"#, None, None);
    assert_eq!(
        by_pointer.record_key(&r),
        (Some("p-2".into()), "m-2".into())
    );
    assert_eq!(by_pointer.resolve(&r).unwrap().1, JobIdSource::BodyPointer);
    let by_message_id = dead("m-3", r#"{"x":1}"#, None, None);
    assert_eq!(
        by_message_id.record_key(&r),
        (Some("m-3".into()), "m-3".into())
    );
    // A pointer naming an object is refused by the consumer; its record
    // is under the message id.
    let invalid = dead("m-4", r#"{"ref":{"a":1}}"#, None, None);
    assert_eq!(invalid.record_key(&r), (None, "m-4".into()));

    let c = Context::of(&by_pointer, Some("p-2"), None);
    assert_eq!(c.job_id.as_deref(), Some("p-2"), "the resolved id is shown");
}

/// A sender can forge `idemq-source-queue`; SQS's own
/// `DeadLetterQueueSourceArn` outranks it.
#[test]
fn the_source_sqs_reports_outranks_the_attribute() {
    let mut m = dead("m-1", "{}", Some("j"), None);
    m.attributes.insert(
        ATTR_SOURCE_QUEUE.to_string(),
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value("admin-commands")
            .build()
            .unwrap(),
    );
    assert_eq!(
        Context::of(&m, None, None).source_queue.as_deref(),
        Some("admin-commands"),
        "only the attribute: shown as it is"
    );
    m.system.insert(
        Sys::DeadLetterQueueSourceArn,
        "arn:aws:sqs:us-east-1:1:orders".into(),
    );
    assert_eq!(
        Context::of(&m, None, None).source_queue.as_deref(),
        Some("orders")
    );
    assert_eq!(m.source_queue_attribute(), Some("admin-commands"));
}

/// Only a full response can cut a FIFO group short, and a group is
/// swept again only when it brought something new: the sweep ends.
#[test]
fn a_sweep_marks_groups_a_full_response_may_have_cut() {
    let mut sweep = Sweep::default();
    let first: Vec<DeadMessage> = (1..=6)
        .map(|i| dead(&format!("a{i}"), "", None, Some("A")))
        .chain((1..=4).map(|i| dead(&format!("b{i}"), "", None, Some("B"))))
        .collect();
    assert!(sweep.note(&first).iter().all(|f| *f));
    let small = vec![dead("c1", "", None, Some("C"))];
    assert_eq!(sweep.note(&small), vec![true]);
    assert_eq!(sweep.next_cut().as_deref(), Some("A"));
    assert_eq!(sweep.next_cut().as_deref(), Some("B"));
    assert_eq!(
        sweep.next_cut(),
        None,
        "C came in a response with room left"
    );

    // B again from its head, now with what was behind it.
    let again: Vec<DeadMessage> = (1..=6)
        .map(|i| dead(&format!("b{i}"), "", None, Some("B")))
        .collect();
    assert_eq!(
        sweep.note(&again),
        vec![false, false, false, false, true, true]
    );
    assert_eq!(sweep.seen(), 13, "counted by MessageId");
    // A full response of nothing new never queues its group again.
    let stale: Vec<DeadMessage> = (1..=10)
        .map(|i| dead(&format!("a{i}"), "", None, Some("A")))
        .take(6)
        .chain((1..=4).map(|i| dead(&format!("b{i}"), "", None, Some("B"))))
        .collect();
    assert!(sweep.note(&stale).iter().all(|f| !*f));
    assert_eq!(sweep.next_cut(), None);
}
