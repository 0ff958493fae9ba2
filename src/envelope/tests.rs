//! The envelopes' unit tests: the LocalStack fixtures, job ids through the
//! resolver, malformed bodies refused without their values, and canonical
//! JSON; in a file of their own so the readers stay short.

use serde_json::Value;

use super::*;
use crate::job::{InvalidJobId, JobIdResolver, JobIdSource, PayloadHash};

/// What SNS delivered to an SQS queue (raw message delivery off) on
/// LocalStack 2026.3, the shape of the AWS example
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>).
const SNS: &str = include_str!("../../tests/fixtures/sns_notification.json");
/// What an EventBridge rule's SQS target received on LocalStack 2026.3.
const EVENT: &str = include_str!("../../tests/fixtures/eventbridge_event.json");

fn sns(message_id: &str, attributes: &str) -> String {
    format!(
        r#"{{"Type":"Notification","MessageId":"{message_id}","TopicArn":"arn:aws:sns:us-east-1:000000000000:t",
        "Message":"{{\"transfer_id\":\"t-1\",\"amount\":5}}","Timestamp":"2026-12-03T09:35:05.087Z",
        "SignatureVersion":"1","Signature":"c2ln","MessageAttributes":{attributes}}}"#
    )
}

#[test]
fn the_fixtures_open() {
    let job = Envelope::Sns.open(SNS).unwrap();
    assert_eq!(job.payload, r#"{"transfer_id": "t1", "amount": 5}"#);
    assert_eq!(job.job_id_attribute.as_deref(), Some("job-1"));
    assert_eq!(
        job.envelope_id.as_deref(),
        Some("d18f9247-33ad-4020-8ba1-c4ca357fcab7")
    );
    let job = Envelope::EventBridge.open(EVENT).unwrap();
    // Canonical: keys sorted at every level, compact.
    assert_eq!(
        job.payload,
        r#"{"amount":7,"b":{"a":2,"z":1},"transfer_id":"t2"}"#
    );
    assert_eq!(job.job_id_attribute, None);
    assert_eq!(
        job.envelope_id.as_deref(),
        Some("b45d6150-fa71-4016-9b34-c51e24549650")
    );
    // No envelope: the body itself, borrowed.
    let job = Envelope::None.open(SNS).unwrap();
    assert!(matches!(job.payload, Cow::Borrowed(b) if b == SNS));
}

#[test]
fn sns_attribute_then_pointer_then_message_id() {
    let with_attr = sns(
        "m-1",
        r#"{"idemq-job-id":{"Type":"String","Value":"job-9"},"x":{"Type":"Binary","Value":"AAE="}}"#,
    );
    let plain = JobIdResolver::new().with_envelope(Envelope::Sns);
    let pointer = plain.clone().with_body_pointer("/transfer_id");
    let job = pointer.resolve_job(None, &with_attr, "sqs-1").unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        ("job-9", JobIdSource::Attribute)
    );
    assert_eq!(job.payload, r#"{"transfer_id":"t-1","amount":5}"#);

    // The SQS message's own attribute (idemq's redrive stamp) wins.
    let job = pointer
        .resolve_job(Some("stamped"), &with_attr, "sqs-1")
        .unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        ("stamped", JobIdSource::Attribute)
    );

    let without = sns("m-2", r#"{"other":{"Type":"String","Value":"v"}}"#);
    let job = pointer.resolve_job(None, &without, "sqs-1").unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        ("t-1", JobIdSource::BodyPointer)
    );
    let job = plain.resolve_job(None, &without, "sqs-1").unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        ("m-2", JobIdSource::EnvelopeId)
    );
    // No MessageAttributes at all, or a pointer to nothing: MessageId.
    let bare = r#"{"Type":"Notification","MessageId":"m-3","Message":"{}"}"#;
    let job = pointer.resolve_job(None, bare, "sqs-1").unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        ("m-3", JobIdSource::EnvelopeId)
    );
    // A Number attribute is an id too.
    let number = sns("m-4", r#"{"idemq-job-id":{"Type":"Number","Value":"42"}}"#);
    assert_eq!(
        plain.resolve_job(None, &number, "s").unwrap().id.as_str(),
        "42"
    );
}

#[test]
fn republishing_the_same_job_gives_the_same_id_and_payload() {
    let r = JobIdResolver::new().with_envelope(Envelope::Sns);
    let attr = r#"{"idemq-job-id":{"Type":"String","Value":"job-1"}}"#;
    let a = sns("m-1", attr);
    let b = sns("m-2", attr)
        .replace("c2ln", "b3RoZXI=")
        .replace("05.087Z", "09.001Z");
    let (a, b) = (
        r.resolve_job(None, &a, "sqs-a").unwrap(),
        r.resolve_job(None, &b, "sqs-b").unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(
        PayloadHash::of(a.payload.as_bytes()),
        PayloadHash::of(b.payload.as_bytes())
    );
}

#[test]
fn eventbridge_pointer_applies_to_detail_then_the_event_id() {
    let r = JobIdResolver::new()
        .with_envelope(Envelope::EventBridge)
        .with_body_pointer("/transfer_id");
    let job = r.resolve_job(None, EVENT, "sqs-1").unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        ("t2", JobIdSource::BodyPointer)
    );
    let job = JobIdResolver::new()
        .with_envelope(Envelope::EventBridge)
        .resolve_job(None, EVENT, "sqs-1")
        .unwrap();
    assert_eq!(
        (job.id.as_str(), job.source),
        (
            "b45d6150-fa71-4016-9b34-c51e24549650",
            JobIdSource::EnvelopeId
        )
    );
    // The same detail laid out differently is the same payload.
    let other = r#"{"id":"e-2","time":"2027-01-01T00:00:00Z","detail":{ "transfer_id" : "t2",
        "b" : { "z" : 1, "a" : 2 }, "amount" : 7 }}"#;
    assert_eq!(
        r.resolve_job(None, other, "sqs-2").unwrap().payload,
        job.payload
    );
    // A pointer to a non-scalar in detail is refused, as for plain bodies.
    let r = r.with_body_pointer("/b");
    assert!(matches!(
        r.resolve_job(None, EVENT, "s"),
        Err(InvalidJobId::NotAScalar {
            found: "object",
            ..
        })
    ));
}

fn open_err(envelope: Envelope, body: &str) -> EnvelopeError {
    envelope.open(body).unwrap_err()
}

#[test]
fn malformed_envelopes_are_refused_without_their_values() {
    let secret = "s3cr3t-card-4111";
    let cases: Vec<(Envelope, String, EnvelopeError)> = vec![
        (
            Envelope::Sns,
            format!("{{\"Type\":\"Notification\",\"Message\":\"{secret}"),
            EnvelopeError::NotJson {
                envelope: Envelope::Sns,
                detail: "unexpected end of input at line 1 column 50".into(),
            },
        ),
        (
            Envelope::Sns,
            format!("[\"{secret}\"]"),
            EnvelopeError::NotAnObject {
                envelope: Envelope::Sns,
                found: "array",
            },
        ),
        (
            // Raw message delivery on: the body is the job itself.
            Envelope::Sns,
            format!("{{\"transfer_id\":\"{secret}\"}}"),
            EnvelopeError::Missing {
                envelope: Envelope::Sns,
                field: "Type",
            },
        ),
        (
            Envelope::Sns,
            format!("{{\"Type\":\"{secret}\",\"MessageId\":\"m\",\"Message\":\"x\"}}"),
            EnvelopeError::NotANotification {
                found: "an unknown type",
            },
        ),
        (
            Envelope::Sns,
            r#"{"Type":"SubscriptionConfirmation","MessageId":"m","Message":"x"}"#.into(),
            EnvelopeError::NotANotification {
                found: "SubscriptionConfirmation",
            },
        ),
        (
            Envelope::Sns,
            format!("{{\"Type\":\"Notification\",\"Message\":\"{secret}\"}}"),
            EnvelopeError::Missing {
                envelope: Envelope::Sns,
                field: "MessageId",
            },
        ),
        (
            Envelope::Sns,
            r#"{"Type":"Notification","MessageId":"m"}"#.into(),
            EnvelopeError::Missing {
                envelope: Envelope::Sns,
                field: "Message",
            },
        ),
        (
            Envelope::Sns,
            format!("{{\"Type\":\"Notification\",\"MessageId\":\"m\",\"Message\":{{\"k\":\"{secret}\"}}}}"),
            EnvelopeError::WrongType {
                envelope: Envelope::Sns,
                field: "Message",
                found: "object",
                expected: "string",
            },
        ),
        (
            Envelope::Sns,
            format!(
                "{{\"Type\":\"Notification\",\"MessageId\":\"m\",\"Message\":\"x\",\"MessageAttributes\":{{\"idemq-job-id\":{{\"Type\":\"Binary\",\"Value\":\"{secret}\"}}}}}}"
            ),
            EnvelopeError::JobIdAttributeType { found: "Binary" },
        ),
        (
            Envelope::Sns,
            r#"{"Type":"Notification","MessageId":"m","Message":"x","MessageAttributes":{"idemq-job-id":{"Type":"String"}}}"#.into(),
            EnvelopeError::Missing {
                envelope: Envelope::Sns,
                field: "MessageAttributes.idemq-job-id.Value",
            },
        ),
        (
            Envelope::Sns,
            r#"{"Type":"Notification","MessageId":"m","Message":"x","MessageAttributes":["a"]}"#.into(),
            EnvelopeError::WrongType {
                envelope: Envelope::Sns,
                field: "MessageAttributes",
                found: "array",
                expected: "object",
            },
        ),
        (
            Envelope::EventBridge,
            format!("{{\"detail\":{{\"k\":\"{secret}\"}}}}"),
            EnvelopeError::Missing {
                envelope: Envelope::EventBridge,
                field: "id",
            },
        ),
        (
            Envelope::EventBridge,
            r#"{"id":"e-1","detail":null}"#.into(),
            EnvelopeError::Missing {
                envelope: Envelope::EventBridge,
                field: "detail",
            },
        ),
        (
            Envelope::EventBridge,
            format!("{{\"id\":7,\"detail\":\"{secret}\"}}"),
            EnvelopeError::WrongType {
                envelope: Envelope::EventBridge,
                field: "id",
                found: "number",
                expected: "string",
            },
        ),
        (
            Envelope::EventBridge,
            secret.to_string(),
            EnvelopeError::NotJson {
                envelope: Envelope::EventBridge,
                detail: "syntax error at line 1 column 1".into(),
            },
        ),
    ];
    for (envelope, body, want) in cases {
        let got = open_err(envelope, &body);
        assert_eq!(got, want, "{body}");
        let text = got.to_string();
        assert!(!text.contains(secret), "payload bytes in {text:?}");
        // Through the resolver: a permanent InvalidJobId with the same text.
        let err = JobIdResolver::new()
            .with_envelope(envelope)
            .resolve_job(Some("attr-wins-only-after-parsing"), &body, "m")
            .unwrap_err();
        assert_eq!(err, InvalidJobId::Envelope(want));
        assert_eq!(err.to_string(), text);
    }
    let text = open_err(Envelope::Sns, r#"{"transfer_id":1}"#).to_string();
    assert!(text.contains("raw message delivery"), "{text}");
    let text = open_err(
        Envelope::Sns,
        r#"{"Type":"SubscriptionConfirmation","MessageId":"m","Message":"x"}"#,
    )
    .to_string();
    assert!(text.contains("SubscribeURL"), "{text}");
}

#[test]
fn envelope_id_identity_is_warned_once_per_process() {
    // Whatever warned before in this process, never a second time.
    warn_envelope_id_identity(Envelope::Sns);
    assert!(!warn_envelope_id_identity(Envelope::EventBridge));
    assert!(!warn_envelope_id_identity(Envelope::Sns));
}

#[test]
fn envelope_names_parse() {
    assert_eq!("sns".parse(), Ok(Envelope::Sns));
    assert_eq!("EventBridge".parse(), Ok(Envelope::EventBridge));
    assert_eq!("none".parse(), Ok(Envelope::None));
    assert_eq!("".parse(), Ok(Envelope::None));
    assert_eq!("sqs".parse::<Envelope>(), Err(UnknownEnvelope));
    for e in [Envelope::None, Envelope::Sns, Envelope::EventBridge] {
        assert_eq!(e.to_string().parse(), Ok(e));
    }
}

#[test]
fn canonical_json_sorts_keys_and_keeps_values() {
    let v: Value = serde_json::from_str(r#"{"b":[{"y":1,"x":"é\n"}],"a":null,"c":1.5}"#).unwrap();
    assert_eq!(
        canonical_json(&v),
        r#"{"a":null,"b":[{"x":"é\n","y":1}],"c":1.5}"#
    );
    let back: Value = serde_json::from_str(&canonical_json(&v)).unwrap();
    assert_eq!(back, v);
}
