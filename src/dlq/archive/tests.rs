//! Unit test of the round trip: a dead letter exported as a line and read
//! back is the message it was, byte for byte.

use super::*;
use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;

#[test]
fn a_dead_letter_round_trips_byte_for_byte() {
    let mut attributes = HashMap::new();
    let s = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("j-1")
        .build()
        .unwrap();
    let b = MessageAttributeValue::builder()
        .data_type("Binary.gz")
        .binary_value(Blob::new(vec![0u8, 159, 255]))
        .build()
        .unwrap();
    let n = MessageAttributeValue::builder()
        .data_type("Number")
        .string_value("42")
        .build()
        .unwrap();
    attributes.insert("idemq-job-id".to_string(), s);
    attributes.insert("blob".to_string(), b);
    attributes.insert("n".to_string(), n);
    let msg = DeadMessage {
        message_id: "m-1".into(),
        receipt_handle: "rh".into(),
        body: "{\"x\": \"ünïcode\"}".into(),
        attributes: attributes.clone(),
        system: HashMap::from([
            (Sys::MessageGroupId, "g".to_string()),
            (Sys::MessageDeduplicationId, "d".to_string()),
        ]),
    };
    let a = Archived::of(&msg, &Context::of(&msg, None, None), None);
    let line = serde_json::to_string(&a).unwrap();
    let parsed = parse(&format!("\n{line}\nnot json\n"));
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0].0, 2);
    let back = parsed[0].1.as_ref().unwrap();
    assert_eq!(back, &a);
    assert!(
        parsed[1]
            .1
            .as_ref()
            .unwrap_err()
            .contains("not an exported dead letter")
    );

    let job = back.to_job(&JobIdResolver::new()).unwrap();
    assert_eq!(job.id, "j-1");
    assert_eq!(job.body, msg.body);
    // The producer's attributes go back byte for byte; idemq's own are
    // dropped and `idemq-job-id` is set again from the job id.
    let mut producers = attributes.clone();
    producers.remove("idemq-job-id");
    assert_eq!(job.attributes, producers);
    assert!(job.set_id_attribute);
    assert_eq!(job.group_id.as_deref(), Some("g"));
    assert_eq!(job.deduplication_id.as_deref(), Some("d"));
}
