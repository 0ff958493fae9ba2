//! Sends to SQS against answers the local emulators do not give (or not
//! reliably): idemq's own dead letters refused by the DLQ, and a
//! `SendMessageBatch` that leaves an entry out of both result lists.
//! `aws-smithy-mocks` stands in for SQS.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::ErrorMetadata;
use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesOutput;
use aws_sdk_sqs::operation::send_message::{SendMessageError, SendMessageOutput};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchResultEntry};
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
use idemq::dead_letter::{
    ATTR_ATTEMPTS, ATTR_DEPLOY, ATTR_ERROR, ATTR_FAILED_AT, ATTR_SOURCE_QUEUE, DeadLetter,
    DeadLetters,
};
use idemq::failure::{DlqError, FailureRecord};
use idemq::failure::{Failure, FailureKind};
use idemq::producer::{Job, Producer, SendError};

type Attributes = HashMap<String, MessageAttributeValue>;

fn sqs(rules: &[&Rule]) -> Client {
    let mut interceptor = MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny);
    for rule in rules {
        interceptor = interceptor.with_rule(rule);
    }
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "mock"))
        .retry_config(RetryConfig::disabled())
        .http_client(create_mock_http_client())
        .interceptor(interceptor)
        .build();
    Client::from_conf(conf)
}

/// Dead letters are sent with SQS alone.
fn dead_letters(sqs: Client) -> DeadLetters {
    DeadLetters::new(sqs)
}

fn max_size(bytes: usize) -> Rule {
    mock!(Client::get_queue_attributes).then_output(move || {
        GetQueueAttributesOutput::builder()
            .attributes(QueueAttributeName::MaximumMessageSize, bytes.to_string())
            .build()
    })
}

fn attr(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .unwrap()
}

fn record() -> FailureRecord {
    FailureRecord {
        job_id: Some("order-7".into()),
        message_id: "m-1".into(),
        attempt: 1,
        failure: Failure {
            kind: FailureKind::Permanent,
            error: "amount is not positive".into(),
            chain: vec![],
            backtrace: None,
        },
        failed_at: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        source_queue: "orders".into(),
        payload_hash: "h".into(),
        deploy: "7".into(),
        idemq_version: "0.1.0".into(),
    }
}

fn names(attrs: &Attributes) -> Vec<String> {
    let mut n: Vec<String> = attrs.keys().cloned().collect();
    n.sort();
    n
}

/// Records the attributes of every SendMessage and answers it with
/// `InvalidParameterValue` (SQS's answer to a value with a character it
/// refuses, or a message over MaximumMessageSize:
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>)
/// while it carries the context attribute `refused`, with success otherwise.
fn send_refusing(refused: &'static str, seen: Arc<Mutex<Vec<Attributes>>>) -> (Rule, Rule) {
    let seen_refused = seen.clone();
    let refuse = mock!(Client::send_message)
        .match_requests(move |req| {
            let attrs = req.message_attributes().cloned().unwrap_or_default();
            let hit = attrs.contains_key(refused);
            if hit {
                seen_refused.lock().unwrap().push(attrs);
            }
            hit
        })
        .then_error(|| {
            SendMessageError::generic(
                ErrorMetadata::builder()
                    .code("InvalidParameterValue")
                    .message("Invalid characters found.")
                    .build(),
            )
        });
    let accept = mock!(Client::send_message)
        .match_requests(move |req| {
            seen.lock()
                .unwrap()
                .push(req.message_attributes().cloned().unwrap_or_default());
            true
        })
        .then_output(|| SendMessageOutput::builder().message_id("dlq-1").build());
    (refuse, accept)
}

/// SQS refuses the dead letter with its context as invalid: idemq sends it
/// again bare (producer attributes + idemq-job-id) instead of failing, which
/// would leave it on the source queue and rerun its handler on every receive.
#[tokio::test]
async fn a_dead_letter_refused_as_invalid_is_sent_again_bare() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (refuse, accept) = send_refusing(ATTR_ERROR, seen.clone());
    let size = max_size(1024 * 1024);
    let dl = dead_letters(sqs(&[&size, &refuse, &accept]));
    let attrs = Attributes::from([("tenant".to_string(), attr("acme"))]);
    let first = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
    let letter = DeadLetter {
        body: "{}",
        attributes: &attrs,
        group_id: None,
        first_enqueued: Some(first),
    };
    dl.send("https://dlq", &letter, &record())
        .await
        .expect("the bare copy is accepted");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one refused send, one bare send");
    assert_eq!(
        names(&seen[0]),
        vec![
            ATTR_ATTEMPTS,
            ATTR_DEPLOY,
            ATTR_ERROR,
            ATTR_FAILED_AT,
            "idemq-first-enqueued",
            "idemq-job-id",
            ATTR_SOURCE_QUEUE,
            "tenant"
        ]
    );
    // The bare copy still says how old its job is: a replay of it must
    // not take the DLQ send for the job's first enqueue.
    assert_eq!(
        names(&seen[1]),
        vec!["idemq-first-enqueued", "idemq-job-id", "tenant"]
    );
    assert_eq!(seen[1]["idemq-job-id"].string_value(), Some("order-7"));
    assert_eq!(
        seen[1]["idemq-first-enqueued"].string_value(),
        Some("1700000000123")
    );
    assert_eq!(refuse.num_calls(), 1);
}

/// A refusal of the bare message itself is an error (the message stays on
/// its queue), after exactly one retry.
#[tokio::test]
async fn a_bare_dead_letter_refused_is_an_error() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (refuse, _) = send_refusing("idemq-job-id", seen.clone());
    let size = max_size(1024 * 1024);
    let dl = dead_letters(sqs(&[&size, &refuse]));
    let attrs = Attributes::new();
    let letter = DeadLetter {
        body: "{}",
        attributes: &attrs,
        group_id: None,
        first_enqueued: None,
    };
    let err = dl
        .send("https://dlq", &letter, &record())
        .await
        .unwrap_err();
    assert!(matches!(err, DlqError::Sqs(_)), "{err}");
    assert_eq!(refuse.num_calls(), 2, "with context, then bare; no more");
}

/// Body + attributes + context over the DLQ's MaximumMessageSize: the
/// context is left out before sending (the failure record keeps it), and
/// the DLQ's size is read once per DLQ.
#[tokio::test]
async fn context_is_left_out_when_the_letter_would_not_fit_the_dlq() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (refuse, accept) = send_refusing("never-sent", seen.clone());
    let size = max_size(1024);
    let dl = dead_letters(sqs(&[&size, &refuse, &accept]));
    let attrs = Attributes::new();
    let body = "x".repeat(950);
    let letter = DeadLetter {
        body: &body,
        attributes: &attrs,
        group_id: None,
        first_enqueued: None,
    };
    dl.send("https://dlq", &letter, &record()).await.unwrap();
    // A small body on the same DLQ still gets its context.
    let small = DeadLetter {
        body: "{}",
        attributes: &attrs,
        group_id: None,
        first_enqueued: None,
    };
    dl.send("https://dlq", &small, &record()).await.unwrap();
    {
        let seen = seen.lock().unwrap();
        assert_eq!(names(&seen[0]), vec!["idemq-job-id"]);
        assert!(seen[1].contains_key(ATTR_ERROR));
    }
    assert_eq!(size.num_calls(), 1, "MaximumMessageSize read once per DLQ");

    // Over the limit even bare: an error naming the sizes, and no send.
    let huge = "x".repeat(1100);
    let letter = DeadLetter {
        body: &huge,
        attributes: &attrs,
        group_id: None,
        first_enqueued: None,
    };
    let err = dl
        .send("https://dlq", &letter, &record())
        .await
        .unwrap_err();
    assert!(
        matches!(err, DlqError::TooLarge { limit: 1024, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("the DLQ takes at most 1024"),
        "{err}"
    );
    assert_eq!(accept.num_calls(), 2);
}

fn batch_output(ok: &[&str]) -> SendMessageBatchOutput {
    SendMessageBatchOutput::builder()
        .set_successful(Some(
            ok.iter()
                .map(|id| {
                    SendMessageBatchResultEntry::builder()
                        .id(*id)
                        .message_id(format!("mid-{id}"))
                        .md5_of_message_body("x")
                        .build()
                        .unwrap()
                })
                .collect(),
        ))
        .set_failed(Some(vec![]))
        .build()
        .unwrap()
}

/// SendMessageBatch answers every entry in `Successful` or `Failed`
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html>);
/// an entry left out of both is retried like a failed one, and reported if
/// it never comes back: never a panic.
#[tokio::test]
async fn an_entry_left_out_of_both_result_lists_is_retried_then_reported() {
    let entries_seen = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let log = entries_seen.clone();
    let batch = mock!(Client::send_message_batch)
        .match_requests(move |req| {
            log.lock()
                .unwrap()
                .push(req.entries().iter().map(|e| e.id().to_owned()).collect());
            true
        })
        .sequence()
        .output(|| batch_output(&["0"])) // entry "1" in neither list
        .output(|| batch_output(&["1"]))
        .build();
    let size = max_size(1024 * 1024);
    let producer = Producer::with_client(sqs(&[&size, &batch]), "https://q")
        .await
        .unwrap();
    let results = producer
        .send_batch(vec![Job::raw("a", "{}"), Job::raw("b", "{}")])
        .await;
    assert_eq!(results[0].1.as_deref(), Ok("mid-0"));
    assert_eq!(results[1].1.as_deref(), Ok("mid-1"));
    assert_eq!(
        *entries_seen.lock().unwrap(),
        vec![
            vec!["0".to_string(), "1".to_string()],
            vec!["1".to_string()]
        ],
        "only the missing entry is sent again"
    );

    // Never answered: reported as not sent, naming why.
    let never = mock!(Client::send_message_batch).then_output(|| batch_output(&[]));
    let size = max_size(1024 * 1024);
    let producer = Producer::with_client(sqs(&[&size, &never]), "https://q")
        .await
        .unwrap();
    let results = producer.send_batch(vec![Job::raw("c", "{}")]).await;
    match &results[0].1 {
        Err(SendError::GaveUp {
            job_id, last_error, ..
        }) => {
            assert_eq!(job_id, "c");
            assert!(
                last_error.contains("out of both Successful and Failed"),
                "{last_error}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(never.num_calls(), 6, "tried as often as any failed entry");
}
