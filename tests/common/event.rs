//! Lambda SQS events for the test kit's `run_json`, and what the kit sent,
//! without the local stack: tests that load `examples/ledger.rs` themselves
//! include this file alone (`#[path = "common/event.rs"]`).
#![allow(dead_code)]

use idemq::testing::{SentMessage, TestKit};

/// A Lambda SQS event of `records` from `queue`, as the kit's `run_json`
/// takes it: each record is `(message id, body, idemq-job-id, receive
/// count)`, with no job id attribute when that is `None` (as an SNS
/// fan-out delivers it).
pub fn sqs_event(queue: &str, records: &[(&str, &str, Option<&str>, u32)]) -> String {
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|&(message_id, body, job_id, receives)| {
            let attributes = match job_id {
                Some(id) => serde_json::json!({"idemq-job-id": {"stringValue": id, "dataType": "String"}}),
                None => serde_json::json!({}),
            };
            serde_json::json!({
                "messageId": message_id,
                "receiptHandle": format!("rh-{message_id}"),
                "body": body,
                "attributes": {"ApproximateReceiveCount": receives.to_string(), "SentTimestamp": "1796212800000"},
                "messageAttributes": attributes,
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:us-east-1:000000000000:{queue}"),
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// Messages the kit's SQS took for `queue` (not its DLQ) since it started.
pub fn sent_to<H: idemq::Handler>(kit: &TestKit<H>, queue: &str) -> Vec<SentMessage> {
    let sqs = kit.sqs();
    let url = sqs.url(queue);
    sqs.sent_messages()
        .iter()
        .filter(|m| m.queue_url == url)
        .cloned()
        .collect()
}
