//! EventBridge `detail` numbers that an f64 cannot hold (beyond i64/u64,
//! or a long decimal) reach the handler and the payload hash exactly as
//! the event wrote them. EventBridge passes `Detail` through as JSON
//! (<https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsRequestEntry.html>),
//! which puts no limit on a number's digits.

use idemq::envelope::{Envelope, canonical_json};
use idemq::job::{JobIdResolver, PayloadHash};
use idemq::store::dynamodb::Effect;
use idemq::testing::{KitConfig, TestKit};
use idemq::{JobMeta, handler_fn};

fn resolver() -> JobIdResolver {
    JobIdResolver::new()
        .with_envelope(Envelope::EventBridge)
        .with_body_pointer("/transfer_id")
}

fn event(id: &str, detail: &str) -> String {
    format!(
        r#"{{"version":"0","id":"{id}","detail-type":"transfer","source":"bank","time":"2027-01-01T00:00:00Z","detail":{detail}}}"#
    )
}

/// `(job id, payload, payload hash)` of an event.
fn job(body: &str) -> (String, String, PayloadHash) {
    let job = resolver().resolve_job(None, body, "sqs-1").unwrap();
    let hash = PayloadHash::of(job.payload.as_bytes());
    (job.id.as_str().to_owned(), job.payload.into_owned(), hash)
}

#[test]
fn details_differing_only_beyond_u64_or_in_a_long_decimal_hash_apart() {
    for (a, b) in [
        ("18446744073709551617", "18446744073709551618"),
        ("-9223372036854775809", "-9223372036854775810"),
        (
            "0.10000000000000000000000001",
            "0.10000000000000000000000002",
        ),
        (
            "123456789012345678901234567890",
            "123456789012345678901234567891",
        ),
    ] {
        let detail = |n: &str| format!(r#"{{"transfer_id":"t-1","amount":{n}}}"#);
        let (id_a, payload_a, hash_a) = job(&event("e-1", &detail(a)));
        let (id_b, payload_b, hash_b) = job(&event("e-2", &detail(b)));
        assert_eq!((id_a.as_str(), id_b.as_str()), ("t-1", "t-1"));
        assert_eq!(
            payload_a,
            format!(r#"{{"amount":{a},"transfer_id":"t-1"}}"#)
        );
        assert_eq!(
            payload_b,
            format!(r#"{{"amount":{b},"transfer_id":"t-1"}}"#)
        );
        assert_ne!(hash_a, hash_b, "{a} and {b} hash the same");
    }
}

/// Numbers an f64 holds exactly render as they always did, so markers
/// committed before keep matching their redeliveries.
#[test]
fn numbers_an_f64_holds_keep_their_earlier_canonical_form() {
    let detail = r#"{"b":[1.5,-0.0,1e2,2.50,0.1,7,-7,18446744073709551615,true,null,"x\u00e9"],"a":{"z":1E-3,"y":1.0}}"#;
    let (_, payload, _) = job(&event("e-1", detail));
    let value: serde_json::Value = serde_json::from_str(detail).unwrap();
    assert_eq!(payload, canonical_json(&value));
}

/// The same detail laid out differently (spacing, key order, repeated
/// keys) is still one payload, big numbers included.
#[test]
fn layout_does_not_change_an_exact_payload() {
    let one = r#"{"transfer_id":"t-1","amount":18446744073709551617,"n":{"b":1,"a":2}}"#;
    let other = r#"{ "n" : { "a" : 2 , "b" : 1 } ,
        "amount" : 18446744073709551617, "transfer_id":"x", "transfer_id" : "t-1" }"#;
    assert_eq!(job(&event("e-1", one)).1, job(&event("e-2", other)).1);
}

/// Through the batch service: the second event reuses the job id with
/// another amount beyond u64. It is a conflict (DLQ), not a duplicate
/// acknowledged without being applied.
#[tokio::test]
async fn a_second_amount_beyond_u64_under_one_job_id_is_a_conflict() {
    let mut config = KitConfig::new("t");
    config.idempotency.job_id = resolver();
    let kit = TestKit::with_config(
        handler_fn(|_: serde_json::Value, _: JobMeta| async { Ok(Effect::new()) }),
        config,
    );
    let record = |message_id: &str, body: &str| {
        serde_json::json!({ "Records": [{
            "messageId": message_id,
            "receiptHandle": format!("rh-{message_id}"),
            "body": body,
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1796212800000"},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:events",
            "awsRegion": "us-east-1"
        }]})
        .to_string()
    };
    let detail = |n: &str| format!(r#"{{"transfer_id":"t-1","amount":{n}}}"#);
    let dead = |run: &idemq::testing::BatchRun| {
        run.dead_letters
            .iter()
            .filter(|m| m.queue_url.ends_with("-dlq"))
            .count()
    };
    let first = kit
        .run_json(&record(
            "m-1",
            &event("e-1", &detail("18446744073709551617")),
        ))
        .await
        .unwrap();
    assert!(first.failed_ids().is_empty() && dead(&first) == 0);
    let second = kit
        .run_json(&record(
            "m-2",
            &event("e-2", &detail("18446744073709551618")),
        ))
        .await
        .unwrap();
    assert_eq!(
        dead(&second),
        1,
        "another amount under t-1 was taken as a duplicate: {:?}",
        second.dead_letters
    );
}
