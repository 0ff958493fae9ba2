//! A replay as a new user would run it, on the local stack: jobs sent with
//! the plain SDK (no `idemq-job-id`, no body pointer, so each job is its
//! MessageId), an outage that dead-letters some through SQS's own redrive,
//! then `idemq dlq redrive` killed with SIGKILL at random instants and rerun
//! until the DLQ is empty. Every job must be applied exactly once.
//!
//! What makes this hard: SQS gives a message moved back from a DLQ a new
//! MessageId, so a killed redrive that sent a copy but did not delete the
//! dead letter produces, on the rerun, a second copy that is a *new job* to
//! a consumer that identifies jobs by MessageId. idemq's redrive stamps each
//! copy with `idemq-job-id` = the id the consumer resolved (here the
//! original MessageId, which SQS's source→DLQ redrive keeps), so the second
//! copy is a duplicate.
//! <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{dlq_total, init_queue, number, redrive_killed_at_random, sdk, work_ledger};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_id_jobs_replayed_by_a_killed_redrive_apply_exactly_once() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "replay", false, 2, 3).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);

    // A plain producer: SendMessageBatch with bodies only.
    let mut expected: HashMap<String, i64> = HashMap::new();
    let accounts = ["down-0", "down-1", "down-2", "up"];
    let mut n = 0;
    for (a, account) in accounts.iter().enumerate() {
        let count = if *account == "up" { 40 } else { 100 };
        for chunk in (1..=count).collect::<Vec<i64>>().chunks(10) {
            let entries = chunk
                .iter()
                .map(|i| {
                    n += 1;
                    let body = serde_json::json!({
                        "transfer_id": format!("t{a}-{i}"),
                        "account": account,
                        "amount": i,
                    });
                    aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body.to_string())
                        .build()
                        .unwrap()
                })
                .collect();
            let out = sqs
                .send_message_batch()
                .queue_url(&res.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .unwrap();
            assert!(out.failed().is_empty(), "{:?}", out.failed());
            *expected.entry(account.to_string()).or_default() += chunk.iter().sum::<i64>();
        }
    }
    assert_eq!(n, 340);

    // The outage: three accounts fail until SQS moves their jobs to the DLQ.
    let first = work_ledger(&res, &["down-0", "down-1", "down-2"], 4).await;
    assert_eq!(first.succeeded, 40, "{}", first.summary());
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 300);

    // The operator replays, and is killed at random instants.
    let kills = redrive_killed_at_random(
        &sqs,
        &res.dlq_url,
        &["--table", &res.table_name, "--rate", "300"],
        Duration::from_millis(900),
    )
    .await;

    let second = work_ledger(&res, &[], 4).await;
    assert_eq!(
        second.succeeded,
        300,
        "each dead letter applied once: {}",
        second.summary()
    );
    for (account, sum) in &expected {
        assert_eq!(
            number(
                &ddb,
                &res.table_name,
                &format!("account#{account}"),
                "balance"
            )
            .await,
            Some(*sum),
            "balance of {account}"
        );
    }
    eprintln!(
        "killed {kills} times; duplicate copies absorbed: {}",
        second.duplicate
    );
}
