//! `TopicProducer` against `PublishBatch` answers LocalStack does not give:
//! an entry failed by SNS itself (retried alone), an entry refused as the
//! sender's fault (reported, never retried), and the attribute every entry
//! carries. `aws-smithy-mocks` stands in for SNS. SNS reports each entry in
//! `Successful` or `Failed`, even with HTTP 200
//! (<https://docs.aws.amazon.com/sns/latest/api/API_PublishBatch.html>).

use std::sync::{Arc, Mutex};

use aws_sdk_sns::Client;
use aws_sdk_sns::config::retry::RetryConfig;
use aws_sdk_sns::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sns::operation::publish_batch::PublishBatchOutput;
use aws_sdk_sns::types::{BatchResultErrorEntry, PublishBatchResultEntry};
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
use idemq::producer::{Job, SendError};
use idemq::topic::TopicProducer;

fn sns(rule: &Rule) -> Client {
    let interceptor = MockResponseInterceptor::new()
        .rule_mode(RuleMode::MatchAny)
        .with_rule(rule);
    let conf = aws_sdk_sns::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "mock"))
        .retry_config(RetryConfig::disabled())
        .http_client(create_mock_http_client())
        .interceptor(interceptor)
        .build();
    Client::from_conf(conf)
}

/// `ok` entries succeed; `failed` ones fail with (code, sender fault).
fn answer(ok: &[&str], failed: &[(&str, &str, bool)]) -> PublishBatchOutput {
    let mut out = PublishBatchOutput::builder();
    for id in ok {
        out = out.successful(
            PublishBatchResultEntry::builder()
                .id(*id)
                .message_id(format!("sns-{id}"))
                .build(),
        );
    }
    for (id, code, sender_fault) in failed {
        out = out.failed(
            BatchResultErrorEntry::builder()
                .id(*id)
                .code(*code)
                .sender_fault(*sender_fault)
                .message("refused")
                .build()
                .unwrap(),
        );
    }
    out.build()
}

/// One call's entries: (id, idemq-job-id attribute).
type Seen = Arc<Mutex<Vec<Vec<(String, String)>>>>;

#[tokio::test]
async fn sns_faults_are_retried_alone_and_sender_faults_are_reported() {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let batch = mock!(Client::publish_batch)
        .match_requests(move |req| {
            log.lock().unwrap().push(
                req.publish_batch_request_entries()
                    .iter()
                    .map(|e| {
                        let id_attr = e
                            .message_attributes()
                            .and_then(|a| a.get("idemq-job-id"))
                            .and_then(|v| v.string_value())
                            .unwrap_or_default()
                            .to_owned();
                        (e.id().to_owned(), id_attr)
                    })
                    .collect(),
            );
            true
        })
        .sequence()
        .output(|| {
            answer(
                &["0"],
                &[
                    ("1", "InternalError", false),
                    ("2", "InvalidParameter", true),
                ],
            )
        })
        .output(|| answer(&["1"], &[]))
        .build();
    let topic = TopicProducer::with_client(sns(&batch), "arn:aws:sns:us-east-1:1:jobs");
    let results = topic
        .send_batch(vec![
            Job::raw("a", "{}"),
            Job::raw("b", "{}"),
            Job::raw("c", "{}"),
        ])
        .await;
    assert_eq!(results[0].1.as_deref(), Ok("sns-0"));
    assert_eq!(results[1].1.as_deref(), Ok("sns-1"));
    match &results[2].1 {
        Err(SendError::Rejected { job_id, code, .. }) => {
            assert_eq!((job_id.as_str(), code.as_str()), ("c", "InvalidParameter"));
        }
        other => panic!("{other:?}"),
    }
    let pair = |id: &str, job: &str| (id.to_string(), job.to_string());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            vec![pair("0", "a"), pair("1", "b"), pair("2", "c")],
            vec![pair("1", "b")],
        ],
        "every entry carries its job id; only SNS's own fault is sent again"
    );
    assert_eq!(batch.num_calls(), 2);
}

#[tokio::test]
async fn an_entry_never_answered_is_reported_not_sent() {
    let never = mock!(Client::publish_batch).then_output(|| answer(&[], &[]));
    let topic = TopicProducer::with_client(sns(&never), "arn:aws:sns:us-east-1:1:jobs");
    let results = topic.send_batch(vec![Job::raw("d", "{}")]).await;
    match &results[0].1 {
        Err(SendError::GaveUp {
            job_id, last_error, ..
        }) => {
            assert_eq!(job_id, "d");
            assert!(
                last_error.contains("out of both Successful and Failed"),
                "{last_error}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(never.num_calls(), 6);
}
