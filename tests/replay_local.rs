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

#[allow(dead_code)]
#[path = "../examples/ledger.rs"]
mod ledger;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{init_queue, number, sdk};
use idemq::backoff::Backoff;
use idemq::batch::BatchConfig;
use idemq::dlq::peek::Peek;
use idemq::init::InitReport;
use idemq::worker::{WorkerArgs, run_with};

async fn work(res: &InitReport, down: &[&str]) -> idemq::metrics::BatchMetrics {
    let ledger = ledger::Ledger {
        table: res.table_name.clone(),
        fail_accounts: down.iter().map(|a| a.to_string()).collect(),
    };
    let mut args = WorkerArgs::new(res.queue_url.clone());
    args.table = Some(res.table_name.clone());
    args.concurrency = Some(8);
    args.exit_when_idle = Some(4);
    let batch = BatchConfig {
        backoff: Backoff::new()
            .with_base(Duration::from_secs(1))
            .with_cap(Duration::from_secs(1)),
        ..BatchConfig::default()
    };
    run_with(ledger, args, batch).await.expect("worker")
}

async fn dlq_total(sqs: &aws_sdk_sqs::Client, dlq_url: &str) -> u64 {
    Peek::new(sqs.clone(), dlq_url, Duration::from_secs(1))
        .depth()
        .await
        .unwrap()
        .total()
}

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
    let first = work(&res, &["down-0", "down-1", "down-2"]).await;
    assert_eq!(first.succeeded, 40, "{}", first.summary());
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 300);

    // The operator replays, and is killed at random instants.
    let mut kills = 0;
    let started = Instant::now();
    while dlq_total(&sqs, &res.dlq_url).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "redrive did not converge"
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemq"))
            .args([
                "dlq",
                "redrive",
                "--dlq-url",
                &res.dlq_url,
                "--table",
                &res.table_name,
                "--hold-secs",
                "2",
                "--rate",
                "300",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let after = Duration::from_millis(50 + u64::from(rand::random::<u16>() % 900));
        tokio::time::sleep(after).await;
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        // What a killed run held comes back after its 2 s hold.
        tokio::time::sleep(Duration::from_millis(2100)).await;
    }
    assert!(kills >= 1, "the redrive was never killed mid-way");

    let second = work(&res, &[]).await;
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
