//! `idemq dlq` on the local stack: the operator's tool after an outage.

mod common;

#[allow(dead_code)]
#[path = "../examples/ledger.rs"]
mod ledger;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName as Sys};
use common::{attribute, idemq, init_queue, number, sdk, unique};
use idemq::backoff::Backoff;
use idemq::batch::BatchConfig;
use idemq::dlq::peek::Peek;
use idemq::init::InitReport;
use idemq::producer::{Job, Producer};
use idemq::worker::{WorkerArgs, run_with};

/// Sends `n` transfers to `account`, amounts 1..=n; returns their sum.
async fn send_transfers(producer: &Producer, prefix: &str, account: &str, n: usize) -> i64 {
    let jobs: Vec<Job> = (1..=n)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            Job::new(
                id.clone(),
                &serde_json::json!({"transfer_id": id, "account": account, "amount": i}),
            )
            .unwrap()
        })
        .collect();
    for (id, r) in producer.send_batch(jobs).await {
        r.unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    (1..=n as i64).sum()
}

/// Runs the ledger worker until the queue is idle; accounts in `down` fail.
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

/// 300 dead letters from an outage: `list --json` shows each with its last
/// error and attempts; once the outage is over, `redrive` brings every
/// balance to its exact value and empties the DLQ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_then_list_then_redrive_makes_every_balance_exact() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 2, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let down_sum = send_transfers(&producer, "d", "acct-down", 300).await;
    let up_sum = send_transfers(&producer, "u", "acct-up", 50).await;

    let first = work(&res, &["acct-down"]).await;
    assert_eq!(first.succeeded, 50, "{}", first.summary());
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 300);

    let out = idemq(&[
        "dlq",
        "list",
        "--json",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 300);
    let ids: HashSet<&str> = rows.iter().map(|r| r["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 300);
    for r in &rows {
        assert_eq!(
            r["last_error"], "downstream outage for account acct-down",
            "{r}"
        );
        assert_eq!(r["attempts"], 2, "{r}");
        assert!(
            r["source_queue"].as_str().unwrap().starts_with("dlq-"),
            "{r}"
        );
        assert!(r["failed_at"].as_str().unwrap().ends_with('Z'));
        assert!(r["payload_bytes"].as_u64().unwrap() > 40);
        assert!(!r["message_id"].as_str().unwrap().is_empty());
    }
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        300,
        "listing consumed nothing"
    );

    let out = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("moved 300, skipped 0, failed 0"),
        "{stdout}"
    );

    let second = work(&res, &[]).await;
    assert_eq!(second.succeeded, 300, "{}", second.summary());
    assert_eq!(
        number(&ddb, &res.table_name, "account#acct-down", "balance").await,
        Some(down_sum)
    );
    assert_eq!(
        number(&ddb, &res.table_name, "account#acct-up", "balance").await,
        Some(up_sum)
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
}

/// kill -9 the CLI at random instants during a 500-message redrive, rerun
/// until the DLQ is empty: nothing lost, nothing applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_killed_at_random_instants_loses_nothing() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let mut expected = HashMap::new();
    for a in 0..5 {
        let account = format!("acct-{a}");
        expected.insert(
            account.clone(),
            send_transfers(&producer, &format!("k{a}"), &account, 100).await,
        );
    }
    let accounts: Vec<&str> = expected.keys().map(String::as_str).collect();
    work(&res, &accounts).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 500);

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
                "--hold-secs",
                "2",
                "--rate",
                "400",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let after = Duration::from_millis(50 + u64::from(rand::random::<u16>() % 1200));
        tokio::time::sleep(after).await;
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        // Held messages come back after their 2 s hold.
        tokio::time::sleep(Duration::from_millis(2100)).await;
    }
    assert!(kills >= 1, "the redrive was never killed mid-way");

    let totals = work(&res, &[]).await;
    assert_eq!(
        totals.succeeded,
        500,
        "every transfer applied exactly once: {}",
        totals.summary()
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
            Some(*sum)
        );
    }
    eprintln!(
        "killed {kills} times; duplicates absorbed: {}",
        totals.duplicate
    );
}

fn attr_s(t: &str, v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(t)
        .string_value(v)
        .build()
        .unwrap()
}

type Seen = (
    String,
    String,
    HashMap<String, MessageAttributeValue>,
    Option<String>,
    Option<String>,
);

/// Everything on the queue: (job id, body, attributes, group, dedup id).
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<Seen> {
    common::drain(sqs, url)
        .await
        .iter()
        .map(|m| {
            let sys = m.attributes().cloned().unwrap_or_default();
            (
                attribute(m, "idemq-job-id").to_owned(),
                m.body().unwrap_or_default().to_owned(),
                m.message_attributes().cloned().unwrap_or_default(),
                sys.get(&Sys::MessageGroupId).cloned(),
                sys.get(&Sys::MessageDeduplicationId).cloned(),
            )
        })
        .collect()
}

/// FIFO dead letters with String, Number and Binary attributes: a dry run
/// moves nothing; a selective redrive moves exactly the chosen ones with
/// body, attributes and group intact; a move to another queue keeps even
/// the deduplication id.
#[tokio::test]
async fn selective_redrive_and_dry_run_keep_attributes_and_fifo_fields() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", true, 1, 5).await;
    let other = init_queue(&sdk, "dlq", true, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let mut sent = HashMap::new();
    let jobs: Vec<Job> = (1..=6)
        .map(|i| {
            let mut job = Job::raw(format!("j{i}"), format!("{{\"n\":{i},\"text\":\"ü\\n\"}}"))
                .in_group(format!("g{}", i % 2));
            job.attributes
                .insert("note".into(), attr_s("String", &format!("note {i} ✓")));
            job.attributes
                .insert("n".into(), attr_s("Number.int", &format!("{}", i * 7)));
            job.attributes.insert(
                "blob".into(),
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(Blob::new(vec![0, i as u8, 255]))
                    .build()
                    .unwrap(),
            );
            sent.insert(job.id.clone(), job.clone());
            job
        })
        .collect();
    for (_, r) in producer.send_batch(jobs).await {
        r.unwrap();
    }
    // One receive each (maxReceiveCount 1), never deleted: SQS's redrive
    // moves them to the DLQ on the next receive.
    let deadline = Instant::now() + Duration::from_secs(60);
    while dlq_total(&sqs, &res.dlq_url).await < 6 {
        assert!(Instant::now() < deadline, "messages never reached the DLQ");
        sqs.receive_message()
            .queue_url(&res.queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(1)
            .send()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }

    let pick = [
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--job-id",
        "j1",
        "--job-id",
        "j4",
    ];
    let dry = idemq(&[&pick[..], &["--dry-run"]].concat());
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{stdout}");
    assert!(stdout.contains("would move 2, skipped 4"), "{stdout}");
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        6,
        "dry run moved nothing"
    );

    let out = idemq(&pick);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved 2, skipped 4, failed 0"), "{stdout}");
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 4);

    let back = drain(&sqs, &res.queue_url).await;
    let ids: HashSet<&str> = back.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(ids, HashSet::from(["j1", "j4"]), "exactly the chosen ones");
    for (id, body, attrs, group, dedup) in &back {
        let orig = &sent[id];
        assert_eq!(body, &orig.body, "body byte for byte");
        let mut want = orig.attributes.clone();
        want.insert("idemq-job-id".into(), attr_s("String", id));
        assert_eq!(attrs, &want, "every attribute byte for byte");
        assert_eq!(group, &orig.group_id);
        // Back to the queue it came from within SQS's 5-minute dedup
        // interval: a new id, or SQS would drop the copy.
        assert!(dedup.as_deref().unwrap().starts_with("redrive-"));
    }

    // The rest to another FIFO queue: even the deduplication id survives.
    let moved = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--to",
        &other.queue_url,
    ]);
    assert!(String::from_utf8_lossy(&moved.stdout).contains("moved 4, skipped 0, failed 0"));
    let there = drain(&sqs, &other.queue_url).await;
    assert_eq!(there.len(), 4);
    for (id, body, _, group, dedup) in &there {
        assert_eq!(body, &sent[id].body);
        assert_eq!(group, &sent[id].group_id);
        assert_eq!(
            dedup.as_deref(),
            Some(id.as_str()),
            "the producer's dedup id, kept"
        );
    }
}

/// `redrive --native` (StartMessageMoveTask) moves everything back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_redrive_moves_everything_back() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    send_transfers(&producer, "n", "acct-down", 40).await;
    work(&res, &["acct-down"]).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 40);

    let out = idemq(&["dlq", "redrive", "--native", "--dlq-url", &res.dlq_url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("native move task completed: moved 40"),
        "{stdout}"
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
    let totals = work(&res, &[]).await;
    assert_eq!(totals.succeeded, 40, "{}", totals.summary());
}

/// Export then import: every message survives the round trip, and
/// `export --delete` empties the DLQ only after the file reads back whole.
#[tokio::test]
async fn export_delete_then_import_round_trips() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    send_transfers(&producer, "e", "acct-down", 25).await;
    work(&res, &["acct-down"]).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 25);

    let file = std::env::temp_dir().join(format!("{}.jsonl", unique("export")));
    let path = file.to_str().unwrap();
    let out = idemq(&[
        "dlq",
        "export",
        path,
        "--delete",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("exported 25"));
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
    let lines = std::fs::read_to_string(&file).unwrap();
    assert_eq!(lines.lines().count(), 25);
    assert!(
        lines.lines().all(|l| l.contains("downstream outage")),
        "context exported"
    );

    let out = idemq(&["dlq", "import", path, "--to", &res.queue_url]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported 25, failed 0"));
    let totals = work(&res, &[]).await;
    assert_eq!(totals.succeeded, 25, "{}", totals.summary());
}
